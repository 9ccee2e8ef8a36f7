"""What the http binding checks of requests (server) and responses (client): `options.requests`.

Why: an exit (Kafka, a filesystem, an upstream) should see only requests that are what the API
says, and a client only answers that are; Zilla's examples rely on it. A request that fails is
`400` before its route's exit sees anything, saying which part failed and why, never the value
(a header may be a credential, a body anything); a catalog that cannot answer yet is waited for,
then `503` with `Retry-After`.

Where each part is: `values` (the models of one value: `string`, `int32`/`int64`, `json`/`avro`
from a catalog), `builder` (models from the config, collecting config issues), `requests` (the
entries: which one a request is checked by, and its checks), `responses` (the http client's
check of its upstream's answers), `waiting` (waiting for a catalog; the refusal's answer) and
`schema` (the config schema, and building a binding's entries from its config).
"""

from ssekd.bindings.http.validation.requests import Refused, Requests
from ssekd.bindings.http.validation.responses import ResponseValidation
from ssekd.bindings.http.validation.schema import (
    CLIENT_REQUESTS_SCHEMA,
    REQUESTS_SCHEMA,
    build_for,
    catalogs_named,
)
from ssekd.bindings.http.validation.waiting import refusal_body, retry_after, settle

__all__ = [
    "CLIENT_REQUESTS_SCHEMA",
    "REQUESTS_SCHEMA",
    "Refused",
    "Requests",
    "ResponseValidation",
    "build_for",
    "catalogs_named",
    "refusal_body",
    "retry_after",
    "settle",
]
