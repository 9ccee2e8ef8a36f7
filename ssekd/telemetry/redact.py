"""Credentials never reach a log line: what a URI looks like once its tokens are hidden.

A browser's EventSource cannot send headers, so a token often travels in the query string
(`?access_token=…`, or a page's own `?token=…`); a URI written to an event, a failure in Twisted's
log or an OTLP log record would carry it to whoever reads the logs. Two rules, applied to every URI
that is logged:

- the value of a query parameter a guard reads its token from (the http binding's
  `authorization.<guard>.credentials.query` names) is hidden, whatever it looks like;
- anything shaped like a JWT (three base64url parts, the first starting `eyJ`, which is how a JSON
  header `{"` begins in base64url) is hidden wherever it is, in the path or under any name.

`EventLog` applies the second rule to every event detail as well, so an event that names a URI it
did not redact still prints no token.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from urllib.parse import unquote_plus

#: What stands in for a hidden value.
MASK = "…"

#: A compact JWS (or the first three parts of a JWE): base64url header `{"…`, payload, signature.
_JWT = re.compile(r"eyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*")


def hide_jwts(text: str) -> str:
    """`text` with every JWT-shaped run replaced by `MASK`."""
    return _JWT.sub(MASK, text) if "eyJ" in text else text


def redact_uri(uri: str, names: Collection[str] = ()) -> str:
    """`uri` (path and query, percent-encoded as received) fit for a log line: the values of the
    query parameters in `names` and every JWT-shaped run hidden."""
    base, sep, query = uri.partition("?")
    if sep and names:
        parts = []
        for pair in query.split("&"):
            raw_name = pair.partition("=")[0]
            parts.append(f"{raw_name}={MASK}" if unquote_plus(raw_name) in names else pair)
        uri = f"{base}?{'&'.join(parts)}"
    return hide_jwts(uri)
