"""sse-kafka binding (kind proxy): streams of a Kafka topic for the sse binding (SPEC §7).

`with: {topic, filters: [{key, headers}], event: {id}}`; the id format is `${etag}` (default)
or `["${base64(key)}","${etag}"]`. Query parameter `since` (epoch ms or ISO-8601) starts a
stream at a time when it has no last event id.
"""

from __future__ import annotations

from ssekd.bindings._schemas import PATH_WHEN
from ssekd.bindings.api import BindingType, BuildContext, Exit, KindSpec, Role
from ssekd.bindings.sse_kafka.proxy import Cache, SseKafkaProxy, SseKafkaRoute, with_templates
from ssekd.config.errors import ConfigError, ConfigIssue
from ssekd.config.model import Binding
from ssekd.patterns import Pattern, reference_problems
from ssekd.progress import ETAG_FORMAT as ETAG_ID
from ssekd.progress import KEY_ETAG_FORMAT as KEY_ETAG_ID

__all__ = ["BINDING"]


def _build(ctx: BuildContext, binding: Binding) -> SseKafkaProxy:
    routes = []
    issues: list[ConfigIssue] = []
    for i, r in enumerate(binding.routes):
        exit_name = r.exit or binding.exit
        if exit_name is None:
            continue
        patterns = tuple(Pattern.compile(w["path"]) for w in r.when) or (Pattern.compile("*"),)
        issues += [ctx.issue(("bindings", binding.name, "routes", i, "with"), problem)
                   for problem in reference_problems(with_templates(r.with_), patterns,
                                                     ctx.config.guards)]
        routes.append(SseKafkaRoute(patterns, exit_name, r.with_))
    if issues:
        raise ConfigError(issues)
    caches = {name: ctx.exit(name, Cache) for name in binding.exits}
    return SseKafkaProxy(binding.name, tuple(routes), caches, ctx.events)


BINDING = BindingType("sse-kafka", {
    "proxy": KindSpec(
        role=Role.STREAM_SOURCE, build=_build, exit=Exit.REQUIRED,
        exit_roles=(Role.KAFKA_CACHE,),
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
