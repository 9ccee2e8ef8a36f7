"""kafka cache_server and cache_client: one `TopicCache` per topic, shared by every stream.

The cache_server owns the caches and asks its kafka client to consume each topic once, however
many streams read it (docs/protocol.md); `bootstrap` topics are consumed from start-up. The cache_client
is what sse-kafka routes exit to; it hands subscriptions to its cache_server.

A `TopicCache` alone decides which tail group or lagging set each of its subscriptions is in;
a subscription only reports reaching the tail, leaving it and closing (`subscription.SubscribedCache`).
Its `TailRouter` takes each batch to the tail groups whose filters can take its records.

Topics come and go: with a route such as `/{topic}` any client can name one, so a topic that has
had no stream for `idle-timeout` seconds is dropped (cache freed, partitions unassigned), and one
the cluster still lacks after `missing-topic-retries` looks is dropped and its streams ended.
Bootstrap topics stay. So `max-topics` bounds what is followed at once, and names asked for once
cannot hold it for ever.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from twisted.application.service import Service
from twisted.internet.defer import Deferred, fail
from twisted.logger import Logger

from ssekd.bindings.kafka.client import KafkaClient
from ssekd.bindings.kafka.gate import InvalidReport, RecordGate
from ssekd.bindings.kafka.history import FetchResult
from ssekd.bindings.kafka.message import OFFSET, PARTITION, SIZE, TIMESTAMP, Message
from ssekd.bindings.kafka.missing_topics import DEFAULT_GIVE_UP_AFTER
from ssekd.bindings.kafka.producer import Delivered, Record
from ssekd.bindings.kafka.start import Start
from ssekd.bindings.kafka.subscription import (
    DEFAULT_CATCH_UP_BYTES,
    EventEncoder,
    SharedSteps,
    Subscription,
)
from ssekd.bindings.kafka.tail import TailGroup, TailRouter
from ssekd.bindings.kafka.topic_log import CacheBounds, TopicLog
from ssekd.bindings.kafka.write_models import RecordRefused, SchemaPending, WriteModels
from ssekd.catalogs.models import TopicModel
from ssekd.event_ids import ProgressState
from ssekd.health import Check
from ssekd.spi.stream import EventSink
from ssekd.telemetry.metrics import Counter, Metrics, Reading

_log = Logger()

#: Topics one cache_server follows at most, unless `max-topics` says otherwise.
DEFAULT_MAX_TOPICS = 100
#: Seconds a topic without streams is still followed, unless `idle-timeout` says otherwise.
DEFAULT_IDLE_TIMEOUT = 300.0


class TopicLimitReached(Exception):
    """A stream asked for one more topic than `max-topics` allows."""


class SchemaUnavailable(Exception):
    """The topic's model cannot check records yet (its catalog has not answered): streams are
    refused for now, as its records could not be shown to be valid. `retry_after`: seconds
    until the catalog is asked again, when known."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


#: Seconds new streams wait for every partition of a topic before they deliver those that are
#: ready (`partition-wait`).
DEFAULT_PARTITION_WAIT = 5.0
#: Checks a topic not yet described may hold waiting for its partition count.
MAX_WAITING_FOR_COUNT = 100

#: Seconds a stream placed past the end the cache has read is given before an end below its
#: position means the broker lost the partition. Another worker's or daemon's cache read further
#: than this one by the time its consumer's next fetch takes (milliseconds; `fetch.wait.max.ms`
#: at most when it waits for data), so the records of a real position arrive well within this.
PAST_END_GRACE = 5.0


class TopicCache:
    """The log of one topic plus everyone reading it; fed by the client's tail consumer."""

    def __init__(self, server: CacheServer, topic: str, bounds: CacheBounds,
                 live: bool, gate: RecordGate | None = None) -> None:
        self.server = server
        self.reactor = server.reactor
        self.topic = topic
        self.log = TopicLog(topic, bounds, oversized=self._oversized)
        #: When the last `BINDING_KAFKA_RECORD_TOO_LARGE` was said, and how many since.
        self._oversized_at = float("-inf")
        self._oversized_since = 0
        #: defaultOffset: live - new streams without an id start at the end.
        self.live = live
        #: The subscriptions at the tail, in groups, and how a batch reaches them.
        self.tail = TailRouter(self.log)
        #: Subscriptions reading on their own (new, paused, catching up): woken by new data.
        self.lagging: set[Subscription] = set()
        #: The timer that drops this topic, armed while no subscription reads it.
        self.idle_call: Any = None
        #: The topic's model, checking records before they enter the log (None: no model).
        self.gate = gate
        #: Catch-up steps encoded lately, for streams at the same place to reuse.
        self.steps = SharedSteps()
        #: What waits for the topic's partition count (`when_counted`).
        self._counted: list[Callable[[int], None]] = []
        #: Subscriptions placed past the end the cache had reached in some partition, with the
        #: time from which an end below them means the broker lost it (`_judge_ahead`).
        self._ahead: dict[Subscription, float] = {}
        #: The timer of the next `_judge_ahead`, while some subscription is ahead.
        self._judge_call: Any = None
        #: Told of every change of the log (`watch`): http-kafka's replies and fetches.
        self.watchers: list[Callable[[list[Message]], None]] = []
        #: Ends the wait for every partition (`partition-wait`), once the count is known.
        self._partial_call: Any = None
        #: Subscriptions at the tail that wait for the log to be loaded (`await_loaded`) to
        #: send their catch-up signal.
        self._awaiting_loaded: set[Subscription] = set()

    # -- fed by the kafka client (reactor thread) ----------------------------------------------

    def when_counted(self, then: Callable[[int], None]) -> None:
        """`then(partitions)` once the topic's partition count is known: now, or when its
        metadata comes (at most `MAX_WAITING_FOR_COUNT` wait; more are dropped, as for a topic
        that never appears they would pile up). A check that needs the count (an id naming
        partitions the topic lacks) then says the same on a cold cache as on a warm one."""
        if self.log.partition_count is not None:
            then(self.log.partition_count)
        elif len(self._counted) < MAX_WAITING_FOR_COUNT:
            self._counted.append(then)

    def on_metadata(self, partitions: int, compacted: bool | None) -> None:
        if self.log.partition_count is None and self._partial_call is None:
            self._partial_call = self.reactor.callLater(self.server.partition_wait,
                                                        self._stop_waiting)
        self.log.partition_count = partitions
        waiting, self._counted = self._counted, []
        for then in waiting:
            then(partitions)
        if compacted is not None and not self.log.count:
            self.log.compacted = compacted
        self._wake()

    def _stop_waiting(self) -> None:
        """`partition-wait` passed since the partition count came: streams go on with the
        partitions the cache has heard of (a partition without a leader waits for nobody)."""
        self._partial_call = None
        self.log.partial = True
        self._wake()

    def on_records(self, records: list[Message]) -> None:
        if self.gate is not None:
            self.gate.records(records)  # calls _add with the records that pass, in order
        else:
            self._add(records)

    @property
    def groups(self) -> dict[Any, TailGroup]:
        """The tail groups, by encoder (and floor)."""
        return self.tail.groups

    @property
    def group_of(self) -> dict[Subscription, TailGroup]:
        """The tail group of each subscription at the tail."""
        return self.tail.group_of

    def _add(self, records: list[Message]) -> None:
        before = self.log.tail() if self.tail.groups else None
        fresh = self.log.append(records, self.reactor.seconds())
        if fresh and before is not None:
            self.tail.route(fresh, before)
        self._wake()
        if self.watchers and fresh:
            self._tell(fresh)

    def watch(self, watcher: Callable[[list[Message]], None]) -> Callable[[], None]:
        """Call `watcher` after each change of the log, on the reactor thread: with the records
        a batch added (once the streams at the tail have them), or with none when a partition
        reached its end or started over. A watched topic is not idle. Returns the function that
        stops the watching."""
        self.watchers.append(watcher)
        self.server.busy(self)

        def stop() -> None:
            if watcher in self.watchers:
                self.watchers.remove(watcher)
                if not self.watchers and not self.tail and not self.lagging:
                    self.server.idle(self)

        return stop

    def _tell(self, fresh: list[Message]) -> None:
        for watcher in list(self.watchers):
            try:
                watcher(fresh)
            except Exception:  # noqa: BLE001 - one watcher's bug must not stop the cache
                _log.failure("watcher of {topic}", topic=self.topic)

    def on_end(self, partition: int, next_offset: int) -> None:
        if self.gate is not None:
            self.gate.then(self._end, partition, next_offset)  # after the records before it
        else:
            self._end(partition, next_offset)

    def _end(self, partition: int, next_offset: int) -> None:
        self.log.reached_end(partition, next_offset)
        if self._ahead:
            self._judge_ahead()
        self.tail.settle()
        if self._awaiting_loaded and self.log.loaded():
            awaiting, self._awaiting_loaded = self._awaiting_loaded, set()
            for s in awaiting:
                s.loaded()
        self._wake()
        if self.watchers:
            self._tell([])

    def on_rewind(self, partition: int, origin: int) -> None:
        """The broker lost `partition` (restarted empty): the tail consumer reads it again from
        `origin`. The cache forgets the lost records, and every stream placed in the partition
        starts it over there, so none waits for offsets of the lost incarnation and none misses
        the new one's records. (Behind the records a model's gate still holds, as they came.)"""
        if self.gate is not None:
            self.gate.then(self._rewind, partition, origin)
        else:
            self._rewind(partition, origin)

    def _rewind(self, partition: int, origin: int) -> None:
        part = self.log.partitions.get(partition)
        if part is None:
            return
        reached = part.next
        self.log.rewind(partition, origin)
        self.steps.clear()  # they hold records of the lost incarnation
        placed = [s for s in self.subscriptions() if self._position(s, partition) is not None]
        self.server.event("BINDING_KAFKA_PARTITION_RESET",
                          f"{self.topic} partition {partition}: offsets start again at {origin} "
                          f"(the cache had reached {reached}); {len(placed)} streams start over")
        for s in placed:
            s.restart(partition, origin)
        self._wake()
        if self.watchers:
            self._tell([])

    def _oversized(self, m: Message) -> None:
        """A record larger than the cache's `max-bytes` leaves the cache as it comes: streams at
        the tail got it, later ones read it from Kafka. Said at most once a second per topic,
        so a producer of such records cannot flood the log."""
        now = self.reactor.seconds()
        if now - self._oversized_at < 1.0:
            self._oversized_since += 1
            return
        more = f" ({self._oversized_since} more since the last report)" \
            if self._oversized_since else ""
        self._oversized_at, self._oversized_since = now, 0
        self.server.event("BINDING_KAFKA_RECORD_TOO_LARGE",
                          f"{self.topic} partition {m[PARTITION]} offset {m[OFFSET]}: {m[SIZE]} "
                          f"bytes, over the cache's max-bytes {self.log.bounds.max_bytes}; "
                          f"streams at the tail got it, later ones read it from Kafka{more}")

    def on_missing(self) -> None:
        self.server.missing(self)

    def subscriptions(self) -> list[Subscription]:
        """Every open subscription: at the tail or lagging."""
        return [*self.tail.members(), *self.lagging]

    # -- subscriptions ---------------------------------------------------------------------

    def subscribe(self, encoder: EventEncoder, sink: EventSink, start: Start) -> Subscription:
        s = Subscription(self, encoder, sink, start)
        self.lagging.add(s)
        self.server.busy(self)
        s.schedule()
        return s

    # -- what subscriptions report (subscription.SubscribedCache) ---------------------------------

    def reached_tail(self, s: Subscription) -> None:
        self.lagging.discard(s)
        self.tail.join(s)

    def tail_positions(self, s: Subscription) -> dict[int, int]:
        return self.tail.positions(s)

    def left_tail(self, s: Subscription) -> ProgressState:
        self.lagging.add(s)
        self._awaiting_loaded.discard(s)  # asks again when it is back at the tail
        return self.tail.leave(s)

    def await_loaded(self, s: Subscription) -> None:
        self._awaiting_loaded.add(s)

    def placed_ahead(self, s: Subscription) -> None:
        self._ahead[s] = self.reactor.seconds() + PAST_END_GRACE
        if self._judge_call is None:
            self._judge_call = self.reactor.callLater(PAST_END_GRACE, self._judge_ahead)

    def gone(self, s: Subscription) -> None:
        if s in self.tail.group_of:
            self.tail.leave(s)
        self._ahead.pop(s, None)
        self._awaiting_loaded.discard(s)
        self.lagging.discard(s)
        if not self.tail and not self.lagging and not self.watchers:
            self.server.idle(self)

    @property
    def catch_up_bytes(self) -> int:
        return self.server.catch_up_bytes

    def fetch(self, partition: int, offset: int, limit: int,
              max_bytes: int) -> Deferred[FetchResult]:
        d = self.server.client.fetch(self.topic, partition, offset, limit, max_bytes)
        gate = self.gate
        if gate is not None:
            d.addCallback(gate.check_history,
                          lambda at: self.fetch(partition, at, limit, max_bytes))
        return d

    def history_unavailable(self, partition: int, offset: int, error: str | None) -> None:
        self.server.event("BINDING_KAFKA_HISTORY_UNAVAILABLE",
                          f"{self.topic} partition {partition} offset {offset}: {error}")

    # -- partitions the broker lost (reactor thread) ------------------------------------------------

    def _position(self, s: Subscription, partition: int) -> int | None:
        if s in self.tail.group_of:
            return self.tail.position(s, partition)
        return s.progress.offsets.get(partition)

    def _judge_ahead(self) -> None:
        """Streams placed past the end the cache had read (their last event id is further on,
        `placed_ahead`) wait for the records of their position. Once `PAST_END_GRACE` has passed
        and the consumer is at a partition's end below a stream's position, the broker does
        not have that position: it lost the partition (restarted empty, or the topic was made
        again), and the stream starts the partition over. Runs at each end the consumer reaches
        and on a timer while some stream is ahead; looks only at those streams."""
        if self._judge_call is not None and self._judge_call.active():
            self._judge_call.cancel()
        self._judge_call = None
        now = self.reactor.seconds()
        parts = self.log.partitions
        for s, due in list(self._ahead.items()):
            if s.closed:
                del self._ahead[s]
                continue
            ahead = False
            for p, part in parts.items():
                at = self._position(s, p)
                if at is None or at <= part.next:
                    continue
                if due > now or not part.at_end:
                    ahead = True
                    continue
                self.server.event("BINDING_KAFKA_LAST_EVENT_ID_PAST_END",
                                  f"{self.topic} partition {p}: offset {at} is past the end "
                                  f"{part.next} (the broker lost the partition?); the stream "
                                  f"starts it over")
                s.restart(p, self.log.historical_start(p))
            if not ahead:
                del self._ahead[s]
        if self._ahead:
            wait = max(0.0, min(self._ahead.values()) - now)
            self._judge_call = self.reactor.callLater(max(wait, 1.0), self._judge_ahead)

    def stop_judging(self) -> None:
        """No `_judge_ahead` (or `partition-wait`) timer outlives the service."""
        for call in (self._judge_call, self._partial_call):
            if call is not None and call.active():
                call.cancel()
        self._judge_call = self._partial_call = None

    def _wake(self) -> None:
        call = self._partial_call
        if call is not None and self.log.partition_count is not None \
                and len(self.log.partitions) >= self.log.partition_count:
            if call.active():  # every partition heard of: nothing to wait for any more
                call.cancel()
            self._partial_call = None
        for s in list(self.lagging):
            s.schedule()


class CacheServer(Service):
    """Runtime of a `kafka` binding of kind `cache_server`."""

    def __init__(self, reactor: Any, client: KafkaClient, binding: str, events: Any,
                 bootstrap: Iterable[str] = (), live_topics: Iterable[str] = (),
                 bounds: CacheBounds | None = None, max_topics: int = DEFAULT_MAX_TOPICS,
                 idle_timeout: float = DEFAULT_IDLE_TIMEOUT,
                 missing_topic_retries: int = DEFAULT_GIVE_UP_AFTER,
                 catch_up_bytes: int = DEFAULT_CATCH_UP_BYTES,
                 partition_wait: float = DEFAULT_PARTITION_WAIT,
                 metrics: Metrics | None = None,
                 models: Mapping[str, TopicModel] | None = None) -> None:
        self.reactor = reactor
        self.client = client
        self.binding = binding
        self.events = events
        self.bootstrap = tuple(bootstrap)
        self.live_topics = frozenset(live_topics)
        self.bounds = bounds or CacheBounds()
        self.topics: dict[str, TopicCache] = {}
        self.max_topics = max_topics
        self.idle_timeout = idle_timeout
        self.missing_topic_retries = missing_topic_retries
        self.catch_up_bytes = catch_up_bytes
        self.partition_wait = partition_wait
        self.metrics = metrics
        if metrics is not None:
            metrics.reader(binding, "cache", self.figures)
        #: Per topic with a `value` or `key` model: what its records must be.
        self.models = dict(models or {})

    def event(self, name: str, detail: str) -> None:
        self.events.emit(self.binding, name, detail)

    def startService(self) -> None:
        super().startService()
        for model in self.models.values():
            model.resolve()  # catalogs answer before the first stream, when they can
        for topic in self.bootstrap:
            self.topic(topic)

    def topic(self, name: str) -> TopicCache:
        """The cache of `name`, consuming it from now on if it was not yet."""
        cache = self.topics.get(name)
        if cache is None:
            if len(self.topics) >= self.max_topics and name not in self.bootstrap:
                raise TopicLimitReached(f"{self.binding} follows {len(self.topics)} topics "
                                        f"(max-topics); not starting {name}")
            live = name in self.live_topics
            cache = self.topics[name] = TopicCache(self, name, self.bounds, live)
            model = self.models.get(name)
            if model is not None:
                cache.gate = self._gate(cache, model)
            boot = name in self.bootstrap
            self.client.consume(self.binding, name, cache, from_end=live and not boot,
                                give_up_after=None if boot else self.missing_topic_retries)
            self.idle(cache)  # until its first subscription: a stream may never come
        return cache

    # -- topics that go (reactor thread) ---------------------------------------------------------

    def busy(self, cache: TopicCache) -> None:
        """A subscription opened: the topic is not idle."""
        if cache.idle_call is not None:
            if cache.idle_call.active():
                cache.idle_call.cancel()
            cache.idle_call = None

    def idle(self, cache: TopicCache) -> None:
        """The topic's last subscription closed: drop it if none comes within idle-timeout.

        Not once the service stopped (a reload replaced it): its streams close after that, and
        a timer then would unassign a topic from a client the new cache_server may share."""
        if (self.running and cache.idle_call is None and cache.topic not in self.bootstrap
                and self.topics.get(cache.topic) is cache):
            cache.idle_call = self.reactor.callLater(self.idle_timeout, self._idle_expired, cache)

    def _idle_expired(self, cache: TopicCache) -> None:
        cache.idle_call = None
        if not cache.subscriptions() and not cache.watchers:
            self._drop(cache, f"no stream for {self.idle_timeout:g} s")

    def missing(self, cache: TopicCache) -> None:
        """The cluster lacks the topic after every look: end its streams (browsers come back
        later and start over) and stop following it."""
        self._drop(cache, f"not in the cluster after {self.missing_topic_retries} looks")
        for s in cache.subscriptions():
            s.sink.end()
        if cache.watchers:
            cache._tell([])

    def _drop(self, cache: TopicCache, why: str) -> None:
        self.busy(cache)  # cancel its idle timer
        if self.topics.get(cache.topic) is not cache:
            return  # already dropped
        del self.topics[cache.topic]
        cache.stop_judging()
        self.client.unconsume(self.binding, cache.topic)
        if self.metrics is not None:
            self.metrics.forget("topic", cache.topic)
        self.event("BINDING_KAFKA_TOPIC_DROPPED", f"{cache.topic}: {why}")

    def _gate(self, cache: TopicCache, model: TopicModel) -> RecordGate:
        counter = self.metrics.counter("kafka.cache.invalid", self.binding, topic=cache.topic) \
            if self.metrics is not None else Counter()
        return RecordGate(model, InvalidReport(cache.topic, self.reactor, self.event, counter),
                          cache._add)

    def subscribe(self, topic: str, encoder: EventEncoder, sink: EventSink,
                  start: Start) -> Subscription:
        cache = self.topic(topic)
        if cache.gate is not None and not cache.gate.ready:
            model = cache.gate.model
            raise SchemaUnavailable(f"{topic}: the schema of its model is not available "
                                    f"({model.problem or 'still being fetched'})",
                                    model.next_try_in)
        return cache.subscribe(encoder, sink, start)

    def produce(self, record: Record, acks: str) -> Deferred[Delivered]:
        """Write `record` through the kafka client (see `producer.Writes.produce`)."""
        return self.client.produce(record, acks)

    def warm(self, acks: str, topics: Sequence[str] = ()) -> None:
        """Make the kafka client's producer for `acks` ahead of the first write."""
        self.client.warm(acks, topics)

    def figures(self) -> Iterable[Reading]:
        """Per topic (never per stream): its cache's size, oldest record age, readers, and the
        consumer lag per partition from the tail consumer's last measurement."""
        now = self.reactor.seconds()
        for name, cache in self.topics.items():
            log = cache.log
            labels = {"topic": name}
            yield "kafka.cache.messages", labels, float(log.count)
            yield "kafka.cache.size", labels, float(log.bytes)
            heads = [part.records[part.head][TIMESTAMP] for part in log.partitions.values()
                     if len(part)]
            oldest = min((t for t in heads if t > 0), default=None)
            yield "kafka.cache.oldest.age", labels, \
                max(0.0, now - oldest / 1000.0) if oldest is not None else 0.0
            yield "kafka.cache.subscribers", labels, \
                float(len(cache.tail) + len(cache.lagging))
        tail = self.client.tails.get(self.binding)
        lag = tail.lag if tail is not None else {}
        for (topic, partition), behind in lag.items():
            yield "kafka.consumer.lag", {"topic": topic, "partition": str(partition)}, \
                float(behind)

    def readiness(self) -> Iterable[Check]:
        """Ready once every bootstrap topic has been loaded to its end once: before that, a new
        client here would get an incomplete history. A broker lost later does not count: every
        daemon sees that outage alike, and failing for it would take them all out of the
        balancer at once; streams (open and new) wait for the broker meanwhile."""
        tail = self.client.tails.get(self.binding)
        down = tail is not None and tail.connected is False
        for name in self.bootstrap:
            cache = self.topics.get(name)
            loaded = cache is not None and cache.log.loaded()
            yield Check(f"{self.binding}/{name}", loaded, "loaded" if loaded else
                        "loading (no Kafka broker reachable)" if down else "loading")

    def stopService(self) -> None:
        super().stopService()
        for cache in self.topics.values():
            self.busy(cache)  # no idle timer outlives the service
            cache.stop_judging()
        for model in self.models.values():
            model.stop()  # nor a catalog retry


class CacheClient(Service):
    """Runtime of a `kafka` binding of kind `cache_client`: sse-kafka's way into the cache, and
    http-kafka's way out to Kafka. A topic with a write model (`options.topics[].value`/`.key`,
    `ssekd.catalogs.writing`) has what is produced to it encoded by that model first: a record
    the model refuses fails with `RecordRefused` and nothing is sent."""

    def __init__(self, server: CacheServer, models: Mapping[str, WriteModels] | None = None
                 ) -> None:
        self.server = server
        self.models = dict(models or {})

    def startService(self) -> None:
        super().startService()
        for model in self.models.values():
            model.resolve()  # the catalogs answer before the first write, when they can

    def stopService(self) -> None:
        super().stopService()
        for model in self.models.values():
            model.stop()

    def subscribe(self, topic: str, encoder: EventEncoder, sink: EventSink,
                  start: Start) -> Subscription:
        return self.server.subscribe(topic, encoder, sink, start)

    def topic(self, name: str) -> TopicCache:
        return self.server.topic(name)

    def produce(self, record: Record, acks: str) -> Deferred[Delivered]:
        model = self.models.get(record.topic)
        if model is None:
            return self.server.produce(record, acks)
        try:
            return self.server.produce(model.encode(record), acks)
        except RecordRefused as e:
            return fail(e)
        except SchemaPending as e:
            if e.resolving is None:
                return fail(e)
            # the catalog is being asked now (just started, or a try after a failure): once it
            # answered, one more try; still pending then is the writer's `503`
            return e.resolving.addCallback(lambda _: self._encode_again(model, record, acks))

    def _encode_again(self, model: WriteModels, record: Record, acks: str
                      ) -> Deferred[Delivered]:
        try:
            encoded = model.encode(record)
        except SchemaPending as e:
            e.resolving = None
            return fail(e)
        except RecordRefused as e:
            return fail(e)
        return self.server.produce(encoded, acks)

    def warm(self, acks: str, topics: Sequence[str] = ()) -> None:
        self.server.warm(acks, topics)
