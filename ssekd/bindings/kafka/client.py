"""kafka client: the only code that talks to the Kafka cluster.

librdkafka objects are not safe to share between threads, and their calls block, so each client
binding owns two threads (`consumer_thread`), each owning one `confluent_kafka.Consumer` from
creation to close:

- the *tail* consumer (`tail_consumer.TailConsumer`) is assigned every partition of every topic
  in use and feeds the cache, through one `inbox.Inbox` per topic;
- the *history* consumer (`history.HistoryFetcher`) serves one-off reads of offsets older than
  the cache, each bounded in bytes, at most `max_history_reads` at once.

Its producers (http-kafka writes) are `producer.Writes`; what librdkafka is told comes from the
binding's options (`settings.ClientSettings`), and its log becomes the binding's events
(`librdkafka.LibrdkafkaLog`). This module ties them together as the binding's service.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from twisted.application.service import Service
from twisted.internet.defer import Deferred, fail

from ssekd.bindings.kafka.consumer_thread import ConsumerThread
from ssekd.bindings.kafka.history import FetchRequest, FetchResult, HistoryBusy, HistoryFetcher
from ssekd.bindings.kafka.inbox import TopicSink
from ssekd.bindings.kafka.librdkafka import LibrdkafkaLog
from ssekd.bindings.kafka.producer import Delivered, Record, Writes
from ssekd.bindings.kafka.settings import ClientSettings
from ssekd.bindings.kafka.tail_consumer import FollowedTopic, TailConsumer
from ssekd.telemetry.delivery import Deliveries
from ssekd.telemetry.metrics import Reading


class KafkaClient(Service):
    """Runtime object of a `kafka` binding of kind `client`."""

    def __init__(self, reactor: Any, settings: ClientSettings, binding: str,
                 emit: Callable[[str, str], object],
                 deliveries: Deliveries | None = None) -> None:
        self.reactor = reactor
        self.settings = settings
        self.binding = binding
        self._emit = emit
        self.deliveries = deliveries
        #: One tail consumer per cache_server (docs/protocol.md: one consumer per cache_server topic set).
        self.tails: dict[str, TailConsumer] = {}
        self.history = HistoryFetcher(self)
        #: History reads handed to the history thread and not answered yet.
        self.history_pending = 0
        #: The producers (http-kafka writes), made on first use.
        self.writes = Writes(reactor, self._producer_config, binding, self._emit_event,
                             settings.max_inflight_bytes)

    def _producer_config(self, acks: str) -> dict[str, Any]:
        """A producer's conf, its librdkafka log going to the binding's events."""
        conf = self.settings.producer_config(acks)
        conf["logger"] = LibrdkafkaLog(self.event)
        return conf

    def _emit_event(self, name: str, detail: str) -> None:
        self._emit(name, detail)

    def produce(self, record: Record, acks: str) -> Deferred[Delivered]:
        """Write `record` (see `producer.Writes.produce`)."""
        return self.writes.produce(record, acks)

    def warm(self, acks: str, topics: Sequence[str] = ()) -> None:
        """Make the producer for `acks` now, and learn `topics`, ahead of the first write."""
        self.writes.warm(acks, topics)

    # called on any thread: events are printed from the reactor thread only
    def event(self, name: str, detail: str = "-") -> None:
        if threading.current_thread() is threading.main_thread():
            self._emit(name, detail)
        else:
            self.reactor.callFromThread(self._emit, name, detail)

    def consume(self, cache_server: str, topic: str, sink: TopicSink, from_end: bool = False,
                give_up_after: int | None = None) -> None:
        """Feed `topic` to `sink` from now on (from its beginning, or its end when `from_end`),
        on the tail consumer of the cache_server binding named `cache_server`. A topic the
        cluster lacks is looked for `give_up_after` times (None: for ever) before
        `sink.on_missing`."""
        tail = self.tails.get(cache_server)
        if tail is None:
            tail = self.tails[cache_server] = TailConsumer(self, cache_server)
            if self.running:
                tail.start()
        follow = FollowedTopic(sink, from_end, give_up_after)
        follow.inbox.deliveries = self.deliveries
        tail.changes.put((topic, follow))

    def figures(self) -> Iterable[Reading]:
        """`kafka.client.connected`: 1 while every consumer that has tried reaches a broker."""
        tails = list(self.tails.values())
        if tails:
            up = all(t.connected is True for t in tails)
            yield "kafka.client.connected", {}, 1.0 if up else 0.0

    def unconsume(self, cache_server: str, topic: str) -> None:
        """Stop consuming `topic` for `cache_server`: its partitions are unassigned."""
        tail = self.tails.get(cache_server)
        if tail is not None:
            tail.changes.put((topic, None))

    def fetch(self, topic: str, partition: int, offset: int, limit: int,
              max_bytes: int) -> Deferred[FetchResult]:
        """Read up to `limit` records of a partition from `offset` (history older than the cache),
        stopping once their sizes reach `max_bytes`; fails with `HistoryBusy` when
        `max_history_reads` are already waiting."""
        if self.history_pending >= self.settings.max_history_reads:
            return fail(HistoryBusy(f"{self.history_pending} history reads waiting"))
        self.history_pending += 1
        d: Deferred[FetchResult] = Deferred()
        d.addBoth(self._answered)
        self.history.requests.put(FetchRequest(topic, partition, offset, limit, max_bytes, d))
        self.history.start()
        return d

    def _answered(self, result: Any) -> Any:
        self.history_pending -= 1
        return result

    def startService(self) -> None:
        super().startService()
        for tail in self.tails.values():
            tail.start()
        self.writes.start()

    def stopService(self) -> Deferred[None]:
        super().stopService()
        all_threads: list[ConsumerThread] = [*self.tails.values(), self.history]
        threads: list[threading.Thread] = [t for t in all_threads if t.is_alive()]
        for t in all_threads:
            t.stop()
        threads += [t for t in self.writes.stop() if t.is_alive()]
        done: Deferred[None] = Deferred()

        def join() -> None:
            for t in threads:
                t.join(10)
            self.reactor.callFromThread(done.callback, None)

        if not threads:
            done.callback(None)
        else:
            threading.Thread(target=join, name=f"ssekd-kafka-join-{self.binding}",
                             daemon=True).start()
        return done
