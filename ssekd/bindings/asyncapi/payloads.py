"""What an AsyncAPI message's payload is as JSON Schema: the kafka cache_server checks records
with it, the sse client events, the asyncapi server's http binding request bodies. Once here so
that the three read a spec's payloads alike."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ssekd.bindings.asyncapi.spec import Spec

Path_ = tuple[str | int, ...]

#: The dialect a payload schema is checked in.
JSON_SCHEMA_DRAFT = "http://json-schema.org/draft-07/schema#"
#: `schemaFormat`s whose schema is JSON Schema (AsyncAPI's own, or JSON Schema's).
JSON_FORMATS = ("application/vnd.aai.asyncapi", "application/schema+json")


def json_content(spec: Spec, message: Mapping[str, Any]) -> bool:
    """Whether a message's content type (its own, else the spec's default) is JSON."""
    content = str(message.get("contentType") or spec.data.get("defaultContentType")
                  or "application/json").split(";")[0].strip().lower()
    return content == "application/json" or content.endswith("+json")


def json_payloads(spec: Spec, messages: Iterable[tuple[Mapping[str, Any], Path_]]) -> Any:
    """The JSON Schema the payloads of `messages` (each with where it is) make, standing alone
    (references resolved): one message's, or `anyOf` of several; None when there is none, or a
    message's cannot be checked as JSON (no payload, content that is not JSON, a payload in
    another schema format)."""
    schemas = []
    for message, at in messages:
        payload, path = spec.resolve(message.get("payload"), at + ("payload",))
        if payload is None or not json_content(spec, message):
            return None
        if isinstance(payload, Mapping) and "schemaFormat" in payload:
            if not str(payload["schemaFormat"]).startswith(JSON_FORMATS):
                return None
            payload, path = spec.resolve(payload.get("schema"), path + ("schema",))
        schemas.append(spec.deref(payload, path))
    if not schemas:
        return None
    return schemas[0] if len(schemas) == 1 else {"anyOf": schemas}
