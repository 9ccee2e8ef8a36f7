"""kafka bindings: placeholder registration until the streaming core lands (issue 3)."""

from __future__ import annotations

from typing import Any

from ssekd.bindings import BindingType, KindSpec


def _build(ctx: Any, binding: Any) -> object:
    raise NotImplementedError("the kafka bindings are not built yet")


BINDING = BindingType("kafka", {
    "cache_client": KindSpec(role="kafka", build=_build, exit="required", exit_roles=("kafka",),
                             options={"type": "object"}),
    "cache_server": KindSpec(
        role="kafka", build=_build, exit="required", exit_roles=("kafka",),
        options={"type": "object", "additionalProperties": False, "properties": {
            "bootstrap": {"type": "array", "items": {"type": "string", "minLength": 1}},
            "topics": {"type": "array", "items": {
                "type": "object", "additionalProperties": False, "required": ["name"],
                "properties": {"name": {"type": "string", "minLength": 1},
                               "defaultOffset": {"enum": ["live", "historical"]}}}},
        }}),
    "client": KindSpec(
        role="kafka", build=_build, exit="optional", exit_roles=("outbound",),
        options={"type": "object", "additionalProperties": False, "properties": {
            "servers": {"type": "array", "minItems": 1,
                        "items": {"type": "string", "pattern": r"^[^:\s]+:[0-9]{1,5}$",
                                  "x-expected": "host:port"}},
            "sasl": {"type": "object", "additionalProperties": False,
                     "required": ["mechanism", "username", "password"],
                     "properties": {
                         "mechanism": {"enum": ["plain", "scram-sha-256", "scram-sha-512"]},
                         "username": {"type": "string"}, "password": {"type": "string"}}},
        }}),
})
