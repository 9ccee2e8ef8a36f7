"""sse-kafka proxy: placeholder registration until the streaming core lands (issue 3)."""

from __future__ import annotations

from typing import Any

from ssekd.bindings import BindingType, KindSpec
from ssekd.bindings._schemas import PATH_WHEN

ETAG_ID = "${etag}"
KEY_ETAG_ID = '["${base64(key)}","${etag}"]'


def _build(ctx: Any, binding: Any) -> object:
    raise NotImplementedError("the sse-kafka binding is not built yet")


BINDING = BindingType("sse-kafka", {
    "proxy": KindSpec(
        role="events", build=_build, exit="required", exit_roles=("kafka",),
        when=PATH_WHEN,
        with_={"type": "object", "additionalProperties": False, "required": ["topic"],
               "properties": {
                   "topic": {"type": "string", "minLength": 1},
                   "filters": {"type": "array", "items": {
                       "type": "object", "additionalProperties": False,
                       "properties": {
                           "key": {"type": "string"},
                           "headers": {"type": "object",
                                       "additionalProperties": {"type": "string"}},
                       }}},
                   "event": {"type": "object", "additionalProperties": False,
                             "required": ["id"],
                             "properties": {"id": {"enum": [ETAG_ID, KEY_ETAG_ID]}}},
               }},
    ),
})
