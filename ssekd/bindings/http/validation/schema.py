"""The config schema of `options.requests` (the http server's and the http client's), and the
building of a binding's entries from its checked config.

The schema is what stops bad config before the daemon listens, with the file, line and path of
what is wrong and what was expected; `build_for` then raises what only building can find (a
catalog that does not exist, a schema that does not compile) together.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ssekd.bindings.http.validation.builder import ModelBuilder
from ssekd.bindings.http.validation.requests import Requests, build_requests
from ssekd.bindings.http.validation.waiting import WAIT_SECONDS

#: Models that need no catalog, and those that read one.
SCALAR_MODELS = ("string", "int32", "int64")
SCHEMA_MODELS = ("json", "avro")
METHODS = ("GET", "PUT", "POST", "DELETE", "OPTIONS", "HEAD", "PATCH", "TRACE")

_NAME = "^[a-zA-Z]+[a-zA-Z0-9._-]*$"

MODEL_SCHEMA: Mapping[str, Any] = {
    "type": ["string", "object"],
    "x-expected": "a model: string, int32 or int64, or {model, catalog, ...}",
    "if": {"type": "string"},
    "then": {"enum": list(SCALAR_MODELS)},
    "else": {"type": "object", "additionalProperties": False, "required": ["model"],
         "properties": {
             "model": {"enum": [*SCALAR_MODELS, *SCHEMA_MODELS],
                       "description": "`string` (text), `int32`/`int64` (integers), `json` (a "
                                      "JSON document valid against a JSON Schema) or `avro` "
                                      "(Avro binary: the registry's wire format with a "
                                      "`schema-registry` catalog, plain with a local one)."},
             "catalog": {
                 "type": "object", "minProperties": 1, "maxProperties": 1,
                 "description": "For `json` and `avro`: the catalog and the one schema in it: "
                                "`{catalog: [{subject: S, version: latest}]}`, `id: N` (a "
                                "registry id), or `strategy: encoded` (each payload names its "
                                "schema: the registry's wire format).",
                 "additionalProperties": {
                     "type": "array", "minItems": 1, "maxItems": 1,
                     "x-expected": "a list of exactly one schema (ssekd uses one per model)",
                     "items": {
                         "type": "object", "additionalProperties": False, "minProperties": 1,
                         "properties": {
                             "subject": {"type": "string", "minLength": 1},
                             "id": {"type": "integer", "minimum": 0},
                             "strategy": {"const": "encoded"},
                             "version": {"anyOf": [{"const": "latest"},
                                                   {"type": "integer", "minimum": 1}],
                                         "x-expected": "latest or a version number"}}}}},
             "encoding": {"enum": ["utf_8", "utf_16"],
                          "description": "For `string`: the text's encoding (`utf_8`)."},
             "minLength": {"type": "integer", "minimum": 1,
                           "description": "For `string`: fewest characters."},
             "maxLength": {"type": "integer", "minimum": 1,
                           "description": "For `string`: most characters."},
             "pattern": {"type": "string",
                         "description": "For `string`: a regular expression the whole text "
                                        "must match."},
             "format": {"enum": ["text", "binary"],
                        "description": "For `int32`/`int64`: decimal `text` (the default) or "
                                       "big-endian `binary`."},
             "range": {"type": "string", "pattern": r"^[(\[]\s*(-?\d+)?\s*,\s*(-?\d+)?\s*[)\]]$",
                       "x-expected": "a range such as [1,10) or (,0]",
                       "description": "For `int32`/`int64`: the interval the value is in."},
             "multiple": {"type": "integer", "minimum": 1,
                          "description": "For `int32`/`int64`: what the value is a multiple "
                                         "of."}}},
}

_MODELS: Mapping[str, Any] = {"type": "object", "propertyNames": {"pattern": _NAME},
                              "additionalProperties": MODEL_SCHEMA}
_TYPES: Mapping[str, Any] = {"type": "array", "minItems": 1, "items": {"type": "string"}}


def _entry(responses: bool) -> dict[str, Any]:
    checked = "responses" if responses else "content"
    properties: dict[str, Any] = {
        "path": {"type": "string", "pattern": "^/", "x-expected": "a path starting with /",
                 "description": "The request's path; `{name}` is a parameter (one or more "
                                "characters). The query string is left out."},
        "method": {"enum": list(METHODS), "x-ssekd-default": "any",
                   "description": "The request's method."},
        "content-type": {**_TYPES, "x-ssekd-default": "any",
                         "description": "The content types such requests may have (compared "
                                        "without parameters). A request of the path and method "
                                        "with another is `415`; one without any is checked."},
        "headers": {**_MODELS, "description": "Header name to the model of its value."},
        "params": {"type": "object", "additionalProperties": False,
                   "description": "The models of the request's parameters.", "properties": {
            "path": {**_MODELS, "description": "Path parameter to model (URL-decoded)."},
            "query": {**_MODELS, "description": "Query parameter to model (URL-decoded; "
                                                "each occurrence)."}}},
        "content": {**MODEL_SCHEMA, "description": "The model of the body (a request "
                                                   "without a body has none to check)."},
        "responses": {"type": "array", "items": {
            "type": "object", "additionalProperties": False,
            "anyOf": [{"required": ["content"]}, {"required": ["headers"]}],
            "properties": {
                "status": {"anyOf": [{"type": "integer"},
                                     {"type": "array", "items": {"type": "integer"}}],
                           "x-expected": "a status or a list of them",
                           "description": "The statuses this entry checks (any when left "
                                          "out)."},
                "content-type": {**_TYPES, "description": "The content types it checks."},
                "headers": {**_MODELS, "description": "Header name to model."},
                "content": {**MODEL_SCHEMA, "description": "The model of the body."}}},
            "description": "What the upstream's answers must be (the last entry that "
                           "selects an answer by status and content type checks it); "
                           "checked by the http client, not by the server."
                           if responses else "Checked by an http client; not by the server."},
    }
    return {"type": "object", "additionalProperties": False, "required": ["path"],
            "minProperties": 2, "properties": properties,
            "x-expected": f"a path and what to check (headers, params, {checked})"}


_MODEL_WORDS = ("A model is `string`, `int32` or `int64` (bare, or `{model: string, "
                "minLength, maxLength, pattern, encoding}`, `{model: int32|int64, range: "
                "'[1,10)', multiple, format: text|binary}`), or `{model: json|avro, catalog: "
                "{name: [{subject: S, version: latest} | {id: N} | {strategy: encoded}]}}`.")

REQUESTS_SCHEMA: Mapping[str, Any] = {
    "type": "array", "items": _entry(False),
    "description": "Requests to check before the route's exit sees them: the first entry "
                   "whose path, method and content type a request has checks its headers, "
                   "path and query parameters and body (read whole first, within "
                   "`limits.body-bytes`). A failure is `400` saying which part failed, a "
                   "content type the path and method do not list `415`, a schema its "
                   "catalog cannot give yet `503` with `Retry-After` (after up to "
                   f"{WAIT_SECONDS:g} s). {_MODEL_WORDS}",
}

CLIENT_REQUESTS_SCHEMA: Mapping[str, Any] = {
    "type": "array", "items": _entry(True),
    "description": "Responses to check: for a request its entry names (path, method), the "
                   "`responses` entry selected by the answer's status and content type. "
                   "Headers that fail: `503` with `Retry-After: 0` in place of the answer; "
                   "content that fails: the answer is cut after its head (the client sees it "
                   "end early), as Zilla does. " + _MODEL_WORDS,
}


def catalogs_named(requests: Sequence[Any] | None) -> dict[str, tuple[str | int, ...]]:
    """catalog name -> where (below `options`) `requests` first names it, for the loader's
    check that it exists and for reloads."""
    found: dict[str, tuple[str | int, ...]] = {}

    def walk(value: Any, at: tuple[str | int, ...]) -> None:
        if isinstance(value, Mapping):
            catalog = value.get("catalog")
            if "model" in value and isinstance(catalog, Mapping):
                for name in catalog:
                    found.setdefault(str(name), (*at, "catalog", str(name)))
                return
            for key, item in value.items():
                walk(item, (*at, str(key)))
        elif isinstance(value, list):
            for i, item in enumerate(value):
                walk(item, (*at, i))

    walk(list(requests or ()), ("requests",))
    return found


def build_for(ctx: Any, binding: Any, responses: bool) -> Requests | None:
    """The binding's `options.requests` (None without); config errors raised together."""
    from ssekd.config import ConfigError
    entries = binding.options.get("requests")
    if not entries:
        return None

    def report(event: str, detail: str) -> None:
        ctx.events.emit(binding.name, event, detail)

    builder = ModelBuilder(ctx.catalogs, ctx.reactor, report, ctx.issue)
    built = build_requests(entries, builder,
                           ("bindings", binding.name, "options", "requests"), responses)
    if builder.issues:
        raise ConfigError(builder.issues)
    return built
