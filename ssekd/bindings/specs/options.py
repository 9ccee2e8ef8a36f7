"""Schema fragments of the options and routes of the bindings composed from API specs: the same
vocabulary (Zilla's) whatever the spec format, so that a spec is named, read and routed alike."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ssekd.config.model import Binding
from ssekd.spi.binding import BuildContext

#: A binding, guard or spec label.
NAME = "^[a-zA-Z]+[a-zA-Z0-9._-]*$"

#: The catalog a spec is read from, by subject.
CATALOG = {
    "type": "object", "minProperties": 1, "maxProperties": 1,
    "propertyNames": {"pattern": NAME},
    "description": "The catalog the spec is read from (`catalogs.<name>`: filesystem, inline or "
                   "schema-registry), by subject: one entry.",
    "additionalProperties": {
        "type": "object", "additionalProperties": False, "required": ["subject"],
        "properties": {
            "subject": {"type": "string", "minLength": 1,
                        "description": "The subject the spec is under."},
            "version": {"anyOf": [{"type": "string", "pattern": "^(latest|[0-9]+)$"},
                                  {"type": "integer", "minimum": 1}],
                        "default": "latest", "x-expected": "latest or a version number",
                        "description": "Which version of the subject."}}}}


def security(description: str) -> dict[str, Any]:
    """Security scheme -> guard, for the kinds that serve operations; `description` says what
    the spec format makes of a requirement."""
    return {
        "type": "object", "propertyNames": {"pattern": "^[a-zA-Z0-9._-]+$"},
        "additionalProperties": {"type": "string", "pattern": NAME, "x-expected": "a guard name"},
        "x-ssekd-default": "none: an operation that requires security is an error",
        "description": description}


def when(operation: str) -> dict[str, Any]:
    """One `when` of a route: which operations of which spec it takes; `operation` says how
    the spec format names an operation."""
    return {"type": "object", "additionalProperties": False,
            "properties": {
                "spec": {"type": "string", "description": "The label of the spec."},
                "operation": {"type": "string", "description": operation},
                "tag": {"type": "string", "description": "A tag the operation has."}}}


def servers(pattern: str, default: str, description: str) -> dict[str, Any]:
    """`servers` of a spec: the URLs (matching `pattern`) of it a kind uses."""
    return {"type": "array", "minItems": 1,
            "items": {"type": "string", "pattern": pattern,
                      "x-expected": "a URL such as http://localhost:7114"},
            "x-ssekd-default": default, "description": description}


def spec(description: str, servers: dict[str, Any],
         security: dict[str, Any] | None) -> dict[str, Any]:
    """One spec of `specs`: the catalog it is read from, the `servers` of it used, and (for
    the kinds that serve operations) the guards of its `security` schemes."""
    properties: dict[str, Any] = {"servers": servers, "catalog": CATALOG}
    if security is not None:
        properties["security"] = security
    return {"type": "object", "additionalProperties": False, "required": ["catalog"],
            "description": description, "properties": properties}


def specs(spec: dict[str, Any], description: str | None = None) -> dict[str, Any]:
    """`options` of a kind: `specs.<label>`, each as `spec` says."""
    options: dict[str, Any] = {"type": "object", "additionalProperties": False,
                               "required": ["specs"]}
    if description is not None:
        options["description"] = description
    options["properties"] = {"specs": {"type": "object", "minProperties": 1,
                                       "propertyNames": {"pattern": NAME},
                                       "additionalProperties": spec,
                                       "description": "The specs, by label."}}
    return options


def composed_only(type_name: str) -> Callable[[BuildContext, Binding], object]:
    """The `build` of a kind the loader composes: never called (the loader replaces the
    binding by what it composes first), and says so if it is."""
    def build(ctx: BuildContext, binding: Binding) -> object:
        raise AssertionError(f"{type_name} {binding.kind} {binding.name} is composed by the "
                             f"loader, never built")
    return build
