"""JSON Schema validation of a parsed zilla.yaml, with messages that say what was expected.

The top level, vaults, guards, catalogs and telemetry are described by the JSON files in
`schema/`. Each binding is then checked against the schema its type registers for its kind
(`ssekd.spi.binding.KindSpec`), so an error in one binding points into that binding, not at a
`oneOf` over every type.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from functools import cache
from importlib import resources
from typing import Any

from jsonschema import Draft202012Validator, ValidationError, validators
from referencing import Registry, Resource

from ssekd.config.document import Document
from ssekd.config.errors import ConfigIssue
from ssekd.spi.binding import Exit, KindSpec
from ssekd.spi.plugins import Registry as BindingTypes

NAME = {"type": "string", "pattern": "^[a-zA-Z]+[a-zA-Z0-9._-]*$",
        "x-expected": "a name matching ^[a-zA-Z]+[a-zA-Z0-9._-]*$"}


@cache
def schema_files() -> dict[str, Any]:
    """The JSON Schema files shipped in ssekd/config/schema, by their `$id`."""
    out: dict[str, Any] = {}
    for entry in resources.files("ssekd.config").joinpath("schema").iterdir():
        if entry.name.endswith(".json"):
            doc = json.loads(entry.read_text(encoding="utf-8"))
            out[doc["$id"]] = doc
    return out


@cache
def _registry() -> Registry[Any]:
    return Registry().with_resources(
        (uri, Resource.from_contents(doc)) for uri, doc in schema_files().items())


@cache
def _whole(pattern: str) -> re.Pattern[str]:
    """`pattern` with a final `$` meaning the end of the string, as in JSON Schema (ECMA-262):
    Python's `$` also matches before a final newline, so `^[a-z]+$` would take `"name\n"`."""
    if pattern.endswith("$") and not pattern.endswith("\\$"):
        pattern = pattern[:-1] + r"\Z"
    return re.compile(pattern)


def _pattern(validator: Any, pattern: str, instance: Any,
             schema: Mapping[str, Any]) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and _whole(pattern).search(instance) is None:
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


#: Draft 2020-12 with `pattern` read as JSON Schema means it (`_whole`).
_Validator = validators.extend(Draft202012Validator, {"pattern": _pattern})


def _validator(schema: Mapping[str, Any]) -> Any:
    return _Validator(schema, registry=_registry())


def binding_schema(kind: KindSpec, type_name: str, kind_name: str) -> dict[str, Any]:
    """The whole schema of one binding of `type_name`/`kind_name`."""
    props: dict[str, Any] = {
        "type": {"const": type_name, "description": "The binding type."},
        "kind": {"const": kind_name, "description": "The kind of binding within its type."},
        "options": kind.options,
        "telemetry": {
            "type": "object", "additionalProperties": False,
            "description": "This binding's telemetry.",
            "properties": {"metrics": {
                "type": "array",
                "items": {"type": "string", "pattern": "^[a-z*][a-z0-9.*_-]*$",
                          "x-expected": "a metric name or glob such as stream.* or "
                                        "http.duration"},
                "description": "Metrics to export for this binding, by name or glob (of those "
                               "`telemetry.metrics` keeps); without it, all of those."},
                "attributes": {
                    "type": "object",
                    "propertyNames": {"type": "string", "pattern": "^[a-zA-Z]+[a-zA-Z0-9._-]*$",
                                      "x-expected": "a label name: a letter, then letters, "
                                                    "digits, _ . -"},
                    "additionalProperties": {"type": "string"},
                    "x-ssekd-default": "none",
                    "description": "Labels of this binding's own series, by name (dots and "
                                   "dashes become `_`). On an http server, its `http.*` metrics "
                                   "take them from each request: `${http.request.method}`, "
                                   "`${http.request.path}` (without the query string), "
                                   "`${http.response.status}`, `${http.request.<header>}`, "
                                   "`${http.response.<header>}`; any other text is a constant. "
                                   "A credential header is refused, and after 1000 distinct sets "
                                   "of request values a binding counts new ones under "
                                   "`(other)`. Other bindings' metrics take none, as in Zilla."}},
        },
    }
    if kind.vault:
        props["vault"] = {**NAME, "description": "The vault (under `vaults`) its keys and "
                                                 "certificates come from."}
    if kind.exit is not Exit.NONE:
        props["exit"] = {**NAME, "description": "The binding that gets what no route matches."}
    if kind.when is not None:
        route: dict[str, Any] = {
            "type": "object", "additionalProperties": False,
            "properties": {
                "when": {"type": "array", "items": kind.when,
                         "description": "Conditions: the route matches when any item does, "
                                        "and an item when all its fields do. None: always."},
                "guarded": {"type": "object", "propertyNames": NAME,
                            "additionalProperties": {"type": "array",
                                                     "items": {"type": "string"}},
                            "description": "Guard name to the roles a request must have (all "
                                           "of them). Without a valid token for that guard: "
                                           "`401`; invalid: `403`; missing a role: `403`, and "
                                           "`404` on an http server's routes (as Zilla). On a "
                                           "tls server's routes, the roles the client "
                                           "certificate's session must have: a connection no "
                                           "route takes is closed."},
            },
        }
        if kind.exit is not Exit.NONE:
            route["properties"]["exit"] = {**NAME, "description": "Where a match goes."}
            route["required"] = ["exit"]
        if kind.with_ is not None:
            route["properties"]["with"] = kind.with_
        props["routes"] = {"type": "array", "items": route,
                           "description": "Tried in order; the first that matches wins."}
    schema: dict[str, Any] = {
        "type": "object", "additionalProperties": False,
        "required": ["type", "kind"], "properties": props,
    }
    if kind.exit is Exit.REQUIRED:
        # A binding that must lead somewhere needs a default exit or at least one route.
        schema["anyOf"] = [{"required": ["exit"], "x-expected": "an exit"},
                           {"required": ["routes"], "x-expected": "routes with exits"}]
    return schema


#: Keys whose values an error message must never repeat (they end up in logs).
SECRET_KEYS = frozenset({"password", "secret", "token"})


def _kind(value: Any) -> str:
    """What a value is, without the value."""
    for kind, name in ((bool, "a boolean"), (int, "an integer"), (float, "a number"),
                       (str, "a string"), (list, "a list"), (dict, "a mapping")):
        if isinstance(value, kind):
            return name
    return "null" if value is None else "a value"


def _expected(error: ValidationError) -> str:
    """Turn a jsonschema error into 'expected …, got …' a person can act on."""
    v, arg = error.validator, error.validator_value
    # `x-expected` describes the value a schema wants; it does not explain a missing or an
    # extra property, which are reported in their own words below.
    custom = error.schema.get("x-expected") if isinstance(error.schema, dict) and \
        v not in ("required", "additionalProperties", "propertyNames") else None
    secret = any(isinstance(k, str) and k in SECRET_KEYS for k in error.absolute_path)
    got = f"{_kind(error.instance)} (not shown: a secret)" if secret else _show(error.instance)
    if custom:
        return f"expected {custom}, got {got}"
    if v == "type":
        kinds = arg if isinstance(arg, list) else [arg]
        return f"expected {' or '.join(kinds)}, got {got}"
    if v == "enum":
        return f"expected one of {', '.join(_show(a) for a in arg)}; got {got}"
    if v == "const":
        return f"expected {_show(arg)}, got {got}"
    if v == "required":
        return str(error.message).replace("is a required property", "is required").replace("'", "")
    if v == "additionalProperties":
        allowed = sorted(error.schema.get("properties", {}))
        extra = sorted(set(error.instance) - set(allowed)) if isinstance(error.instance, dict) \
            else []
        hint = f" (expected one of: {', '.join(allowed)})" if allowed else ""
        return f"unexpected property {', '.join(map(repr, extra))}{hint}"
    if v == "pattern":
        return f"expected a string matching {arg}, got {got}"
    if v in ("minimum", "maximum"):
        word = "at least" if v == "minimum" else "at most"
        return f"expected a number {word} {arg}, got {got}"
    if v in ("minItems", "minProperties"):
        return f"expected at least {arg} item(s), got {got}"
    if v == "minLength":
        return f"expected a non-empty string, got {got}"
    if v in ("anyOf", "oneOf"):
        alternatives = [s.get("x-expected") for s in arg if isinstance(s, dict)]
        named = [a for a in alternatives if a]
        if named:
            return f"expected {' or '.join(named)}, got {got}"
    return str(error.message)


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, (int, float)):
        return f"{type(value).__name__} {value}"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return repr(value)


def _issues(doc: Document, prefix: tuple[str | int, ...], data: Any,
            schema: Mapping[str, Any]) -> list[ConfigIssue]:
    out = []
    for error in _validator(schema).iter_errors(data):
        # Report the most specific cause of an anyOf failure when one alternative nearly fits.
        leaf = _deepest(error)
        path = prefix + tuple(leaf.absolute_path)
        if leaf.validator == "additionalProperties" and isinstance(leaf.instance, dict):
            # Point at the unexpected key itself: its line is the one to fix.
            allowed = leaf.schema.get("properties", {})
            extra = [k for k in leaf.instance if k not in allowed]
            path += tuple(extra[:1])
        elif "propertyNames" in leaf.absolute_schema_path and isinstance(leaf.instance, str):
            path += (leaf.instance,)  # a bad name: point at the name, not at its section
        out.append(doc.issue(path, _expected(leaf)))
    return out


def _deepest(error: ValidationError) -> ValidationError:
    if error.validator in ("anyOf", "oneOf") and error.context:
        named = isinstance(error.schema, dict) and error.schema.get("x-expected")
        alternatives = [s for s in error.validator_value if isinstance(s, dict)]
        if named or any(s.get("x-expected") for s in alternatives):
            # a list whose elements are what is wrong (`port: [7143, 71144]`): name the element,
            # not the whole list ("got a list")
            inside = [e for e in error.context if len(e.absolute_path) > len(error.absolute_path)]
            if isinstance(error.instance, list) and inside:
                return _deepest(max(inside, key=lambda e: len(e.absolute_path)))
            return error
        best = max(error.context, key=lambda e: len(e.absolute_path))
        if len(best.absolute_path) > len(error.absolute_path):
            return _deepest(best)
    return error


def validate(doc: Document, registry: BindingTypes) -> list[ConfigIssue]:
    """Every schema problem in `doc`, each with file, line, path and what was expected."""
    data = doc.data
    if not isinstance(data, dict):
        return [doc.issue((), f"expected a mapping at the top level, got {_show(data)}")]
    files = schema_files()
    issues = _issues(doc, (), data, files["ssekd:zilla"])
    for section, schema_for in (("vaults", lambda t: files.get(f"ssekd:vault/{t}")),
                                ("guards", lambda t: files.get(f"ssekd:guard/{t}")),
                                ("catalogs", lambda t: files["ssekd:catalog"])):
        entries = data.get(section)
        if isinstance(entries, dict):
            for name, entry in entries.items():
                schema = schema_for(entry.get("type")) if isinstance(entry, dict) else None
                if schema is not None:
                    issues += _issues(doc, (section, name), entry, schema)
    bindings = data.get("bindings")
    if isinstance(bindings, dict):
        for name, binding in bindings.items():
            issues += _binding_issues(doc, name, binding, registry)
    return issues


def _binding_issues(doc: Document, name: str, binding: Any,
                    registry: BindingTypes) -> list[ConfigIssue]:
    if not isinstance(binding, dict):
        return []  # the top-level schema already said so
    path: tuple[str | int, ...] = ("bindings", name)
    type_name, kind_name = binding.get("type"), binding.get("kind")
    if not isinstance(type_name, str) or not isinstance(kind_name, str):
        return []
    types = registry.types
    binding_type = types.get(type_name)
    if binding_type is None:
        reason = registry.broken.get(type_name)
        if reason:
            return [doc.issue(path + ("type",), f"binding type {type_name!r} is installed but "
                              f"failed to load: {reason}")]
        return [doc.issue(path + ("type",), f"unknown binding type {type_name!r}; expected one "
                          f"of {', '.join(sorted(types))}")]
    kind = binding_type.kinds.get(kind_name)
    if kind is None:
        return [doc.issue(path + ("kind",), f"binding type {type_name} has no kind "
                          f"{kind_name!r}; expected one of {', '.join(binding_type.kinds)}")]
    return _issues(doc, path, binding, binding_schema(kind, type_name, kind_name))


def full_schema(registry: BindingTypes) -> dict[str, Any]:
    """One JSON Schema document for the whole file (`ssekd check --print-schema`)."""
    files = schema_files()
    top: dict[str, Any] = json.loads(json.dumps(files["ssekd:zilla"]))
    alternatives: list[Any] = []
    for type_name, binding_type in sorted(registry.types.items()):
        for kind_name, kind in binding_type.kinds.items():
            alternatives.append(binding_schema(kind, type_name, kind_name))
    top["properties"]["bindings"]["additionalProperties"] = {"oneOf": alternatives}
    top["$defs"].update({uri.split(":", 1)[1].replace("/", "-"): doc
                         for uri, doc in files.items() if uri != "ssekd:zilla"})
    return top
