"""sse server: placeholder registration until the streaming core lands (issue 3)."""

from __future__ import annotations

from typing import Any

from ssekd.bindings import BindingType, KindSpec


def _build(ctx: Any, binding: Any) -> object:
    raise NotImplementedError("the sse binding is not built yet")


BINDING = BindingType("sse", {
    "server": KindSpec(
        role="http", build=_build, exit="required", exit_roles=("events",),
        options={"type": "object", "additionalProperties": False, "properties": {
            "retry": {"type": "integer", "minimum": 0},
            "max-idle-time": {"type": "number", "exclusiveMinimum": 0},
        }},
    ),
})
