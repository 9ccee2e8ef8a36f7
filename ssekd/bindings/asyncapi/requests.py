"""What an asyncapi server's http binding checks of the requests of a spec's HTTP operations, as
Zilla's asyncapi server composes it: the http server's `options.requests` (entries by path and
method) and an inline catalog of the schemas, `<binding>.requests`.

- content, for a `send` operation: the JSON Schema payloads of its messages (its own list, else
  its channel's; one schema, or `anyOf` of several), for every request body of that path and
  method, whatever its content type (Zilla sets none); a message whose content type is not
  JSON, or whose payload is in another schema format, leaves the body unchecked. (Zilla checks
  the bodies of `receive` operations too, against what they answer; ssekd does not.)
- path parameters: a channel parameter's `schema` (Zilla's form: an integer is `int32` or
  `int64` by its format, a string `string` with its pattern, anything else its JSON Schema) or
  its `enum` (AsyncAPI 3's form: the value must be one of them).

A request that fails is `400` before it reaches the Kafka side (the http binding's validation).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from ssekd.bindings.asyncapi.http_kafka import HttpOperation
from ssekd.bindings.asyncapi.http_operations import messages_of
from ssekd.bindings.asyncapi.payloads import JSON_SCHEMA_DRAFT, json_payloads
from ssekd.bindings.asyncapi.spec import Operation, Spec
from ssekd.bindings.specs.checks import InlineChecks


class RequestChecks(InlineChecks):
    """The `options.requests` entries of one composed http server, gathered per operation."""

    def add(self, spec: Spec, op: Operation, http: HttpOperation, prefixes: list[str]) -> None:
        # a receive operation's messages are what it answers, not what a request carries
        content = self._content(spec, op) if op.action == "send" else None
        params = self._params(spec, op)
        if content is None and not params:
            return
        for prefix in prefixes:
            entry: dict[str, Any] = {"path": prefix + http.path, "method": http.method}
            if params:
                entry["params"] = {"path": params}
            if content is not None:
                entry["content"] = content
            self.where[len(self.entries)] = spec.where(op.path)
            self.entries.append(entry)

    def _content(self, spec: Spec, op: Operation) -> dict[str, Any] | None:
        schema = json_payloads(spec, messages_of(spec, op))
        if schema is None:
            return None  # a body of any shape may come: nothing to check
        subject = self._subject(f"{spec.label}-{op.key}-value", schema)
        return {"model": "json", "catalog": {self.catalog: [{"subject": subject}]}}

    def _params(self, spec: Spec, op: Operation) -> dict[str, Any]:
        declared, at = spec.resolve(op.channel.data.get("parameters"),
                                    op.channel.path + ("parameters",))
        out: dict[str, Any] = {}
        for name in op.channel.parameters:
            if not isinstance(declared, Mapping) or name not in declared:
                continue
            parameter, where = spec.resolve(declared[name], at + (name,))
            if not isinstance(parameter, Mapping):
                continue
            if isinstance(parameter.get("schema"), Mapping):
                schema = spec.deref(parameter["schema"], where + ("schema",))
                out[name] = self._model(f"{spec.label}-{op.channel.key}-params-{name}", schema)
            elif isinstance(parameter.get("enum"), list) and parameter["enum"]:
                choices = "|".join(re.escape(str(v)) for v in parameter["enum"])
                out[name] = {"model": "string", "pattern": f"^(?:{choices})$"}
        return out

    def _model(self, subject: str, schema: Any) -> Any:
        kind = schema.get("type") if isinstance(schema, Mapping) else None
        if kind == "integer":
            return "int32" if schema.get("format") == "int32" else "int64"
        if kind == "string" and set(schema) <= {"type", "pattern", "description"}:
            return {"model": "string", **({"pattern": schema["pattern"]}
                                          if "pattern" in schema else {})}
        return {"model": "json",
                "catalog": {self.catalog: [{"subject": self._subject(subject, schema)}]}}

    def _subject(self, subject: str, schema: Any) -> str:
        text = {"$schema": JSON_SCHEMA_DRAFT, **schema} if isinstance(schema, dict) else schema
        self.subjects[subject] = {"schema": json.dumps(text)}
        return subject
