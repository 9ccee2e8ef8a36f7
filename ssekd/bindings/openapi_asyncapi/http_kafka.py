"""An OpenAPI operation paired with a Kafka operation, as an http-kafka route: the pairing rules
are the asyncapi proxy's (`ssekd.bindings.asyncapi.http_kafka`, Zilla's), fed with what an
OpenAPI operation says:

- `merged`: a JSON response of the operation is an array (Zilla merges every key's latest value
  into it);
- `location`: a `202` response header whose schema's `format` is a path with
  `{correlationId}` (Zilla's async write: the GET of that path answers the reply);

and then the operation's `x-zilla-http-kafka` extension, which only OpenAPI specs carry:
`filters` (key, headers) added to a fetch, `key` and `overrides` of a produce. `{name}` in them
is a path parameter, `{identity}` the identity of the route's guard.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ssekd.bindings.asyncapi.http_kafka import (
    CORRELATION_ID,
    HttpOperation,
    KafkaOperation,
    as_template,
    http_kafka_route,
)
from ssekd.bindings.openapi.spec import Operation, is_json

EXTENSION = "x-zilla-http-kafka"

__all__ = ["EXTENSION", "KafkaOperation", "http_operation", "route"]


def http_operation(op: Operation) -> HttpOperation:
    """What the pairing needs of an OpenAPI operation."""
    merged = any(is_json(c.media_type) and isinstance(c.schema, Mapping)
                 and c.schema.get("type") == "array"
                 for r in op.responses for c in r.content)
    location = None
    for response in op.responses:
        if response.status != "202":
            continue
        for header in response.headers.values():
            schema = header.get("schema") if isinstance(header, Mapping) else None
            form = schema.get("format") if isinstance(schema, Mapping) else None
            if isinstance(form, str) and "{" + CORRELATION_ID + "}" in form:
                location = form
    return HttpOperation(op.method, op.path, location, merged)


def route(op: Operation, kafka: KafkaOperation, exit_name: str,
          extension: Mapping[str, Any] | None, identity: str | None = None) -> dict[str, Any]:
    """The http-kafka route of a pair. Raises ValueError saying why they cannot be paired."""
    out = http_kafka_route(http_operation(op), kafka, exit_name)
    if extension:
        _extend(out["with"], extension, identity)
    return out


def _extend(with_: dict[str, Any], extension: Mapping[str, Any], identity: str | None) -> None:
    def resolved(value: Any) -> str:
        text = str(value)
        if identity is not None:
            text = text.replace("{identity}", identity)
        return as_template(text)

    if with_["capability"] == "fetch":
        for item in extension.get("filters") or ():
            if not isinstance(item, Mapping):
                continue
            entry: dict[str, Any] = {}
            if "key" in item:
                entry["key"] = resolved(item["key"])
            if isinstance(item.get("headers"), Mapping):
                entry["headers"] = {str(k): resolved(v) for k, v in item["headers"].items()}
            if entry:
                with_.setdefault("filters", []).append(entry)
        return
    if "key" in extension:
        with_["key"] = resolved(extension["key"])
    if isinstance(extension.get("overrides"), Mapping):
        with_["overrides"] = {str(k): resolved(v) for k, v in extension["overrides"].items()}


def unresolved_names(extension: Mapping[str, Any], parameters: list[str]) -> list[str]:
    """`{name}`s of the extension that are not among `parameters`."""
    text = repr(dict(extension))
    return sorted({n for n in re.findall(r"\{([A-Za-z_][A-Za-z0-9_]*)\}", text)
                   if n not in parameters})
