"""kafka client: the only code that talks to the Kafka cluster.

librdkafka objects are not safe to share between threads, and their calls block, so each client
binding owns two threads, each owning one `confluent_kafka.Consumer` from creation to close:

- the *tail* consumer (`TailConsumer`) is assigned every partition of every topic in use and
  feeds the cache; it tracks each partition's next offset from fetched data (tansu's
  `get_watermark_offsets` is wrong, real Kafka's is racy anyway) and re-reads metadata now and
  then to notice new partitions and topics that did not exist yet;
- the *history* consumer (`HistoryFetcher`) serves one-off reads of offsets older than the cache.

Batches cross to the reactor with `reactor.callFromThread`; the reactor thread never waits on
Kafka. When the broker is down at start or goes away, the threads retry with back-off and say so
in events; librdkafka keeps the fetch positions, so consumption resumes at the next offset.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    Consumer,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, ConfigResource  # type: ignore[attr-defined]
from twisted.application.service import Service
from twisted.internet.defer import Deferred
from twisted.logger import Logger

from ssekd.bindings.kafka.message import Message, from_confluent

_log = Logger()

#: Records taken from librdkafka per `consume` call (one batch handed to the reactor).
BATCH = 1000
#: Seconds between measurements of the consumer lag (local calls only: no broker round trip).
LAG_INTERVAL = 1.0


class TopicSink(Protocol):
    """Where the tail consumer delivers one topic's data (the cache's `TopicCache`)."""

    def on_metadata(self, partitions: int, compacted: bool | None) -> None: ...

    def on_records(self, records: list[Message]) -> None: ...

    def on_end(self, partition: int, next_offset: int) -> None: ...


@dataclass
class FetchResult:
    """Records of one partition from `offset` on; `end` is the partition's end when reached
    (None when the read stopped for time or an error, so the caller must not skip ahead)."""

    records: list[Message]
    end: int | None
    error: str | None = None


@dataclass
class _FetchRequest:
    topic: str
    partition: int
    offset: int
    limit: int
    deferred: Deferred[FetchResult]


@dataclass
class ClientSettings:
    """What the binding's options say about reaching the cluster."""

    servers: tuple[str, ...]
    sasl: Mapping[str, str] | None = None
    #: librdkafka properties (options.properties), e.g. `fetch.wait.max.ms`.
    properties: Mapping[str, Any] = field(default_factory=dict)
    metadata_interval: float = 5.0

    def consumer_config(self, group: str) -> dict[str, Any]:
        conf: dict[str, Any] = {
            "bootstrap.servers": ",".join(self.servers),
            "group.id": group,  # librdkafka wants one; we only assign, never join a group
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 100,
            "fetch.queue.backoff.ms": 5,
            "queued.max.messages.kbytes": 16384,
            "reconnect.backoff.max.ms": 2000,
            "socket.keepalive.enable": True,
            "log_level": 3,
        }
        if self.sasl:
            conf.update({
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": self.sasl["mechanism"].upper(),
                "sasl.username": self.sasl["username"],
                "sasl.password": self.sasl["password"],
            })
        conf.update(self.properties)
        return conf


def _close(consumer: Any) -> None:
    """Close a consumer on its own thread; one that never connected may complain."""
    try:
        consumer.close()
    except (KafkaException, RuntimeError) as e:
        _log.debug("closing consumer: {e}", e=e)


class KafkaClient(Service):
    """Runtime object of a `kafka` binding of kind `client`."""

    def __init__(self, reactor: Any, settings: ClientSettings, binding: str,
                 emit: Callable[[str, str], object]) -> None:
        self.reactor = reactor
        self.settings = settings
        self.binding = binding
        self._emit = emit
        #: One tail consumer per cache_server (SPEC §8: one consumer per cache_server topic set).
        self.tails: dict[str, TailConsumer] = {}
        self.history = HistoryFetcher(self)

    # called on any thread: events are printed from the reactor thread only
    def event(self, name: str, detail: str = "-") -> None:
        if threading.current_thread() is threading.main_thread():
            self._emit(name, detail)
        else:
            self.reactor.callFromThread(self._emit, name, detail)

    def consume(self, owner: str, topic: str, sink: TopicSink, from_end: bool = False) -> None:
        """Feed `topic` to `sink` from now on (from its beginning, or its end when `from_end`),
        on the tail consumer of `owner` (a cache_server)."""
        tail = self.tails.get(owner)
        if tail is None:
            tail = self.tails[owner] = TailConsumer(self, owner)
            if self.running:
                tail.start()
        tail.add(topic, sink, from_end)

    def fetch(self, topic: str, partition: int, offset: int, limit: int) -> Deferred[FetchResult]:
        """Read up to `limit` records of a partition from `offset` (history older than the cache)."""
        d: Deferred[FetchResult] = Deferred()
        self.history.requests.put(_FetchRequest(topic, partition, offset, limit, d))
        self.history.start()
        return d

    def startService(self) -> None:
        super().startService()
        for tail in self.tails.values():
            tail.start()

    def stopService(self) -> Deferred[None]:
        super().stopService()
        all_threads: list[_KafkaThread] = [*self.tails.values(), self.history]
        threads = [t for t in all_threads if t.is_alive()]
        for t in all_threads:
            t.stop()
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


class _KafkaThread(threading.Thread):
    def __init__(self, client: KafkaClient, role: str) -> None:
        super().__init__(name=f"ssekd-kafka-{client.binding}-{role}", daemon=True)
        self.client = client
        self.stopping = threading.Event()
        self._started_lock = threading.Lock()

    def start(self) -> None:
        with self._started_lock:
            if not self.is_alive() and not self.stopping.is_set() and self.ident is None:
                super().start()

    def stop(self) -> None:
        self.stopping.set()


class TailConsumer(_KafkaThread):
    """Owns the consumer that keeps every partition in use assigned and feeds the cache."""

    def __init__(self, client: KafkaClient, owner: str) -> None:
        super().__init__(client, owner)
        self.owner = owner
        self._added: queue.Queue[tuple[str, TopicSink, bool]] = queue.Queue()
        # thread-owned state
        self._sinks: dict[str, TopicSink] = {}
        self._from_end: dict[str, bool] = {}
        self._assigned: dict[str, int] = {}  # topic -> partitions assigned
        self._next: dict[tuple[str, int], int] = {}
        self._unknown: set[str] = set()
        self._connected: bool | None = None
        #: (topic, partition) -> high watermark minus next offset, as last measured. The thread
        #: replaces the whole dict (one reference swap), so the reactor reads it without a lock.
        self.lag: dict[tuple[str, int], int] = {}
        self._next_lag = 0.0

    def add(self, topic: str, sink: TopicSink, from_end: bool) -> None:
        self._added.put((topic, sink, from_end))

    def run(self) -> None:
        client = self.client
        conf = client.settings.consumer_config(f"ssekd-{client.binding}-{self.owner}")
        conf["error_cb"] = self._on_error
        consumer = Consumer(conf)
        admin = AdminClient({k: v for k, v in conf.items()
                             if k in ("bootstrap.servers", "security.protocol", "sasl.mechanism",
                                      "sasl.username", "sasl.password")})
        backoff = 0.2
        next_refresh = 0.0
        try:
            while not self.stopping.is_set():
                while True:
                    try:
                        topic, sink, from_end = self._added.get_nowait()
                    except queue.Empty:
                        break
                    if topic not in self._sinks:
                        self._sinks[topic] = sink
                        self._from_end[topic] = from_end
                        next_refresh = 0.0
                if self._sinks and time.monotonic() >= next_refresh:
                    try:
                        self._refresh(consumer, admin)
                        backoff = 0.2
                        next_refresh = time.monotonic() + (
                            0.5 if self._unknown else client.settings.metadata_interval)
                    except KafkaException as e:
                        self._set_connected(False, str(e.args[0] if e.args else e))
                        self.stopping.wait(backoff)
                        backoff = min(backoff * 2, 5.0)
                        continue
                if not self._assigned:
                    self.stopping.wait(0.05)
                    continue
                if time.monotonic() >= self._next_lag:
                    self._next_lag = time.monotonic() + LAG_INTERVAL
                    self.lag = self._measure_lag(consumer)
                first = consumer.poll(0.1)
                if first is None:
                    continue
                records = [first]
                records.extend(consumer.consume(BATCH, 0))
                self._hand_over(records)
        finally:
            _close(consumer)

    def _refresh(self, consumer: Any, admin: Any) -> None:
        meta = consumer.list_topics(timeout=2.0)
        self._set_connected(True, ",".join(self.client.settings.servers))
        new: list[TopicPartition] = []
        for topic, sink in self._sinks.items():
            tmeta = meta.topics.get(topic)
            if tmeta is None or tmeta.error is not None or not tmeta.partitions:
                if topic not in self._unknown:
                    self._unknown.add(topic)
                    self.client.event("BINDING_KAFKA_TOPIC_UNKNOWN", topic)
                continue
            count = len(tmeta.partitions)
            had = self._assigned.get(topic, 0)
            if count == had:
                continue
            if topic in self._unknown:
                self._unknown.discard(topic)
            compacted = self._compacted(admin, topic) if had == 0 else None
            self.client.reactor.callFromThread(sink.on_metadata, count, compacted)
            start = OFFSET_END if (had == 0 and self._from_end[topic]) else OFFSET_BEGINNING
            for p in sorted(tmeta.partitions):
                if p >= had:
                    # partitions added later are read from their beginning: all of them is new
                    new.append(TopicPartition(topic, p, self._next.get((topic, p), start)))
            self._assigned[topic] = count
            self.client.event("BINDING_KAFKA_PARTITIONS_ASSIGNED", f"{topic} {had}->{count}")
        if new:
            consumer.incremental_assign(new)

    def _measure_lag(self, consumer: Any) -> dict[tuple[str, int], int]:
        """Per assigned partition: the high watermark the last fetch brought (librdkafka's
        cached figure; the fetched one is right even on tansu) minus the next offset to hand
        to the cache. Partitions with either figure unknown yet are left out."""
        tps = [TopicPartition(t, p) for t, n in self._assigned.items() for p in range(n)]
        try:
            positions = consumer.position(tps)
        except KafkaException:
            return self.lag
        lag: dict[tuple[str, int], int] = {}
        for tp in positions:
            try:
                _, high = consumer.get_watermark_offsets(tp, cached=True)
            except KafkaException:
                continue
            key = (tp.topic, tp.partition)
            nxt = tp.offset if tp.offset >= 0 else self._next.get(key)
            if high is None or high < 0 or nxt is None:
                continue
            lag[key] = max(0, high - nxt)
        return lag

    def _compacted(self, admin: Any, topic: str) -> bool:
        try:
            futures = admin.describe_configs([ConfigResource("topic", topic)],
                                             request_timeout=2.0)
            for fut in futures.values():
                entries = fut.result(timeout=3.0)
                policy = entries.get("cleanup.policy")
                return policy is not None and "compact" in str(policy.value)
        except Exception as e:  # noqa: BLE001 - an old or minimal broker: a plain topic
            self.client.event("BINDING_KAFKA_CONFIG_UNAVAILABLE", f"{topic}: {e}")
        return False

    def _hand_over(self, records: list[Any]) -> None:
        """Convert a batch and pass it to the reactor, one call per topic (this thread holds the
        GIL the reactor needs while it converts, so the loop is kept to the bare conversion)."""
        by_topic: dict[str, list[Message]] = {}
        ends: list[tuple[str, int, int]] = []
        topic: str | None = None
        msgs: list[Message] = []
        for r in records:
            if r.error() is not None:
                err = r.error()
                if err.code() == KafkaError._PARTITION_EOF:
                    ends.append((r.topic(), r.partition(), r.offset()))
                else:
                    self.client.event("BINDING_KAFKA_FETCH_ERROR", f"{r.topic()}: {err.str()}")
                continue
            if r.topic() != topic:  # records come in runs of one topic partition
                topic = r.topic()
                msgs = by_topic.setdefault(topic, [])
            msgs.append(from_confluent(r))
        reactor = self.client.reactor
        for topic, msgs in by_topic.items():
            # a partition's records are in offset order: the last one of each sets its next
            for p, last in {m.partition: m.offset for m in msgs}.items():
                self._next[(topic, p)] = last + 1
            reactor.callFromThread(self._sinks[topic].on_records, msgs)
        for topic, p, off in ends:
            reactor.callFromThread(self._sinks[topic].on_end, p, off)

    def _on_error(self, err: Any) -> None:
        code = err.code()
        if code in (KafkaError._ALL_BROKERS_DOWN, KafkaError._TRANSPORT,
                    KafkaError._RESOLVE):
            if code == KafkaError._ALL_BROKERS_DOWN or self._connected:
                self._set_connected(False, err.str())
        else:
            self.client.event("BINDING_KAFKA_ERROR", err.str())

    def _set_connected(self, up: bool, detail: str) -> None:
        if up != self._connected:
            self._connected = up
            self.client.event("BINDING_KAFKA_BROKER_CONNECTED" if up
                              else "BINDING_KAFKA_BROKER_UNAVAILABLE", detail)


class HistoryFetcher(_KafkaThread):
    """Owns the consumer that reads offsets older than the cache, one request at a time.

    Consecutive requests that continue where the last one stopped keep the assignment, so
    librdkafka's prefetch carries a long catch-up along without a seek per request.
    """

    #: Longest a request waits for records before answering with what it has (end=None).
    WAIT = 2.0

    def __init__(self, client: KafkaClient) -> None:
        super().__init__(client, "history")
        self.requests: queue.Queue[_FetchRequest | None] = queue.Queue()

    def stop(self) -> None:
        super().stop()
        self.requests.put(None)

    def run(self) -> None:
        client = self.client
        conf = client.settings.consumer_config(f"ssekd-{client.binding}-history")
        consumer = Consumer(conf)
        current: tuple[str, int, int] | None = None  # topic, partition, next offset
        try:
            while not self.stopping.is_set():
                req = self.requests.get()
                if req is None:
                    break
                try:
                    result, current = self._serve(consumer, req, current)
                except Exception as e:  # noqa: BLE001 - one failed read must not end the thread
                    result, current = FetchResult([], None, str(e)), None
                client.reactor.callFromThread(req.deferred.callback, result)
        finally:
            _close(consumer)

    def _serve(self, consumer: Any, req: _FetchRequest,
               current: tuple[str, int, int] | None
               ) -> tuple[FetchResult, tuple[str, int, int] | None]:
        if current != (req.topic, req.partition, req.offset):
            consumer.assign([TopicPartition(req.topic, req.partition, req.offset)])
        got: list[Message] = []
        end: int | None = None
        error: str | None = None
        deadline = time.monotonic() + self.WAIT
        while len(got) < req.limit and time.monotonic() < deadline:
            if self.stopping.is_set():
                break
            r = consumer.poll(0.05)
            if r is None:
                continue
            batch = [r, *consumer.consume(req.limit - len(got), 0)]
            for rec in batch:
                e = rec.error()
                if e is not None:
                    if e.code() == KafkaError._PARTITION_EOF:
                        end = rec.offset()
                    else:
                        error = e.str()
                    continue
                if (rec.partition() == req.partition and rec.topic() == req.topic
                        and rec.offset() >= req.offset):
                    got.append(from_confluent(rec))
            if end is not None or error is not None:
                break
        if end is not None or error is not None or not got:
            # after an end-of-partition (or nothing) librdkafka will not say "end" again for
            # this assignment: seek afresh next time
            return FetchResult(got, end, error), None
        return FetchResult(got, None), (req.topic, req.partition, got[-1].offset + 1)
