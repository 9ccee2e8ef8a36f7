"""The sse client's `options.requests` (Zilla's `{path, content}`): its schema, the catalogs it
depends on, and the `EventContent`s it builds (`ssekd.bindings.sse.content` says what they do).

Zilla's sse binding reads `requests` on its server side; on ssekd's sse client they check the
events relayed from upstream, once per upstream event (the asyncapi client composes them from
a spec's message payloads). A content model is `json` (a JSON Schema) or `string` (UTF-8 text):
an event's data is text.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ssekd.bindings.sse.content import EventContent
from ssekd.catalogs.catalog import Catalog
from ssekd.catalogs.models import FieldModel, ModelConfig, local_problem
from ssekd.config.errors import ConfigError, ConfigIssue
from ssekd.config.model import Binding
from ssekd.patterns import Pattern
from ssekd.spi.binding import BuildContext, Dependencies

METRIC = "sse.client.invalid"

_SCHEMA_REF = {
    "type": "object", "additionalProperties": False, "minProperties": 1,
    "properties": {
        "subject": {"type": "string", "minLength": 1,
                    "description": "The subject whose schema is used."},
        "id": {"type": "integer", "minimum": 0,
               "description": "A registry schema id, instead of `subject`."},
        "version": {"anyOf": [{"type": "string", "pattern": "^(latest|[0-9]+)$"},
                              {"type": "integer", "minimum": 1}],
                    "default": "latest", "x-expected": "latest or a version number",
                    "description": "`latest` (following new versions) or a number."}}}

REQUESTS = {
    "type": "array", "x-ssekd-default": "none: events are relayed unchecked",
    "description": "What the data of relayed events must be, by upstream path: the first entry "
                   "whose `path` matches a stream's path checks every event of its upstream "
                   "URL, once, before any stream sees it. An event whose data (its `data:` "
                   "lines joined by line feeds) the model refuses is dropped: counted in "
                   f"`{METRIC}`, reported by a `BINDING_SSE_EVENT_INVALID` event (one per "
                   "upstream URL per second at most), its id still taken as read; the stream "
                   "goes on, the other events in order with their ids. An event without data "
                   "passes.",
    "items": {
        "type": "object", "additionalProperties": False, "required": ["path", "content"],
        "properties": {
            "path": {"type": "string", "pattern": "^/", "x-expected": "a path starting with /",
                     "description": "Pattern for the request path (as routes' `when.path`: "
                                    "`{name}` a segment, `*` anything)."},
            "content": {
                "type": "object", "additionalProperties": False, "required": ["model"],
                "description": "Zilla's model config: `{model, catalog: {<name>: [{subject, "
                               "version}]}}`.",
                "properties": {
                    "model": {"enum": ["json", "string"],
                              "description": "`json`: a JSON document valid against the "
                                             "catalog's JSON Schema; `string`: UTF-8 text."},
                    "catalog": {
                        "type": "object", "minProperties": 1, "maxProperties": 1,
                        "x-ssekd-default": "none (required by json)",
                        "description": "The catalog (by name, under `catalogs`) and the one "
                                       "schema in it the model uses.",
                        "additionalProperties": {
                            "type": "array", "minItems": 1, "maxItems": 1,
                            "x-expected": "a list of exactly one schema",
                            "items": _SCHEMA_REF}}}}}}}


def client_depends(options: Mapping[str, Any]) -> Dependencies:
    """The catalogs the `requests` models hold: a reload that changes one rebuilds the client."""
    catalogs: dict[str, tuple[str | int, ...]] = {}
    for i, entry in enumerate(options.get("requests") or ()):
        content = entry.get("content") if isinstance(entry, Mapping) else None
        named = content.get("catalog") if isinstance(content, Mapping) else None
        if isinstance(named, Mapping):
            catalogs.update((str(name), ("requests", i, "content", "catalog", str(name)))
                            for name in named)
    return Dependencies(catalogs=catalogs)


def event_contents(ctx: BuildContext, binding: Binding) -> list[EventContent]:
    """The built `requests` (config errors for a model that cannot be, with their lines)."""
    out: list[EventContent] = []
    issues: list[ConfigIssue] = []
    for i, entry in enumerate(binding.options.get("requests") or ()):
        path = ("bindings", binding.name, "options", "requests", i, "content")
        config = ModelConfig.parse(str(entry["path"]), "value", entry["content"])
        catalog: Catalog | None = ctx.catalogs.get(config.catalog) if config.catalog else None
        if config.model != "string" and config.catalog is None:
            issues.append(ctx.issue(path, f"a {config.model} model needs a `catalog` with its "
                                          f"schema"))
            continue
        if config.catalog is not None and catalog is None:
            issues.append(ctx.issue((*path, "catalog", config.catalog),
                                    f"no catalog {config.catalog!r} under `catalogs`"))
            continue
        where = str(entry["path"])

        def report(event: str, detail: str, where: str = where) -> None:
            ctx.events.emit(binding.name, event, f"{where}: {detail}")

        model = FieldModel(config, catalog, ctx.reactor, report, convert=False)
        problem = local_problem(model)
        if problem is not None:
            issues.append(ctx.issue((*path, "catalog", str(config.catalog)), problem))
            continue
        out.append(EventContent(where, Pattern.compile(where), model,
                                ctx.metrics.counter(METRIC, binding.name, path=where)))
    if issues:
        raise ConfigError(issues)
    return out
