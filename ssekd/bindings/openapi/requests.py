"""What the spec says requests and responses must be, as the http bindings' `options.requests`
(Zilla's shape) and an inline catalog of the schemas (`<binding>.requests`, subjects
`<operationId>-<media type>-value` as Zilla names them):

- an openapi server's http server checks each operation's JSON request body and its path,
  query and header parameters: a request the spec refuses never reaches the exit (`400`, and
  `415` for a content type the operation does not take);
- an openapi client's http client checks the upstream's JSON answers against the operation's
  responses (by status and content type).

A parameter's model follows its schema as Zilla's does: an integer is `int32` (format int32)
or `int64`, a string `string` (with its pattern and lengths), anything else the JSON Schema.
"""

from __future__ import annotations

import json
from typing import Any

from ssekd.bindings.openapi.servers import BaseUrl
from ssekd.bindings.openapi.spec import OpenapiSpec, Operation, is_json, json_schema
from ssekd.bindings.specs.checks import InlineChecks

#: Where each parameter goes in a request entry (`in: cookie` is not checked, as in Zilla).
_PARAMS = {"path": ("params", "path"), "query": ("params", "query"), "header": ("headers",)}


class RequestChecks(InlineChecks):
    """The `options.requests` entries of one composed http server, gathered per operation."""

    def __init__(self, binding: str) -> None:
        super().__init__(binding)
        #: The `openapi` version of the spec being read (its schemas' dialect).
        self.version = "3.0.0"

    def add(self, spec: OpenapiSpec, op: Operation, urls: list[BaseUrl]) -> None:
        self.version = str(spec.data.get("openapi"))
        body = [c for c in op.body if c.schema is not None and is_json(c.media_type)]
        params = [p for p in op.parameters if p.schema is not None and p.where in _PARAMS]
        if not body and not params:
            return
        for url in urls:
            entry: dict[str, Any] = {"path": url.request_path(op.path), "method": op.method}
            for p in params:
                slot = entry
                for part in _PARAMS[p.where]:
                    slot = slot.setdefault(part, {})
                slot[p.name] = self._model(f"{op.key}-{p.where}-{p.name}", p.schema)
            if body:
                entry["content-type"] = [c.media_type for c in body]
                subjects = [{"subject": self._subject(f"{op.key}-{c.media_type}-value",
                                                      c.schema)} for c in body]
                entry["content"] = {"model": "json", "catalog": {self.catalog: subjects}}
            self.where[len(self.entries)] = spec.text.where(op.spec_path)
            self.entries.append(entry)

    def add_responses(self, spec: OpenapiSpec, op: Operation, urls: list[BaseUrl]) -> None:
        """The entries that check the upstream's answers to `op` (an http client's)."""
        self.version = str(spec.data.get("openapi"))
        answers = []
        for response in op.responses:
            if not response.status.isdigit():
                continue  # `default` and `2XX` select no one status
            for c in response.content:
                if c.schema is None or not is_json(c.media_type):
                    continue
                subject = self._subject(f"{op.key}-{c.media_type}-{response.status}-value",
                                        c.schema)
                answers.append({"status": int(response.status),
                                "content-type": [c.media_type],
                                "content": {"model": "json",
                                            "catalog": {self.catalog: [{"subject": subject}]}}})
        if not answers:
            return
        for url in urls:
            self.where[len(self.entries)] = spec.text.where(op.spec_path + ("responses",))
            self.entries.append({"path": url.request_path(op.path), "method": op.method,
                                 "responses": answers})

    def _model(self, subject: str, schema: Any) -> Any:
        if isinstance(schema, dict) and schema.get("type") == "integer":
            return "int32" if schema.get("format") == "int32" else "int64"
        if isinstance(schema, dict) and schema.get("type") == "string":
            model: dict[str, Any] = {"model": "string"}
            for key in ("pattern", "minLength", "maxLength"):
                if key in schema and (key == "pattern" or int(schema[key]) >= 1):
                    model[key] = schema[key]
            return model
        return {"model": "json",
                "catalog": {self.catalog: [{"subject": self._subject(subject, schema)}]}}

    def _subject(self, subject: str, schema: Any) -> str:
        self.subjects[subject] = {"schema": json.dumps(json_schema(schema, self.version))}
        return subject
