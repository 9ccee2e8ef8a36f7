"""The write side of a kafka client: records produced for the http-kafka binding.

librdkafka's `Producer.produce` only puts a record on the producer's queue (it never waits on
the network), so it is called on the reactor thread; the delivery report - the broker's
acknowledgement, or why the record was not written - comes back through `poll`, which a thread
of its own calls, and each report reaches the reactor with one `callFromThread`. A request is
answered from that report: never before the broker acknowledged the write.

One producer per acks mode, made the first time a record asks for it: `in_sync_replicas` (the
default) is librdkafka's idempotent producer (`acks=all`, `enable.idempotence`: a record the
producer retries after a lost acknowledgement is not written twice); `leader_only` (`acks=1`) and
`none` (`acks=0`) cannot be idempotent. They share the client's servers and its security
settings (TLS, SASL), so they reach the cluster the consumers reach.

A record goes to the producer only for a topic the cluster has (`topic_directory`): the producers
never ask a broker to create a topic (`allow.auto.create.topics` is off whatever the config
says), and a record for a topic the cluster lacks fails at once as `unknown_topic` instead of
waiting for `message.timeout.ms`.

What a write may cost is bounded: the bytes of records produced and not yet reported
(`max-inflight-bytes`). A record that would pass the bound, or one produced while the producer
knows no broker is reachable, is refused before it is queued (`WriteRefused`: the request gets
`503` with `Retry-After`), so a write is never accepted and then lost. While no broker is
reachable, the poll thread asks for metadata once a second and says so when one answers.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer
from twisted.internet.defer import Deferred, fail
from twisted.logger import Logger
from twisted.python.failure import Failure

from ssekd.bindings.kafka.topic_directory import LookupUnavailable, TopicDirectory

_log = Logger()

#: Zilla's acks names -> librdkafka's `acks`.
ACKS: Mapping[str, str] = {"none": "0", "leader_only": "1", "in_sync_replicas": "all"}
DEFAULT_ACKS = "in_sync_replicas"
#: Bytes of records produced and not yet acknowledged, unless the client's options say otherwise.
DEFAULT_MAX_INFLIGHT_BYTES = 16 * 1024 * 1024
#: Seconds a refused writer is told to wait: the bound is full (acknowledgements free it fast)...
RETRY_AFTER_FULL = 1.0
#: ... or no broker is reachable (it takes a while to come back).
RETRY_AFTER_DOWN = 5.0
#: Seconds between metadata requests while no broker is reachable.
PROBE_INTERVAL = 1.0
#: Producer settings of ours, before the client's `producer-properties`.
PRODUCER_DEFAULTS: Mapping[str, Any] = {
    # a request waits for its record: batch only what arrives within a millisecond
    "linger.ms": 1,
    # the partition of a key as Java clients (Kafka Streams services) pick it
    "partitioner": "murmur2_random",
    "socket.keepalive.enable": True,
    # a write waits while no broker answers: look for one again within two seconds
    "reconnect.backoff.max.ms": 2000,
}
#: Set after the client's `producer-properties`: the write path never creates a topic.
PRODUCER_FIXED: Mapping[str, Any] = {"allow.auto.create.topics": False}
#: Seconds a topic's lookup waits for the cluster's answer.
LOOKUP_TIMEOUT = 5.0


@dataclass(frozen=True)
class Record:
    """One record to write."""

    topic: str
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...] = ()

    @property
    def size(self) -> int:
        """What the record costs the in-flight bound."""
        return (len(self.key or b"") + len(self.value or b"")
                + sum(len(n) + len(v) for n, v in self.headers))


@dataclass(frozen=True)
class Delivered:
    """Where the broker wrote a record (offset -1 with `acks: none`: it does not say)."""

    partition: int
    offset: int


class WriteRefused(Exception):
    """Not queued (nothing was sent): the writer may try again after `retry_after` seconds."""

    def __init__(self, reason: str, retry_after: float) -> None:
        super().__init__(reason)
        self.retry_after = retry_after


class WriteFailed(Exception):
    """librdkafka gave the record up: `retriable` when trying again later may work (the broker
    was unreachable until the record timed out), `too_large` when the record itself is over a
    size limit, `unknown_topic` when the cluster has no such topic."""

    def __init__(self, reason: str, retriable: bool = False, too_large: bool = False,
                 unknown_topic: bool = False) -> None:
        super().__init__(reason)
        self.retriable = retriable
        self.too_large = too_large
        self.unknown_topic = unknown_topic


def write_failed(error: KafkaError) -> WriteFailed:
    code = error.code()
    return WriteFailed(
        error.str(),
        retriable=bool(error.retriable()) or code in (
            KafkaError._MSG_TIMED_OUT, KafkaError._TIMED_OUT_QUEUE, KafkaError._TRANSPORT,
            KafkaError._ALL_BROKERS_DOWN, KafkaError.REQUEST_TIMED_OUT,
            KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT),
        too_large=code in (KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.RECORD_LIST_TOO_LARGE),
        unknown_topic=code in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC))


class Writes:
    """The producers of one kafka client and the thread that polls them.

    `produce` runs on the reactor thread and so does every piece of state it reads or changes
    (`inflight`, `reachable`); the poll thread touches only the producers and hands reports
    back with `callFromThread`."""

    def __init__(self, reactor: Any, config: Callable[[str], dict[str, Any]], binding: str,
                 event: Callable[[str, str], None],
                 max_inflight_bytes: int = DEFAULT_MAX_INFLIGHT_BYTES) -> None:
        self.reactor = reactor
        #: acks name -> the librdkafka config of its producer (`ClientSettings.producer_config`)
        self.config = config
        self.binding = binding
        self.event = event
        self.max_inflight_bytes = max_inflight_bytes
        #: Bytes of records produced and not yet reported.
        self.inflight = 0
        #: Records produced and not yet reported.
        self.pending = 0
        #: Whether a broker answers: False after librdkafka said all are down, until one does.
        self.reachable = True
        self._producers: dict[str, Any] = {}
        #: (acks, topic) whose metadata the poll thread is to ask for (`warm`)
        self._warming: queue.SimpleQueue[tuple[str, str]] = queue.SimpleQueue()
        self._thread: _PollThread | None = None
        self._running = False
        #: Which topics the cluster has: a record waits for its topic's answer.
        self.topics = TopicDirectory(reactor, self._lookup, binding)

    # -- reactor thread ------------------------------------------------------------------------

    def produce(self, record: Record, acks: str = DEFAULT_ACKS) -> Deferred[Delivered]:
        """Queue `record`; the Deferred fires once the broker acknowledged it (`Delivered`) or
        librdkafka gave it up (`WriteFailed`; `unknown_topic` for a topic the cluster does not
        have, without waiting for librdkafka's timeout). Fails with `WriteRefused` when it is
        not queued: no broker reachable, the cluster could not say whether it has the topic,
        the in-flight bound full, or the service not running."""
        if not self._running:
            return fail(WriteRefused("the kafka client is not running", RETRY_AFTER_DOWN))
        if not self.reachable:
            return fail(WriteRefused("no Kafka broker is reachable", RETRY_AFTER_DOWN))
        try:
            self._producer(acks)
        except KafkaException as e:
            error = e.args[0] if e.args and isinstance(e.args[0], KafkaError) else None
            return fail(write_failed(error) if error is not None else WriteFailed(str(e)))

        known = self.topics.known(record.topic)
        if known is not None:  # answered now: queued (or refused) before this returns
            return self._queue(record, acks) if known else fail(self._missing(record.topic))
        out: Deferred[Delivered] = Deferred()

        def present(found: bool) -> None:
            queued = self._queue(record, acks) if found else fail(self._missing(record.topic))
            queued.chainDeferred(out)

        def unknown(failure: Failure) -> None:
            failure.trap(LookupUnavailable)
            out.errback(WriteRefused(str(failure.value), RETRY_AFTER_DOWN))

        self.topics.exists(record.topic).addCallbacks(present, unknown).addErrback(out.errback)
        return out

    @staticmethod
    def _missing(topic: str) -> WriteFailed:
        return WriteFailed(f"the cluster has no topic {topic}", unknown_topic=True)

    def _queue(self, record: Record, acks: str) -> Deferred[Delivered]:
        """Hand `record` to librdkafka, within the in-flight bound."""
        if not self._running:
            return fail(WriteRefused("the kafka client is not running", RETRY_AFTER_DOWN))
        size = record.size
        if self.inflight and self.inflight + size > self.max_inflight_bytes:
            return fail(WriteRefused(f"{self.inflight} bytes already wait for the broker "
                                     f"(max-inflight-bytes {self.max_inflight_bytes})",
                                     RETRY_AFTER_FULL))
        d: Deferred[Delivered] = Deferred()
        reactor = self.reactor
        topic = record.topic

        def reported(error: KafkaError | None, message: Any) -> None:  # poll thread
            if error is None:
                reactor.callFromThread(self._delivered, d, size,
                                       Delivered(message.partition(), message.offset()))
            else:
                reactor.callFromThread(self._failed, d, size, write_failed(error), topic)

        try:
            producer = self._producer(acks)
            producer.produce(record.topic, value=record.value, key=record.key,
                             headers=list(record.headers), on_delivery=reported)
        except BufferError:
            return fail(WriteRefused("the producer's queue is full", RETRY_AFTER_FULL))
        except KafkaException as e:
            error = e.args[0] if e.args and isinstance(e.args[0], KafkaError) else None
            return fail(write_failed(error) if error is not None else WriteFailed(str(e)))
        self.inflight += size
        self.pending += 1
        return d

    def warm(self, acks: str, topics: Sequence[str] = ()) -> None:
        """Make the producer for `acks` now, so that it has connected (and, idempotent, got its
        producer id) before the first write waits on it; the poll thread asks for the metadata
        of `topics`, which the first record of a topic would otherwise wait for."""
        self._producer(acks)
        for topic in topics:
            self._warming.put((acks, topic))

    def _producer(self, acks: str) -> Any:
        producer = self._producers.get(acks)
        if producer is None:
            conf = self.config(acks)
            conf["error_cb"] = self._on_error
            producer = self._producers[acks] = Producer(conf)
        return producer

    def _delivered(self, d: Deferred[Delivered], size: int, where: Delivered) -> None:
        self.inflight -= size
        self.pending -= 1
        self._reached(True, "a record was acknowledged")
        d.callback(where)

    def _failed(self, d: Deferred[Delivered], size: int, why: WriteFailed, topic: str) -> None:
        self.inflight -= size
        self.pending -= 1
        if why.unknown_topic:
            self.topics.found(topic, False)
        self.event("BINDING_KAFKA_PRODUCE_FAILED", str(why))
        d.errback(why)

    def _reached(self, up: bool, detail: str) -> None:
        if up != self.reachable:
            self.reachable = up
            self.event("BINDING_KAFKA_PRODUCER_CONNECTED" if up
                       else "BINDING_KAFKA_PRODUCER_UNAVAILABLE", detail)

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        self._running = True
        self.topics.start()
        if self._thread is None:
            self._thread = _PollThread(self)
            self._thread.start()

    def stop(self) -> list[threading.Thread]:
        """Stop taking records; the poll thread sends what is queued (for a few seconds) and
        ends, and so does the topic lookup thread. Returns them, for the caller to join off the
        reactor thread."""
        self._running = False
        threads = [t for t in (self.topics.stop(),) if t is not None]
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.stopping.set()
            threads.append(thread)
        return threads

    # -- any thread ----------------------------------------------------------------------------

    def _on_error(self, err: KafkaError) -> None:
        """librdkafka's error callback, called from `poll` on the poll thread."""
        code = err.code()
        if code == KafkaError._ALL_BROKERS_DOWN:
            self.reactor.callFromThread(self._reached, False, err.str())
        elif code not in (KafkaError._TRANSPORT, KafkaError._RESOLVE):
            self.reactor.callFromThread(self.event, "BINDING_KAFKA_ERROR", err.str())

    def producers(self) -> list[Any]:
        return list(self._producers.values())

    def _lookup(self, topic: str) -> bool:
        """Whether the cluster has `topic`, asked with a metadata request for it alone (on the
        directory's thread). The producers' `allow.auto.create.topics` is off: asking never
        creates it. A topic this client may not see counts as missing."""
        producers = self.producers()
        if not producers:
            raise KafkaException(KafkaError(KafkaError._STATE, "no producer yet"))
        found = producers[0].list_topics(topic, timeout=LOOKUP_TIMEOUT).topics.get(topic)
        if found is None:
            return False
        if found.error is None:
            return bool(found.partitions)
        if found.error.code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC,
                                  KafkaError.TOPIC_AUTHORIZATION_FAILED):
            return False
        raise KafkaException(found.error)


class _PollThread(threading.Thread):
    """Calls `poll` on every producer (delivery reports and errors come from there), and, while
    no broker is reachable, asks for metadata to notice when one is again."""

    FLUSH_AT_STOP = 5.0

    def __init__(self, writes: Writes) -> None:
        super().__init__(name=f"ssekd-kafka-{writes.binding}-producer", daemon=True)
        self.writes = writes
        self.stopping = threading.Event()

    def run(self) -> None:
        writes = self.writes
        probed = 0.0
        while not self.stopping.is_set():
            self._warm()
            producers = writes.producers()
            if not producers:
                self.stopping.wait(0.05)
                continue
            if len(producers) == 1:
                producers[0].poll(0.1)
            else:
                for p in producers:
                    p.poll(0.02)
            if not writes.reachable and self._due(probed):
                probed = _now()
                try:
                    producers[0].list_topics(timeout=PROBE_INTERVAL)
                except KafkaException:
                    continue
                writes.reactor.callFromThread(writes._reached, True, "metadata answered")
        for p in writes.producers():
            try:
                left = p.flush(self.FLUSH_AT_STOP)
            except (KafkaException, RuntimeError) as e:
                _log.debug("flushing producer: {e}", e=e)
                continue
            if left:
                _log.warn("{left} records still unsent at stop", left=left)
        writes._producers.clear()  # destroyed here, off the reactor thread

    def _warm(self) -> None:
        warming = self.writes._warming
        while not warming.empty():
            acks, topic = warming.get()
            producer = self.writes._producers.get(acks)
            if producer is None:
                continue
            try:
                producer.list_topics(topic, timeout=5.0)
            except KafkaException as e:
                _log.debug("metadata of {topic}: {e}", topic=topic, e=e)

    @staticmethod
    def _due(probed: float) -> bool:
        return _now() - probed >= PROBE_INTERVAL


def _now() -> float:
    return time.monotonic()
