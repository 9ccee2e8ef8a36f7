"""sse-kafka binding (kind proxy): streams of a Kafka topic for the sse binding (docs/protocol.md).

`with: {topic, filters: [{key, headers}], event: {id}}`; the id format is `${etag}` (default)
or `["${base64(key)}","${etag}"]`. `event.caught-up` (an ssekd addition) asks for one
`caught-up` event at the end of the catch-up (`ssekd.bindings.sse_kafka.proxy.CAUGHT_UP_EVENT`).
`topic` may be a list (several topics on one stream, an ssekd
addition: `ssekd.bindings.sse_kafka.topics`), with `event.topic` saying how events name theirs.
Query parameter `since` (epoch ms or ISO-8601) starts a stream at a time when it has no last
event id. Option `internal-topics` adds names a topic
taken from the request may not be (`ssekd.bindings.kafka.topic_names`, shared with http-kafka).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ssekd.bindings._schemas import PATH_WHEN
from ssekd.bindings.kafka.roles import KafkaCache
from ssekd.bindings.kafka.topic_names import INTERNAL_TOPICS_OPTION, InternalTopics, is_topic_name
from ssekd.bindings.sse.roles import StreamSource
from ssekd.bindings.sse_kafka.proxy import (
    DEFAULT_TOPIC,
    Cache,
    SseKafkaProxy,
    SseKafkaRoute,
    with_templates,
)
from ssekd.bindings.sse_kafka.topics import TOPIC_AS_EVENT, TOPIC_AS_FIELD
from ssekd.config.errors import ConfigError, ConfigIssue
from ssekd.config.model import Binding
from ssekd.event_ids import ETAG_FORMAT as ETAG_ID
from ssekd.event_ids import KEY_ETAG_FORMAT as KEY_ETAG_ID
from ssekd.event_ids import KEY_TEXT_FORMAT as KEY_TEXT_ID
from ssekd.event_ids import MAX_STREAM_TOPICS
from ssekd.patterns import Pattern, reference_problems
from ssekd.spi.binding import BindingType, BuildContext, Exit, KindSpec

__all__ = ["BINDING"]

#: A value a JSON field may be compared with.
_JSON_SCALAR: dict[str, object] = {"type": ["string", "number", "boolean", "null"]}


def topic_list_problems(with_: Mapping[str, Any] | None
                        ) -> list[tuple[tuple[str | int, ...], str]]:
    """What is wrong with a route's topic list (an ssekd addition), by where in `with`."""
    w = with_ or {}
    topic = w.get("topic", DEFAULT_TOPIC)
    event = w.get("event") or {}
    out: list[tuple[tuple[str | int, ...], str]] = []
    if not isinstance(topic, list):
        if "topic" in event:
            out.append((("event", "topic"), "event.topic says how an event of a several-topic "
                        "stream names its topic: it needs a topic list in with.topic"))
        return out
    literal = [name for t in topic if "${" not in str(t)
               for name in str(t).split(",")]
    if len(literal) > MAX_STREAM_TOPICS:
        out.append((("topic",), f"{len(literal)} topics: a stream may have at most "
                    f"{MAX_STREAM_TOPICS} (every id carries each topic's progress)"))
    seen: set[str] = set()
    for name in literal:
        if name in seen:
            out.append((("topic",), f"topic {name!r} listed twice"))
        seen.add(name)
        if not is_topic_name(name):
            out.append((("topic",), f"{name!r} is not a topic name ([A-Za-z0-9._-], 1-249 "
                        "characters)"))
    if event.get("id", ETAG_ID) != ETAG_ID:
        out.append((("event", "id"), f"a stream of several topics has {ETAG_ID} ids (their "
                    "progress of every topic); the key forms are for one topic"))
    return out


def _build(ctx: BuildContext, binding: Binding) -> SseKafkaProxy:
    routes = []
    issues: list[ConfigIssue] = []
    if binding.exit is not None:
        # Every route names its exit (the schema requires it) and a path no route matches is
        # 404, so a binding-level exit could never be used: refused rather than ignored.
        issues.append(ctx.issue(("bindings", binding.name, "exit"),
                                "an sse-kafka binding-level exit is never used by ssekd: each "
                                "route names its own exit and a path no route matches is 404; "
                                "remove it or add a route for it"))
    for i, r in enumerate(binding.routes):
        exit_name = r.exit or binding.exit
        if exit_name is None:
            continue
        patterns = tuple(Pattern.compile(w["path"]) for w in r.when) or (Pattern.compile("*"),)
        issues += [ctx.issue(("bindings", binding.name, "routes", i, "with"), problem)
                   for problem in reference_problems(with_templates(r.with_), patterns,
                                                     ctx.config.guards, request_values=True)]
        issues += [ctx.issue(("bindings", binding.name, "routes", i, "with", *where), problem)
                   for where, problem in topic_list_problems(r.with_)]
        routes.append(SseKafkaRoute(patterns, exit_name, r.with_, r.guarded))
    if issues:
        raise ConfigError(issues)
    caches = {name: ctx.exit(name, Cache) for name in binding.exits}
    guards = {g: ctx.guard(g) for r in binding.routes for g in r.guarded}
    return SseKafkaProxy(binding.name, tuple(routes), caches, ctx.events, guards,
                         InternalTopics.of(binding.options.get("internal-topics", ())),
                         ctx.metrics)


BINDING = BindingType("sse-kafka", {
    "proxy": KindSpec(
        role=StreamSource, build=_build, exit=Exit.REQUIRED,
        exit_roles=(KafkaCache,),
        when=PATH_WHEN,
        options={"type": "object", "additionalProperties": False,
                 "description": "Maps a stream request to a Kafka topic: the first route whose "
                                "`when` matches the path (query string removed) picks the topic, "
                                "filters and id format, and its exit (a kafka cache) feeds the "
                                "stream. No match, or a topic name Kafka would refuse, is `404`.",
                 "properties": {
            "internal-topics": INTERNAL_TOPICS_OPTION,
        }},
        with_={"type": "object", "additionalProperties": False, "required": ["topic"],
               "default": {"topic": DEFAULT_TOPIC},
               "description": "What the stream carries. Values may use `${params.name}`, "
                              "`${guarded['guard'].identity}` and (ssekd additions) "
                              "`${headers.name}` and `${query.name}`: a header or query value "
                              "with a control character, or not UTF-8, is `404`, and so is a "
                              "query parameter the http binding reads credentials from; a "
                              "header that carries credentials (authorization, cookie) cannot "
                              "be named.",
               "properties": {
                   "topic": {"anyOf": [
                       {"type": "string", "minLength": 1},
                       {"type": "array", "minItems": 1, "maxItems": MAX_STREAM_TOPICS,
                        "items": {"type": "string", "minLength": 1}}],
                             "x-expected": "a topic, or a list of at most "
                                           f"{MAX_STREAM_TOPICS} topics",
                             "description": "The topic to stream. A list (an ssekd addition) "
                                            "streams several topics on one stream: each item "
                                            "is a topic or a comma list of them "
                                            "(`${params.topics}` of `/events/{topics}` takes "
                                            "`/events/a,b`), at most "
                                            f"{MAX_STREAM_TOPICS} in all (more is `400`); each "
                                            "event says its topic (`event.topic`) and its id "
                                            "carries every topic's progress "
                                            "(docs/protocol.md)."},
                   "filters": {"type": "array", "x-ssekd-default": "every record",
                               "description": "A record is sent when any filter of the list "
                                              "matches it.",
                               "items": {
                       "type": "object", "additionalProperties": False,
                       "properties": {
                           "key": {"type": "string",
                                   "description": "The record's key must equal this (bytes of "
                                                  "the UTF-8 text)."},
                           "headers": {"type": "object",
                                       "additionalProperties": {"type": "string"},
                                       "description": "Each named header must be present with "
                                                      "this value; with `key`, all must match."},
                           "value": {
                               "type": "object", "minProperties": 1, "x-ssekd-addition": True,
                               "x-expected": "a map of at least one JSON pointer to a JSON "
                                             "scalar (string, "
                                             "number, true, false, null) or a list of them",
                               "propertyNames": {"pattern": r"^(/([^~/]|~[01])*)+$",
                                                 "x-expected": "a JSON pointer such as "
                                                               "/status or /owner/id"},
                               "additionalProperties": {"anyOf": [
                                   _JSON_SCALAR,
                                   {"type": "array", "minItems": 1, "items": _JSON_SCALAR}],
                                   "x-expected": "a string, number, true, false or null, or a "
                                                 "list of them"},
                               "description": "Fields of the record's JSON value, by JSON "
                                              "pointer (Zilla #1507): each must hold this value "
                                              "(equal JSON: `42` is not `\"42\"`), or one of "
                                              "the list. Strings may use references (which "
                                              "give strings: `${params.id}` is never `42`). "
                                              "A record "
                                              "whose value is not JSON, or where the field is "
                                              "missing, an object or an array, does not match. "
                                              "With `key` and `headers`, all must match."},
                       }}},
                   "compress": {"type": "boolean", "default": True,
                                "x-ssekd-addition": True,
                                "description": "Whether the sse server may gzip this route's "
                                               "streams (its `compression`, for clients that "
                                               "ask): `false` for records that are compressed "
                                               "already (gzip'd or binary values), which gzip "
                                               "would not make smaller."},
                   "event": {"type": "object", "additionalProperties": False,
                             "description": "Event fields.",
                             "properties": {"id": {"enum": [ETAG_ID, KEY_ETAG_ID, KEY_TEXT_ID],
                                                   "default": ETAG_ID,
                                                   "description": "Form of the `id:` field: the "
                                                                  "progress (and etag) alone, or "
                                                                  "a JSON array with the key "
                                                                  "first, base64url or (an ssekd "
                                                                  "addition, `${key}`) as text "
                                                                  "where it is UTF-8 that JSON "
                                                                  "need not escape."},
                                            "topic": {"enum": [TOPIC_AS_EVENT, TOPIC_AS_FIELD],
                                                      "x-ssekd-addition": True,
                                                      "x-ssekd-default": "`event` on a route "
                                                                         "with a topic list",
                                                      "description": "How an event of a "
                                                                     "several-topic stream says "
                                                                     "its topic: `event`, its "
                                                                     "type is the topic's name "
                                                                     "(`<topic>:delete` for a "
                                                                     "tombstone); `field`, a "
                                                                     "`topic:` field is added "
                                                                     "and the type kept. Only "
                                                                     "with a `topic` list."},
                                            "caught-up": {
                                                "type": "boolean", "default": False,
                                                "x-ssekd-addition": True,
                                                "description": "Send one `caught-up` event "
                                                               "(no id, empty data) once the "
                                                               "stream has sent every record "
                                                               "the cache held (for a resume: "
                                                               "from its last event id on) and "
                                                               "the cache has read every "
                                                               "partition to its end, of every "
                                                               "topic of the stream: what a "
                                                               "client needs to know its view "
                                                               "of a keyed topic is whole "
                                                               "(docs/protocol.md). Never sent "
                                                               "unless set."}}},
               }},
    ),
})
