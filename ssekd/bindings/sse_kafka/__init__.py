"""sse-kafka binding (kind proxy): streams of a Kafka topic for the sse binding (SPEC §7).

`with: {topic, filters: [{key, headers}], event: {id}}`; the id format is `${etag}` (default)
or `["${base64(key)}","${etag}"]`. Query parameter `since` (epoch ms or ISO-8601) starts a
stream at a time when it has no last event id.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ssekd.bindings import BindingType, KindSpec
from ssekd.bindings._schemas import PATH_WHEN
from ssekd.bindings.sse_kafka.encoder import Filter, KafkaEventEncoder
from ssekd.bindings.sse_kafka.proxy import PathPattern, SseKafkaProxy, SseKafkaRoute
from ssekd.progress import ETAG_FORMAT as ETAG_ID
from ssekd.progress import KEY_ETAG_FORMAT as KEY_ETAG_ID

if TYPE_CHECKING:
    from ssekd.config.model import Binding

__all__ = ["BINDING", "ETAG_ID", "KEY_ETAG_ID", "Filter", "KafkaEventEncoder", "SseKafkaProxy"]


def _build(ctx: Any, binding: Binding) -> SseKafkaProxy:
    routes = []
    for r in binding.routes:
        exit_name = r.exit or binding.exit
        if exit_name is None:
            continue
        patterns = tuple(PathPattern(w["path"]) for w in r.when) or (PathPattern("*"),)
        routes.append(SseKafkaRoute(patterns, exit_name, r.with_))
    caches = {name: ctx.exit(name) for name in binding.exits}
    return SseKafkaProxy(binding.name, tuple(routes), caches, ctx.events)


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
