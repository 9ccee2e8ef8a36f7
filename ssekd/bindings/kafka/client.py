"""kafka client: the only code that talks to the Kafka cluster.

librdkafka objects are not safe to share between threads, and their calls block, so each client
binding owns two threads, each owning one `confluent_kafka.Consumer` from creation to close:

- the *tail* consumer (`TailConsumer`) is assigned every partition of every topic in use and
  feeds the cache; it tracks each partition's next offset from fetched data (tansu's
  `get_watermark_offsets` is wrong, real Kafka's is racy anyway) and re-reads metadata now and
  then to notice new partitions and topics that did not exist yet (backing off, and giving up,
  for topics that stay missing: `missing_topics`); a topic the cache stops following is
  unassigned;
- the *history* consumer (`HistoryFetcher`) serves one-off reads of offsets older than the cache,
  each bounded in bytes; at most `max_history_reads` wait for it at once, and a stream that finds
  them all taken is told `HistoryBusy` and asks again a little later (it waits without a queue
  that could grow with the number of streams).

Batches cross to the reactor through one `_Inbox` per topic: the thread appends what it
fetched and schedules one `reactor.callFromThread` only when none is pending, so whatever arrives
while the reactor is busy (writing the previous batch to a thousand streams) reaches it as one
batch - encoded once, one write per stream - and a reactor with nothing to do gets each batch at
once. The reactor thread never waits on Kafka; the tail thread waits for the reactor only when
an inbox holds `MAX_PENDING` records already (a topic read from its beginning faster than the
reactor can take it). When the broker is down at start or goes away, the threads retry with
back-off and say so in events, once per change; the tail consumer resumes each partition at the
next offset it had not handed over.

librdkafka's own log goes through the binding's events (`LibrdkafkaLog`), not to stderr: a
failed connection is the broker's state, said once by `BINDING_KAFKA_BROKER_UNAVAILABLE` and
once by `BINDING_KAFKA_BROKER_CONNECTED` (with how many attempts failed meanwhile), and any other
line is one `BINDING_KAFKA_LOG` event, its repeats counted. While every broker is down,
librdkafka itself tries again every `reconnect.backoff.ms / 2` for as long as a consumer exists
(metadata and coordinator requests start each try over, whatever its back-off says), so the
tail consumer closes its consumer and makes a new one after a rest that doubles from
`reconnect.backoff.ms` up to `reconnect.backoff.max.ms`; the history consumer closes once idle.
"""

from __future__ import annotations

import queue
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka import Message as KafkaRecord
from confluent_kafka.admin import AdminClient, ConfigResource  # type: ignore[attr-defined]
from twisted.application.service import Service
from twisted.internet.defer import Deferred, fail
from twisted.logger import Logger

from ssekd.bindings.kafka.message import Message, from_confluent, from_confluent_batch
from ssekd.bindings.kafka.missing_topics import MissingTopics
from ssekd.bindings.kafka.producer import (
    ACKS,
    DEFAULT_MAX_INFLIGHT_BYTES,
    PRODUCER_DEFAULTS,
    Delivered,
    Record,
    Writes,
)
from ssekd.telemetry.delivery import Deliveries
from ssekd.telemetry.metrics import Reading

_log = Logger()

#: Records taken from librdkafka per `consume` call (one batch handed to the reactor).
BATCH = 1000
#: Records an inbox holds at most before the tail thread waits for the reactor to take them.
MAX_PENDING = 20 * BATCH
#: Seconds between measurements of the consumer lag (local calls only: no broker round trip).
LAG_INTERVAL = 1.0
#: History reads queued or running at once, unless the client's options say otherwise.
DEFAULT_MAX_HISTORY_READS = 64
#: librdkafka log levels (syslog: 3 error, 4 warning) that reach the event log; `properties`
#: may ask for more (`log_level: 7` with `debug: broker`).
LOG_LEVEL = 4
#: Reconnect back-off defaults (ms), unless `properties` set them: librdkafka's own maximum, and
#: a start that keeps its retries, while every broker is down, to about four a second.
RECONNECT_BACKOFF = 500
RECONNECT_BACKOFF_MAX = 10_000
#: Seconds a history consumer stays open without a request (it holds a connection).
HISTORY_IDLE = 30.0


class LibrdkafkaLog:
    """The `logger` of a librdkafka client: its log lines become the binding's events.

    confluent-kafka calls `log(level, "%s [%s] %s", facility, client name, message)` from the
    thread that polls the client. Connection failures (facility `FAIL`) are not said: the
    consumer's state events say them once per change, with the last one's text. Any other line
    is said once as `BINDING_KAFKA_LOG`; the same line again within `REPEAT_WINDOW` seconds is
    counted, and the count said with its next showing.
    """

    REPEAT_WINDOW = 60.0

    def __init__(self, event: Callable[[str, str], None],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.event = event
        self.clock = clock
        #: The text of the last connection failure librdkafka reported.
        self.last_failure: str | None = None
        self._said: dict[str, tuple[float, int]] = {}

    def log(self, level: int, fmt: str, *args: Any) -> None:
        facility = str(args[0]) if len(args) == 3 else "LOG"
        try:
            message = str(args[2]) if len(args) == 3 else fmt % args
        except (TypeError, ValueError):
            message = fmt
        if facility == "FAIL":
            self.last_failure = message
            return
        self.say("BINDING_KAFKA_LOG", f"{facility}: {message}")

    def say(self, name: str, detail: str) -> None:
        """Emit `name` with `detail` unless the same was said within the window."""
        now = self.clock()
        key = f"{name} {detail}"
        said = self._said.get(key)
        if said is not None and now - said[0] < self.REPEAT_WINDOW:
            self._said[key] = (said[0], said[1] + 1)
            return
        if len(self._said) > 1000:  # a line that varies each time: forget the oldest
            self._said.clear()
        repeats = said[1] if said is not None else 0
        self._said[key] = (now, 0)
        self.event(name, detail + (f" ({repeats} repeat(s) in the last minute not shown)"
                                   if repeats else ""))


class HistoryBusy(Exception):
    """Every history read slot is taken: the stream asks again later, nothing was queued."""


class TopicSink(Protocol):
    """Where the tail consumer delivers one topic's data (the cache's `TopicCache`)."""

    def on_metadata(self, partitions: int, compacted: bool | None) -> None: ...

    def on_records(self, records: list[Message]) -> None: ...

    def on_end(self, partition: int, next_offset: int) -> None: ...

    def on_rewind(self, partition: int, origin: int) -> None:
        """The broker lost the partition: it is read again from `origin` (records follow)."""

    def on_missing(self) -> None:
        """The topic was looked for too often without being found: it is no longer consumed."""


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
    max_bytes: int
    deferred: Deferred[FetchResult]


@dataclass
class ClientSettings:
    """What the binding's options say about reaching the cluster."""

    servers: tuple[str, ...]
    sasl: Mapping[str, str] | None = None
    #: librdkafka properties (options.properties), e.g. `fetch.wait.max.ms`.
    properties: Mapping[str, Any] = field(default_factory=dict)
    metadata_interval: float = 5.0
    max_history_reads: int = DEFAULT_MAX_HISTORY_READS
    #: librdkafka producer properties (options.producer-properties), e.g. `linger.ms`.
    producer_properties: Mapping[str, Any] = field(default_factory=dict)
    #: Bytes of produced records not yet acknowledged, at most (options.max-inflight-bytes).
    max_inflight_bytes: int = DEFAULT_MAX_INFLIGHT_BYTES

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
            "reconnect.backoff.ms": RECONNECT_BACKOFF,
            "reconnect.backoff.max.ms": RECONNECT_BACKOFF_MAX,
            "socket.keepalive.enable": True,
            "log_level": LOG_LEVEL,
        }
        if self.sasl:
            conf.update({
                "sasl.mechanism": self.sasl["mechanism"].upper(),
                "sasl.username": self.sasl["username"],
                "sasl.password": self.sasl["password"],
            })
        conf.update(self.properties)
        if "reconnect.backoff.ms" not in self.properties:  # librdkafka wants start <= maximum
            conf["reconnect.backoff.ms"] = min(int(conf["reconnect.backoff.ms"]),
                                               int(conf["reconnect.backoff.max.ms"]))
        protocol = self.security_protocol()
        if protocol is not None:
            conf["security.protocol"] = protocol
        return conf

    def security_protocol(self) -> str | None:
        """librdkafka's `security.protocol`, or None for its default (plaintext).

        `properties` say whether the cluster speaks TLS: an explicit `security.protocol`, or any
        `ssl.*` key (a CA, a client certificate), which librdkafka would otherwise silently
        ignore over plaintext. A `sasl` block adds SASL on top of that: `SASL_SSL` over TLS,
        `SASL_PLAINTEXT` otherwise - never plaintext credentials to a TLS-only cluster."""
        explicit = self.properties.get("security.protocol")
        if explicit is not None:
            tls = str(explicit).lower() in ("ssl", "sasl_ssl")
        else:
            tls = any(str(k).startswith("ssl.") for k in self.properties)
        if self.sasl:
            return "SASL_SSL" if tls else "SASL_PLAINTEXT"
        if explicit is not None:
            return str(explicit)
        return "SSL" if tls else None

    def producer_config(self, acks: str) -> dict[str, Any]:
        """The conf of the producer for `acks` (a Zilla acks name): the consumer's servers and
        security settings, our defaults, idempotence where the acks allow it, then
        `producer-properties`."""
        conf = self.admin_config(self.consumer_config("ssekd-producer"))
        conf.update(PRODUCER_DEFAULTS)
        conf["acks"] = ACKS[acks]
        conf["enable.idempotence"] = ACKS[acks] == "all"
        conf.update(self.producer_properties)
        return conf

    def admin_config(self, consumer: Mapping[str, Any]) -> dict[str, Any]:
        """The admin client's conf from the consumer's: the same servers, every security
        setting (`security.*`, `ssl.*`, `sasl.*`), so it reaches a TLS or SASL cluster too, and
        the same log."""
        return {k: v for k, v in consumer.items()
                if k in ("bootstrap.servers", "logger", "log_level")
                or k.startswith(("security.", "ssl.", "sasl."))}

    def backoff(self, conf: Mapping[str, Any]) -> tuple[float, float]:
        """(first, longest) rest in seconds between consumers while every broker is down."""
        longest = float(conf.get("reconnect.backoff.max.ms", RECONNECT_BACKOFF_MAX)) / 1000
        first = float(conf.get("reconnect.backoff.ms", RECONNECT_BACKOFF)) / 1000
        return max(0.01, min(first, longest)), max(0.01, longest)


def refused_property(settings: ClientSettings) -> tuple[str | None, str] | None:
    """Why librdkafka refuses the consumer config these settings make, if it does: the property
    its message names (when it is one of `properties`) and the message, values hidden.

    librdkafka checks properties only when a client is made with them; the consumer thread
    would then die at start. A consumer made here without servers (it connects to nothing)
    lets a bad property stop the daemon before it listens, as any config error does.
    """
    conf = settings.consumer_config("ssekd-check")
    conf.pop("bootstrap.servers", None)
    conf["log_level"] = 0
    try:
        consumer = Consumer(conf)
    except (KafkaException, ValueError, TypeError) as e:
        reason = str(e.args[0].str() if e.args and isinstance(e.args[0], KafkaError) else e)
        secrets = [*settings.properties.values(), *(settings.sasl or {}).values()]
        for value in {str(v) for v in secrets if len(str(v)) >= 3}:
            reason = reason.replace(value, "…")
        named = [k for k in settings.properties
                 if re.search(rf"(?<![\w.]){re.escape(k)}(?![\w.])", reason)]
        return (named[0] if named else None), reason
    _close(consumer)
    return None


def refused_producer_property(settings: ClientSettings) -> tuple[str | None, str] | None:
    """`refused_property` for the producer's config (`producer-properties`): a producer made
    without servers checks them before the daemon listens."""
    for acks in ACKS:
        conf = settings.producer_config(acks)
        conf.pop("bootstrap.servers", None)
        conf["log_level"] = 0
        try:
            producer = Producer(conf)
        except (KafkaException, ValueError, TypeError) as e:
            reason = str(e.args[0].str() if e.args and isinstance(e.args[0], KafkaError) else e)
            secrets = [*settings.producer_properties.values(), *settings.properties.values(),
                       *(settings.sasl or {}).values()]
            for value in {str(v) for v in secrets if len(str(v)) >= 3}:
                reason = reason.replace(value, "…")
            named = [k for k in settings.producer_properties
                     if re.search(rf"(?<![\w.]){re.escape(k)}(?![\w.])", reason)]
            return (named[0] if named else None), reason
        del producer
    return None


def _close(consumer: Any) -> None:
    """Close a consumer on its own thread; one that never connected may complain."""
    try:
        consumer.close()
    except (KafkaException, RuntimeError) as e:
        _log.debug("closing consumer: {e}", e=e)


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

    def consume(self, owner: str, topic: str, sink: TopicSink, from_end: bool = False,
                give_up_after: int | None = None) -> None:
        """Feed `topic` to `sink` from now on (from its beginning, or its end when `from_end`),
        on the tail consumer of `owner` (a cache_server). A topic the cluster lacks is looked
        for `give_up_after` times (None: for ever) before `sink.on_missing`."""
        tail = self.tails.get(owner)
        if tail is None:
            tail = self.tails[owner] = TailConsumer(self, owner)
            if self.running:
                tail.start()
        follow = _Follow(sink, from_end, give_up_after)
        follow.inbox.deliveries = self.deliveries
        tail.changes.put((topic, follow))

    def figures(self) -> Iterable[Reading]:
        """`kafka.client.connected`: 1 while every consumer that has tried reaches a broker."""
        tails = list(self.tails.values())
        if tails:
            up = all(t.connected is True for t in tails)
            yield "kafka.client.connected", {}, 1.0 if up else 0.0

    def unconsume(self, owner: str, topic: str) -> None:
        """Stop consuming `topic` for `owner`: its partitions are unassigned."""
        tail = self.tails.get(owner)
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
        self.history.requests.put(_FetchRequest(topic, partition, offset, limit, max_bytes, d))
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
        all_threads: list[_KafkaThread] = [*self.tails.values(), self.history]
        threads: list[threading.Thread] = [t for t in all_threads if t.is_alive()]
        for t in all_threads:
            t.stop()
        poller = self.writes.stop()
        if poller is not None and poller.is_alive():
            threads.append(poller)
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


class _Inbox:
    """What the tail thread handed over for one topic and the reactor has not taken yet: the
    sink's calls in order, records of consecutive batches merged into one `on_records`."""

    __slots__ = ("_merging", "calls", "changed", "deliveries", "records", "scheduled", "sink")

    def __init__(self, sink: TopicSink) -> None:
        self.sink = sink
        #: Told of each batch of records as the sink delivers it (`sse.delivery.latency`).
        self.deliveries: Deliveries | None = None
        self.changed = threading.Condition()
        #: (sink method, args) in the order the thread made them
        self.calls: list[tuple[Callable[..., None], tuple[Any, ...]]] = []
        self.records = 0
        self.scheduled = False
        #: the records list of the last queued `on_records` call, which later batches join
        self._merging: list[Message] = []

    def put(self, reactor: Any, method: Callable[..., None], *args: Any) -> None:
        """Queue a call of the sink (tail thread)."""
        with self.changed:
            self.calls.append((method, args))
            self._schedule(reactor)

    def put_records(self, reactor: Any, records: list[Message]) -> None:
        """Queue `on_records`, merged into the last call when that is `on_records` too."""
        with self.changed:
            calls = self.calls
            if calls and calls[-1][1] and calls[-1][1][0] is self._merging:
                self._merging.extend(records)
            else:
                self._merging = records
                calls.append((self.sink.on_records, (self._merging,)))
            self.records += len(records)
            self._schedule(reactor)

    def _schedule(self, reactor: Any) -> None:
        if not self.scheduled:
            self.scheduled = True
            reactor.callFromThread(self.take)

    def wait_room(self, stopping: threading.Event) -> None:
        """Wait (tail thread) while the reactor has `MAX_PENDING` records still to take."""
        with self.changed:
            while self.records >= MAX_PENDING and not stopping.is_set():
                self.changed.wait(0.1)

    def take(self) -> None:
        """Make every queued call (reactor thread)."""
        with self.changed:
            calls, self.calls = self.calls, []
            self.records = 0
            self.scheduled = False
            self.changed.notify_all()
        deliveries = self.deliveries
        records = self.sink.on_records if deliveries is not None else None
        for method, args in calls:
            if deliveries is not None and method == records:
                deliveries.begin(args[0])
                try:
                    method(*args)
                finally:
                    deliveries.end()
            else:
                method(*args)


@dataclass(frozen=True)
class _Follow:
    """How the tail consumer follows one topic."""

    sink: TopicSink
    from_end: bool
    give_up_after: int | None
    inbox: _Inbox = field(init=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "inbox", _Inbox(self.sink))


class TailConsumer(_KafkaThread):
    """Owns the consumer that keeps every partition in use assigned and feeds the cache."""

    def __init__(self, client: KafkaClient, owner: str) -> None:
        super().__init__(client, owner)
        self.owner = owner
        #: (topic, how to follow it), or (topic, None) to stop: applied in order by the thread.
        self.changes: queue.Queue[tuple[str, _Follow | None]] = queue.Queue()
        # thread-owned state
        self._follows: dict[str, _Follow] = {}
        self._assigned: dict[str, int] = {}  # topic -> partitions assigned
        self._next: dict[tuple[str, int], int] = {}
        self._unknown = MissingTopics()
        self._connected: bool | None = None
        #: (topic, partition) -> high watermark minus next offset, as last measured. The thread
        #: replaces the whole dict (one reference swap), so the reactor reads it without a lock.
        self.lag: dict[tuple[str, int], int] = {}
        self._next_lag = 0.0
        #: Partitions whose end the last measurement found below the next offset to read.
        self._lost: list[tuple[str, int]] = []
        self.log = LibrdkafkaLog(client.event)
        #: librdkafka said every broker is down: the consumer rests (see the module's doc).
        self._all_down = False
        #: When the broker went away, and how many times the metadata was asked in vain since.
        self._down_since = 0.0
        self._tries = 0
        self._conf: dict[str, Any] = {}

    @property
    def connected(self) -> bool | None:
        """Whether the consumer reaches a broker: None until it has tried (readiness)."""
        return self._connected

    def _apply_changes(self, consumer: Any) -> bool:
        """Take the topics to follow or drop; True when one was added (metadata is due)."""
        added = False
        while True:
            try:
                topic, follow = self.changes.get_nowait()
            except queue.Empty:
                return added
            if follow is None:
                self._drop(consumer, topic)
            elif topic not in self._follows or self._follows[topic].sink is not follow.sink:
                if topic in self._follows:
                    # a cache_server rebuilt by a reload takes the topic over with an empty
                    # cache: it is read again from the start (or the end, when live) for it
                    self._drop(consumer, topic)
                self._follows[topic] = follow
                added = True

    def _drop(self, consumer: Any, topic: str) -> None:
        self._follows.pop(topic, None)
        self._unknown.forget(topic)
        count = self._assigned.pop(topic, 0)
        if count:
            consumer.incremental_unassign([TopicPartition(topic, p) for p in range(count)])
        for p in range(count):
            self._next.pop((topic, p), None)

    def run(self) -> None:
        client = self.client
        conf = self._conf = client.settings.consumer_config(
            f"ssekd-{client.binding}-{self.owner}")
        conf["error_cb"] = self._on_error
        conf["logger"] = self.log
        first_rest, longest_rest = client.settings.backoff(conf)
        rest = first_rest
        consumer: Any = Consumer(conf)
        backoff = 0.2
        next_refresh = 0.0
        try:
            while not self.stopping.is_set():
                if self._all_down:
                    # while this consumer exists, librdkafka tries every broker again every
                    # reconnect.backoff.ms / 2: none exists during a rest, longer each time
                    _close(consumer)
                    consumer = None
                    self.stopping.wait(rest)
                    rest = min(rest * 2, longest_rest)
                    if self.stopping.is_set():
                        break
                    consumer = Consumer(conf)
                    self._all_down = False
                    self._assign_again(consumer)
                    next_refresh = 0.0
                    continue
                if self._apply_changes(consumer):
                    next_refresh = 0.0
                if self._follows and time.monotonic() >= next_refresh:
                    try:
                        self._refresh(consumer)
                        backoff = 0.2
                        rest = first_rest
                        now = time.monotonic()
                        next_refresh = min(now + client.settings.metadata_interval,
                                           self._unknown.next_due() or float("inf"))
                    except KafkaException as e:
                        self._tries += 1
                        again = self._connected is False
                        self._set_connected(False, str(e.args[0] if e.args else e))
                        if again:  # nothing answers still: rest (above) before the next try
                            self._all_down = True
                            continue
                        self.stopping.wait(backoff)
                        backoff = min(backoff * 2, 5.0)
                        continue
                if not self._assigned:
                    # nothing assigned, so no records: this serves librdkafka's callbacks
                    # (its log, and the errors that say whether every broker is down)
                    first = consumer.poll(0.05)
                    if first is not None:
                        self._hand_over([first])
                    continue
                if time.monotonic() >= self._next_lag:
                    self._next_lag = time.monotonic() + LAG_INTERVAL
                    self.lag = self._measure_lag(consumer)
                    self._restart_lost(consumer)
                first = consumer.poll(0.1)
                if first is None:
                    continue
                records = [first]
                records.extend(consumer.consume(BATCH, 0))
                self._hand_over(records)
        finally:
            if consumer is not None:
                _close(consumer)

    def _assign_again(self, consumer: Any) -> None:
        """A new consumer takes over every partition where the one before stood: at the next
        offset not handed over yet, or where the partition was first assigned when none was."""
        partitions = []
        for topic, count in self._assigned.items():
            follow = self._follows.get(topic)
            start = OFFSET_END if follow is not None and follow.from_end else OFFSET_BEGINNING
            partitions += [TopicPartition(topic, p, self._next.get((topic, p), start))
                           for p in range(count)]
        if partitions:
            consumer.incremental_assign(partitions)

    def _refresh(self, consumer: Any) -> None:
        meta = consumer.list_topics(timeout=2.0)
        self._set_connected(True, ",".join(self.client.settings.servers))
        new: list[TopicPartition] = []
        now = time.monotonic()
        for topic, follow in list(self._follows.items()):
            tmeta = meta.topics.get(topic)
            if tmeta is None or tmeta.error is not None or not tmeta.partitions:
                if topic not in self._unknown:
                    self.client.event("BINDING_KAFKA_TOPIC_UNKNOWN", topic)
                if self._unknown.missing(topic, now, follow.give_up_after):
                    self._drop(consumer, topic)
                    follow.inbox.put(self.client.reactor, follow.sink.on_missing)
                continue
            self._unknown.forget(topic)  # found: no longer due for a look
            count = len(tmeta.partitions)
            had = self._assigned.get(topic, 0)
            if count == had:
                continue
            compacted = self._compacted(topic) if had == 0 else None
            follow.inbox.put(self.client.reactor, follow.sink.on_metadata, count, compacted)
            start = OFFSET_END if (had == 0 and follow.from_end) else OFFSET_BEGINNING
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
        to the cache. Partitions with either figure unknown yet are left out.

        A partition whose high watermark is below the offset the cache already reached is
        noted in `_lost` for `_restart_lost`."""
        tps = [TopicPartition(t, p) for t, n in self._assigned.items() for p in range(n)]
        try:
            positions = consumer.position(tps)
        except KafkaException:
            return self.lag
        lag: dict[tuple[str, int], int] = {}
        self._lost = []
        for tp in positions:
            try:
                _, high = consumer.get_watermark_offsets(tp, cached=True)
            except KafkaException:
                continue
            key = (tp.topic, tp.partition)
            nxt = tp.offset if tp.offset >= 0 else self._next.get(key)
            if high is None or high < 0 or nxt is None:
                continue
            reached = self._next.get(key)
            if reached is not None and high < reached:
                self._lost.append(key)
            lag[key] = max(0, high - nxt)
        return lag

    def _restart_lost(self, consumer: Any) -> None:
        """Read again from its beginning each partition whose end fell below the offset the
        cache reached: the broker lost it (restarted empty, an unclean leader election).

        The end is asked of the broker again first (the cached figure may be old). A broker
        that says the consumer's offset is out of range makes librdkafka go back by itself
        (`auto.offset.reset`), one that does not (tansu) leaves it waiting past the end; either
        way the records that come then are below what the cache reached and it would drop them
        as re-fetches. So the consumer is sent to the beginning, and the cache told first to
        start the partition over there (`TopicSink.on_rewind`)."""
        lost, self._lost = self._lost, []
        for topic, p in lost:
            follow = self._follows.get(topic)
            reached = self._next.get((topic, p))
            if follow is None or reached is None:
                continue
            tp = TopicPartition(topic, p)
            try:
                low, high = consumer.get_watermark_offsets(tp, timeout=2.0)
                if high >= reached:
                    continue  # the cached end was old
                consumer.seek(TopicPartition(topic, p, low))
            except KafkaException as e:
                self.client.event("BINDING_KAFKA_ERROR", f"{topic} partition {p}: {e}")
                continue
            self.client.event("BINDING_KAFKA_PARTITION_LOST",
                              f"{topic} partition {p}: its end {high} is below the offset "
                              f"{reached} already read; reading it again from {low}")
            self._next[(topic, p)] = low
            follow.inbox.put(self.client.reactor, follow.sink.on_rewind, p, low)

    def _compacted(self, topic: str) -> bool:
        """Whether the topic's `cleanup.policy` is compact, asked by an admin client made for
        the question (one kept open would hold a connection, and retry it, for nothing)."""
        try:
            admin = AdminClient(self.client.settings.admin_config(self._conf))
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
        error: Any = KafkaRecord.error
        topic_of: Any = KafkaRecord.topic
        good = [r for r in records if error(r) is None]
        if len(good) != len(records):
            for r in records:
                err = r.error()
                if err is None:
                    continue
                if err.code() == KafkaError._PARTITION_EOF:
                    ends.append((r.topic(), r.partition(), r.offset()))
                else:
                    self.client.event("BINDING_KAFKA_FETCH_ERROR", f"{r.topic()}: {err.str()}")
        if good:
            topics = set(map(topic_of, good))
            if len(topics) == 1:  # the common case: one topic
                by_topic[topics.pop()] = from_confluent_batch(good)
            else:
                runs: dict[str, list[Any]] = {}
                for r in good:
                    runs.setdefault(topic_of(r), []).append(r)
                by_topic = {t: from_confluent_batch(rs) for t, rs in runs.items()}
        reactor = self.client.reactor
        follows = self._follows
        for topic, msgs in by_topic.items():
            follow = follows.get(topic)
            if follow is None:
                continue  # dropped while librdkafka still held some of its records
            # a partition's records are in offset order: the last one of each sets its next
            # (unless a re-fetch brought records the cache already has)
            nxt = self._next
            for p, last in {m.partition: m.offset for m in msgs}.items():
                if last >= nxt.get((topic, p), 0):
                    nxt[(topic, p)] = last + 1
            follow.inbox.put_records(reactor, msgs)
        for topic, p, off in ends:
            follow = follows.get(topic)
            if follow is not None:
                follow.inbox.put(reactor, follow.sink.on_end, p, off)
        for topic in by_topic:
            follow = follows.get(topic)
            if follow is not None:
                follow.inbox.wait_room(self.stopping)

    def _on_error(self, err: Any) -> None:
        code = err.code()
        if code in (KafkaError._ALL_BROKERS_DOWN, KafkaError._TRANSPORT,
                    KafkaError._RESOLVE):
            if code == KafkaError._TRANSPORT:
                self.log.last_failure = err.str()
            if code == KafkaError._ALL_BROKERS_DOWN:
                self._all_down = True
            if code == KafkaError._ALL_BROKERS_DOWN or self._connected:
                self._set_connected(False, err.str())
        else:
            self.log.say("BINDING_KAFKA_ERROR", err.str())

    def _set_connected(self, up: bool, detail: str) -> None:
        """Say a change of the broker's state, once: when down, with the last failure
        librdkafka gave; when back, with how long it was away."""
        if up == self._connected:
            return
        was = self._connected
        self._connected = up
        if up:
            away = time.monotonic() - self._down_since
            self.client.event("BINDING_KAFKA_BROKER_CONNECTED",
                              detail + (f" (back after {away:.0f} s away; {self._tries} "
                                        f"tries failed)" if was is False else ""))
        else:
            self._down_since = time.monotonic()
            self._tries = 0
            why = self.log.last_failure or detail
            self.client.event("BINDING_KAFKA_BROKER_UNAVAILABLE",
                              f"{','.join(self.client.settings.servers)}: {why}; retrying, "
                              f"less often the longer it lasts")


class HistoryFetcher(_KafkaThread):
    """Owns the consumer that reads offsets older than the cache, one request at a time.

    Consecutive requests that continue where the last one stopped keep the assignment, so
    librdkafka's prefetch carries a long catch-up along without a seek per request. A request
    stops at its byte budget; records librdkafka already handed over past it are kept for the
    request that continues there (a seek otherwise), so the position stays exact.
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
        conf["logger"] = LibrdkafkaLog(client.event)
        consumer: Any = None
        current: _Position | None = None
        try:
            while not self.stopping.is_set():
                try:
                    req = self.requests.get(timeout=HISTORY_IDLE)
                except queue.Empty:
                    if consumer is not None:  # idle: no connection held (and retried) for it
                        _close(consumer)
                        consumer, current = None, None
                    continue
                if req is None:
                    break
                if consumer is None:
                    consumer = Consumer(conf)
                try:
                    result, current = self._serve(consumer, req, current)
                except Exception as e:  # noqa: BLE001 - one failed read must not end the thread
                    result, current = FetchResult([], None, str(e)), None
                client.reactor.callFromThread(req.deferred.callback, result)
        finally:
            if consumer is not None:
                _close(consumer)

    def _serve(self, consumer: Any, req: _FetchRequest, current: _Position | None
               ) -> tuple[FetchResult, _Position | None]:
        got: list[Message] = []
        end: int | None = None
        if current is not None and current.at == (req.topic, req.partition, req.offset):
            got, end = current.leftover, current.end
        else:
            consumer.assign([TopicPartition(req.topic, req.partition, req.offset)])
        error: str | None = None
        size = sum(m.size for m in got)
        deadline = time.monotonic() + self.WAIT
        while (end is None and error is None and len(got) < req.limit and size < req.max_bytes
               and time.monotonic() < deadline and not self.stopping.is_set()):
            r = consumer.poll(0.05)
            if r is None:
                continue
            for rec in [r, *consumer.consume(req.limit - len(got), 0)]:
                e = rec.error()
                if e is not None:
                    if e.code() == KafkaError._PARTITION_EOF:
                        end = rec.offset()
                    else:
                        error = e.str()
                    continue
                if (rec.partition() == req.partition and rec.topic() == req.topic
                        and rec.offset() >= req.offset):
                    m = from_confluent(rec)
                    got.append(m)
                    size += m.size
        taken = _within(got, req.limit, req.max_bytes)
        rest = got[len(taken):]
        if error is not None or not taken:
            # after an end-of-partition (or nothing) librdkafka will not say "end" again for
            # this assignment: seek afresh next time
            return FetchResult(taken, None if rest else end, error), None
        if rest or end is None:
            return FetchResult(taken, None), _Position(
                (req.topic, req.partition, taken[-1].offset + 1), rest, end)
        return FetchResult(taken, end), None


def _within(records: list[Message], limit: int, max_bytes: int) -> list[Message]:
    """The first records, at most `limit`, whose sizes add up to `max_bytes` (at least one)."""
    total = 0
    for n, m in enumerate(records[:limit]):
        total += m.size
        if total >= max_bytes:
            return records[:n + 1]
    return records[:limit]


@dataclass
class _Position:
    """Where the history consumer stands: the next offset it will hand over for (topic,
    partition), with the records it already took from librdkafka beyond the last answer."""

    at: tuple[str, int, int]
    leftover: list[Message]
    #: The partition's end, when librdkafka said so while handing over the leftover.
    end: int | None
