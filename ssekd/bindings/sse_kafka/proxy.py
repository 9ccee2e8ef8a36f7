"""sse-kafka proxy: which topic, filters and id format a stream gets, and where it starts.

Routes match the path (query string already removed by sse) with the rules of `ssekd.patterns`;
captures are percent-decoded. `with` values may use `${params.name}` and
`${guarded['guard'].identity}`, resolved by `ssekd.patterns.substitute`. The first matching route
wins; none is 404, and so is a request that lacks a value its route refers to. A route's
`guarded: {guard: [roles]}` needs a session of that guard (from the http binding in front) with
every listed role: none is 401, an invalid token or a missing role 403, a guard that cannot
check tokens yet `TryLater`.

A topic that comes from the request (a `${...}` in `with.topic`) must not be one of the cluster's
internal topics (`ssekd.bindings.kafka.topic_names`, the rule http-kafka applies too): those are
404 unless a route names them literally, so a `/{topic}` route cannot be used to read them. A cache that
follows as many topics as it may answers `TryLater` (a 200 that ends, so browsers come back),
and so does a topic whose model's schema its catalog has not given yet (a registry that is down).
"""

from __future__ import annotations

import dataclasses
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol, runtime_checkable
from urllib.parse import unquote

from ssekd.bindings.kafka.cache import SchemaUnavailable, TopicCache, TopicLimitReached
from ssekd.bindings.kafka.roles import KafkaCache
from ssekd.bindings.kafka.start import Start
from ssekd.bindings.kafka.subscription import Subscription
from ssekd.bindings.kafka.topic_names import InternalTopics
from ssekd.bindings.kafka.topic_names import refusal as topic_refusal
from ssekd.bindings.kafka.value_path import ValuePath, canonical
from ssekd.bindings.sse.roles import StreamRequest, TryLater, refuse_unauthorized
from ssekd.bindings.sse.wire import comment, event_bytes
from ssekd.bindings.sse_kafka.encoder import Filter, KafkaEventEncoder
from ssekd.bindings.sse_kafka.topics import TOPIC_AS_EVENT, TopicsSubscription
from ssekd.event_ids import (
    ETAG_FORMAT,
    MAX_STREAM_TOPICS,
    UndecodableId,
    parse_last_event_id,
    parse_topics_id,
)
from ssekd.patterns import Pattern, RequestValues, Unresolvable, substitute
from ssekd.spi.guard import Guard
from ssekd.spi.stream import EventSink
from ssekd.telemetry.events import EventLog
from ssekd.telemetry.metrics import Counter, Gauge, Metrics

#: What a stream whose last event id did not decode says first (docs/protocol.md): a comment,
#: which EventSource ignores and a person or a log reading the stream sees. It never repeats the
#: id, which the client wrote.
UNREADABLE_ID_NOTICE = comment("last event id not understood: this stream starts at the "
                               "oldest event ssekd holds, as a new one would")

#: The catch-up signal (`with.event.caught-up`, an ssekd addition; docs/protocol.md): an event,
#: not a comment, so that EventSource and the client library can listen for it; no id, so the
#: last event id stays the last record's; an empty `data:` line, since EventSource drops an
#: event that has no data line.
CAUGHT_UP_TYPE = "caught-up"
CAUGHT_UP_EVENT = event_bytes(None, CAUGHT_UP_TYPE, b"")

#: The topic of a route without `with`: what its path captured as `{topic}`.
DEFAULT_TOPIC = "${params.topic}"


def _request_values_first(header: tuple[str, Any]) -> tuple[bool, str]:
    """Orders a filter's headers: those whose value comes from the request (`${...}`) first,
    by name. The cache indexes a filter by its first part, and a value per request (an id, a
    user) names fewer records than one the route fixes for all of them."""
    name, value = header
    return "${" not in str(value), name


def _value_items(wanted: Any) -> list[Any]:
    """The values a value filter's pointer may hold: one, or a list (set membership)."""
    return list(wanted) if isinstance(wanted, list) else [wanted]


def _request_valued_first(item: tuple[str, Any]) -> tuple[bool, str]:
    """Orders a filter's pointers as `_request_values_first` orders its headers."""
    pointer, wanted = item
    return not any("${" in v for v in _value_items(wanted) if isinstance(v, str)), pointer


def with_templates(with_: Mapping[str, Any] | None) -> list[str]:
    """Every value of a route's `with` that may hold references, the topic first."""
    w = with_ or {}
    topic = w.get("topic", DEFAULT_TOPIC)
    out = [str(t) for t in topic] if isinstance(topic, list) else [str(topic)]
    for f in w.get("filters", ()):
        out += [str(f["key"])] if "key" in f else []
        out += [str(v) for v in (f.get("headers") or {}).values()]
        out += [v for wanted in (f.get("value") or {}).values() for v in _value_items(wanted)
                if isinstance(v, str)]
    return out


def value_conditions(spec: Mapping[str, Any], resolve: Callable[[str], str]
                     ) -> tuple[tuple[ValuePath, frozenset[bytes]], ...]:
    """A filter's `value` block as `Filter.values`: each pointer with the canonical JSON of the
    values it may hold, strings resolved by `resolve` (`${...}` references), pointers holding
    a value from the request first."""
    out = []
    for pointer, wanted in sorted(spec.items(), key=_request_valued_first):
        allowed = frozenset(canonical(resolve(v) if isinstance(v, str) else v)
                            for v in _value_items(wanted))
        out.append((ValuePath(pointer), frozenset(a for a in allowed if a is not None)))
    return tuple(out)


@runtime_checkable
class Cache(KafkaCache, Protocol):
    """The kafka cache sse-kafka exits to (its `KafkaCache` role), and its topics."""

    def topic(self, name: str) -> TopicCache: ...


@dataclass(frozen=True)
class SseKafkaRoute:
    patterns: tuple[Pattern, ...]
    exit: str
    with_: Mapping[str, Any] | None
    #: guard name -> roles a stream of this route needs (`guarded`).
    guarded: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)

    def label(self) -> str:
        """The route as a metric label: its paths."""
        return "|".join(p.text for p in self.patterns)

    def match(self, path: str) -> dict[str, str] | None:
        """The decoded captures of the first pattern that matches `path`, else None."""
        for pattern in self.patterns:
            params = pattern.match(path)
            if params is not None:
                return {k: unquote(v) for k, v in params.items()}
        return None


def _wants_caught_up(w: Mapping[str, Any]) -> bool:
    return bool((w.get("event") or {}).get("caught-up", False))


def signal_caught_up(subscriptions: Mapping[str, Subscription], sink: EventSink) -> None:
    """Write `CAUGHT_UP_EVENT` to `sink` once every one of a stream's subscriptions (one per
    topic) has caught up (`Subscription.when_caught_up`): after every record the cache held of
    every topic, live records of a topic that caught up first being already on their way."""
    waiting = set(subscriptions)

    def one(topic: str) -> Callable[[], None]:
        def then() -> None:
            waiting.discard(topic)
            if not waiting:
                sink.write(CAUGHT_UP_EVENT)
        return then

    for topic, subscription in subscriptions.items():
        subscription.when_caught_up(one(topic))


def parse_since(text: str) -> int:
    """`since` as epoch milliseconds: digits are epoch ms, otherwise ISO-8601 (naive is UTC)."""
    text = text.strip()
    if text.isdigit():
        return int(text)
    dt = datetime.fromisoformat(text.replace("Z", "+00:00") if text.endswith("Z") else text)
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return int(dt.timestamp() * 1000)


class RouteSubscription:
    """A subscription counted in its route's subscriber gauge until it closes. The stream reads
    `route` (its label, for the stream-end event), counts what it writes in `delivered`, and
    is gzip'd only where `compress` (the route's `with.compress`) allows it."""

    __slots__ = ("compress", "delivered", "gauge", "notice", "route", "subscription")

    def __init__(self, subscription: Subscription | TopicsSubscription, gauge: Gauge, route: str = "-",
                 delivered: Counter | None = None, compress: bool = True,
                 notice: bytes = b"") -> None:
        self.subscription = subscription
        self.gauge = gauge
        self.route = route
        self.delivered = delivered
        self.compress = compress
        #: What the stream says first, before any event (`UNREADABLE_ID_NOTICE`).
        self.notice = notice
        gauge.value += 1

    def pause(self) -> None:
        self.subscription.pause()

    def resume(self) -> None:
        self.subscription.resume()

    @property
    def closed(self) -> bool:
        return self.subscription.closed

    def close(self) -> None:
        if not self.subscription.closed:
            self.gauge.value -= 1
        self.subscription.close()


class SseKafkaProxy:
    """Runtime of an `sse-kafka` binding of kind `proxy` (the stream source of an sse server)."""

    def __init__(self, name: str, routes: tuple[SseKafkaRoute, ...],
                 caches: Mapping[str, Cache], events: EventLog,
                 guards: Mapping[str, Guard] | None = None,
                 internal_topics: InternalTopics = InternalTopics(),
                 metrics: Metrics | None = None) -> None:
        self.name = name
        self.routes = routes
        self.caches = caches
        self.events = events
        #: The guards routes name in `guarded`, to report the refusals decided here.
        self.guards = dict(guards or {})
        #: The cluster's own topics, built-in and `options.internal-topics`.
        self.internal_topics = internal_topics
        self.metrics = metrics or Metrics()
        #: id(route) -> its streams-open gauge (routes hold dicts: not hashable themselves)
        self._subscribers = {id(r): self.metrics.gauge("sse.kafka.subscribers", name,
                                                       route=r.label()) for r in routes}
        self._delivered = {id(r): self.metrics.counter("sse.kafka.delivered", name,
                                                       route=r.label()) for r in routes}
        # Weak: with filters from `{params}`, every distinct path would otherwise leave an
        # encoder behind forever; one lives exactly as long as a stream uses it.
        self._encoders: weakref.WeakValueDictionary[Any, KafkaEventEncoder] = \
            weakref.WeakValueDictionary()

    def open(self, request: StreamRequest, sink: EventSink) -> RouteSubscription | int | TryLater:
        for route in self.routes:
            params = route.match(request.path)
            if params is not None:
                return self._open(route, params, request, sink)
        self.events.emit(self.name, "BINDING_SSE_KAFKA_NO_ROUTE", request.describe)
        return 404

    def _open(self, route: SseKafkaRoute, params: dict[str, str], request: StreamRequest,
              sink: EventSink) -> RouteSubscription | int | TryLater:
        if route.guarded:
            refused = refuse_unauthorized(request, self.name, route.guarded, self.guards)
            if refused is not None:
                return refused
        context = request.context
        identities = context.identities() if context is not None else {}
        values = RequestValues(request.headers, request.query,
                               context.credential_query if context is not None else frozenset())
        w = route.with_ or {}
        spec = w.get("topic", DEFAULT_TOPIC)
        several = isinstance(spec, list)
        templates = [str(t) for t in spec] if several else [str(spec)]
        try:
            def resolve(text: str) -> str:
                return substitute(text, params, identities, request=values)

            #: each topic, and whether it came from the request (a `${...}` in its template)
            topics: dict[str, bool] = {}
            for template in templates:
                resolved = resolve(template)
                # a list item is a comma list (`/events/{topics}`): one topic each
                for topic in resolved.split(",") if several else (resolved,):
                    topics[topic] = topics.get(topic, False) or "${" in template
            filters = tuple(
                Filter(
                    key=None if "key" not in f else resolve(f["key"]).encode("utf-8"),
                    headers=tuple((n, resolve(v).encode("utf-8"))
                                  for n, v in sorted(f.get("headers", {}).items(),
                                                     key=_request_values_first)),
                    values=value_conditions(f.get("value") or {}, resolve))
                for f in w.get("filters", ()))
        except Unresolvable as e:
            self.events.emit(self.name, "BINDING_SSE_KAFKA_NO_ROUTE", f"{request.describe}: {e}")
            return 404
        for topic, from_request in topics.items():
            why = topic_refusal(topic, from_request, self.internal_topics)
            if why is not None:
                self.events.emit(self.name, "BINDING_SSE_KAFKA_NO_ROUTE",
                                 f"{request.describe}: {why}")
                return 404
        if len(topics) > MAX_STREAM_TOPICS:
            self.events.emit(self.name, "BINDING_SSE_KAFKA_TOO_MANY_TOPICS",
                             f"{request.describe}: {len(topics)} topics, at most "
                             f"{MAX_STREAM_TOPICS}")
            return 400
        id_format = (w.get("event") or {}).get("id", ETAG_FORMAT)
        cache = self.caches[route.exit]
        if several:
            return self._open_topics(route, list(topics), filters, request, sink, cache)
        topic = next(iter(topics))
        try:
            start = self._start(request, cache, topic)
            if isinstance(start, int):
                return start
            subscription = self._subscribe(cache, topic, filters, id_format, sink, start)
            if _wants_caught_up(w):
                signal_caught_up({topic: subscription}, sink)
            return RouteSubscription(subscription,
                                     self._subscribers[id(route)], route.label(),
                                     self._delivered[id(route)], bool(w.get("compress", True)),
                                     UNREADABLE_ID_NOTICE if start.undecodable_id else b"")
        except (TopicLimitReached, SchemaUnavailable) as e:
            return self._try_later(request, e)

    def _subscribe(self, cache: Cache, topic: str, filters: tuple[Filter, ...], id_format: str,
                   sink: EventSink, start: Start) -> Subscription:
        """A subscription of `topic` with the encoder of (topic, filters, id format)."""
        # First whether the cache follows the topic (`TopicLimitReached` if it may not),
        # then its metric series: the cache forgets the series of the topics it drops, and
        # a topic it refused is never dropped, so its series would stay for ever.
        cache.topic(topic)
        key = (topic, filters, id_format)
        encoder = self._encoders.get(key)
        if encoder is None:
            encoder = self._encoders[key] = KafkaEventEncoder(
                topic, filters, id_format,
                self.metrics.counter("sse.kafka.filtered", self.name, topic=topic),
                self.metrics.counter("sse.kafka.value.not.json", self.name, topic=topic))
        if start.has_id:
            self._count_resume(start, cache, topic)
        return cache.subscribe(topic, encoder, sink, start)

    def _try_later(self, request: StreamRequest,
                   e: TopicLimitReached | SchemaUnavailable) -> TryLater:
        if isinstance(e, TopicLimitReached):
            # Passes as idle topics are dropped: the browser is told to come back (docs/protocol.md).
            self.events.emit(self.name, "BINDING_SSE_KAFKA_TOPIC_LIMIT", f"{request.describe}: {e}")
            return TryLater("topics followed at their limit (max-topics)")
        # The catalog (a schema registry) is down or still answering: come back later.
        self.events.emit(self.name, "BINDING_SSE_KAFKA_SCHEMA_UNAVAILABLE",
                         f"{request.describe}: {e}")
        # come back once the catalog was asked again (at least a second from now)
        wait = None if e.retry_after is None else max(1.0, e.retry_after)
        return TryLater("the topic's schema is not available yet", wait)

    def _open_topics(self, route: SseKafkaRoute, topics: list[str], filters: tuple[Filter, ...],
                     request: StreamRequest, sink: EventSink, cache: Cache
                     ) -> RouteSubscription | int | TryLater:
        """A stream of several topics (an ssekd addition): one subscription per topic, their
        events' ids carrying every topic's progress (`ssekd.bindings.sse_kafka.topics`)."""
        w = route.with_ or {}
        stream = TopicsSubscription(topics, sink,
                                    (w.get("event") or {}).get("topic", TOPIC_AS_EVENT))
        try:
            starts = self._topic_starts(request, cache, topics)
            if isinstance(starts, int):
                return starts
            subscriptions: dict[str, Subscription] = {}
            for topic in stream.topics:
                subscriptions[topic] = self._subscribe(cache, topic, filters, ETAG_FORMAT,
                                                       stream.sinks[topic], starts[topic])
                stream.add(topic, subscriptions[topic])
        except (TopicLimitReached, SchemaUnavailable) as e:
            stream.close()
            return self._try_later(request, e)
        if _wants_caught_up(w):
            # past the topics' sinks, which would make the event a topic's
            signal_caught_up(subscriptions, sink)
        unreadable = any(start.undecodable_id for start in starts.values())
        return RouteSubscription(stream, self._subscribers[id(route)], route.label(),
                                 self._delivered[id(route)], bool(w.get("compress", True)),
                                 UNREADABLE_ID_NOTICE if unreadable else b"")

    def _topic_starts(self, request: StreamRequest, cache: Cache, topics: list[str]
                      ) -> dict[str, Start] | int:
        """Where each topic of a several-topic stream starts: its part of the last event id
        (a topic the id has no part for starts as a new stream would), else `since`."""
        last_id = request.last_event_id
        if last_id:
            try:
                positions = parse_topics_id(last_id, topics)
            except UndecodableId as e:
                self.events.emit(self.name, "BINDING_SSE_KAFKA_LAST_EVENT_ID_UNREADABLE",
                                 f"{request.describe} {e}: {last_id[:80]!r}")
                return {t: Start(undecodable_id=True) for t in topics}
            for topic, at in positions.items():
                self._check_partitions(request, cache, topic, at)
            return {t: Start(resume=positions[t]) if t in positions else Start() for t in topics}
        start = self._since(request)
        return start if isinstance(start, int) else {t: start for t in topics}

    def _count_resume(self, start: Start, cache: Cache, topic: str) -> None:
        """Where a stream that came back resumes: the cache holds every position its id names,
        or some are older (read from Kafka), or the id did not decode."""
        if start.undecodable_id:
            outcome = "undecodable"
        else:
            held = cache.topic(topic).log.partitions
            older = any(p in held and pos < held[p].start
                        for p, pos in (start.resume or {}).items())
            outcome = "kafka" if older else "cache"
        self.metrics.counter("sse.kafka.resumes", self.name, outcome=outcome).value += 1

    def _start(self, request: StreamRequest, cache: Cache, topic: str) -> Start | int:
        """What the request asks for (its last event id, else `since`), reporting what it cannot
        read; where that puts the stream is `ssekd.bindings.kafka.start`'s to decide."""
        last_id = request.last_event_id
        if last_id:
            try:
                positions = parse_last_event_id(last_id)
            except UndecodableId as e:
                self.events.emit(self.name, "BINDING_SSE_KAFKA_LAST_EVENT_ID_UNREADABLE",
                              f"{request.describe} {e}: {last_id[:80]!r}")
                return Start(undecodable_id=True)
            self._check_partitions(request, cache, topic, positions)
            return Start(resume=positions)
        return self._since(request)

    def _check_partitions(self, request: StreamRequest, cache: Cache, topic: str,
                          positions: Mapping[int, int]) -> None:
        """Reports (once the topic's partitions are known) partitions an id names that the
        topic does not have."""
        describe = request.describe

        def check(count: int) -> None:
            unknown = [p for p in positions if p >= count]
            if unknown:
                self.events.emit(self.name, "BINDING_SSE_KAFKA_LAST_EVENT_ID_UNREADABLE",
                                 f"{describe} partitions {unknown[:5]} not in {topic}")
        cache.topic(topic).when_counted(check)

    def _since(self, request: StreamRequest) -> Start | int:
        """The start `since` asks for (400 when it does not read), else a new stream's."""
        since = request.query.get("since")
        if since is not None:
            try:
                return Start(since_ms=parse_since(since))
            except (ValueError, OverflowError, OSError):
                self.events.emit(self.name, "BINDING_SSE_KAFKA_SINCE_INVALID",
                              f"{request.describe} since={since[:40]!r}")
                return 400
        return Start()
