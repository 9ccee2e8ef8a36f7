"""What an openapi server checks of a request before it goes on, from the spec: the http
server's `options.requests` (Zilla's shape), one entry per operation and URL that has a JSON
request body or parameters with a schema, and an inline catalog of the body schemas
(`<binding>.requests`, subjects `<operationId>-<media type>-value` as Zilla names them).

A request the spec refuses never reaches the exit: the http server answers `400`.
"""

from __future__ import annotations

import json
from typing import Any

from ssekd.bindings.asyncapi.client import JSON_SCHEMA_DRAFT
from ssekd.bindings.openapi.servers import BaseUrl
from ssekd.bindings.openapi.spec import OpenapiSpec, Operation, is_json
from ssekd.spi.compose import Composition, Where

#: Where each parameter goes in a request entry (`in: cookie` is not checked, as in Zilla).
_PARAMS = {"path": ("params", "path"), "query": ("params", "query"), "header": ("headers",)}


class RequestChecks:
    """The `options.requests` entries of one composed http server, gathered per operation."""

    #: Whether the http server takes `options.requests` (the request validation of the http
    #: binding); until it does, nothing is composed and requests go on unchecked.
    enabled = False

    def __init__(self, binding: str) -> None:
        self.catalog = f"{binding}.requests"
        self.entries: list[dict[str, Any]] = []
        self.subjects: dict[str, dict[str, str]] = {}
        self.where: dict[int, Where] = {}

    def add(self, spec: OpenapiSpec, op: Operation, urls: list[BaseUrl]) -> None:
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

    def _model(self, subject: str, schema: Any) -> dict[str, Any]:
        return {"model": "json",
                "catalog": {self.catalog: [{"subject": self._subject(subject, schema)}]}}

    def _subject(self, subject: str, schema: Any) -> str:
        text = {"$schema": JSON_SCHEMA_DRAFT, **schema} if isinstance(schema, dict) else schema
        self.subjects[subject] = {"schema": json.dumps(text)}
        return subject

    def compose(self, options: dict[str, Any], composition: Composition,
                http_name: str) -> None:
        """Put the entries in the http server's `options` and their catalog beside it."""
        if not self.enabled or not self.entries:
            return
        options["requests"] = self.entries
        composition.catalogs[self.catalog] = {"type": "inline",
                                              "options": {"subjects": self.subjects}}
        for i, where in self.where.items():
            composition.where[("bindings", http_name, "options", "requests", i)] = \
                where

    def summary(self) -> str:
        if not self.enabled or not self.entries:
            return ""
        return f", {len(self.entries)} request check(s)"
