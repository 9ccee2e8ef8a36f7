"""The tail consumer: the thread of a kafka client that keeps every partition of every topic in
use assigned and feeds the cache (`TopicSink`, through one `Inbox` per topic).

It tracks each partition's next offset from fetched data (tansu's `get_watermark_offsets` is
wrong, real Kafka's is racy anyway) and re-reads metadata now and then to notice new partitions
and topics that did not exist yet (backing off, and giving up, for topics that stay missing:
`missing_topics`); a topic the cache stops following is unassigned. When the broker is down at
start or goes away, it retries with back-off and says so in events, once per change, and
resumes each partition at the next offset it had not handed over.

While every broker is down, librdkafka itself tries again every `reconnect.backoff.ms / 2` for
as long as a consumer exists (metadata and coordinator requests start each try over, whatever
its back-off says), so the tail consumer closes its consumer and makes a new one after a rest
that doubles from `reconnect.backoff.ms` up to `reconnect.backoff.max.ms`.

A consumer that stays connected but stops receiving records the broker has is replaced the same
way (`stall.StallWatch`, the client's `stall-timeout`).
"""

from __future__ import annotations

import queue
import time
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    Consumer,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka import Message as KafkaRecord
from confluent_kafka.admin import AdminClient, ConfigResource  # type: ignore[attr-defined]

from ssekd.bindings.kafka.consumer_thread import ClientContext, ConsumerThread
from ssekd.bindings.kafka.inbox import BATCH, Inbox, TopicSink
from ssekd.bindings.kafka.librdkafka import LibrdkafkaLog, close_consumer
from ssekd.bindings.kafka.message import OFFSET, PARTITION, Message, from_confluent_batch
from ssekd.bindings.kafka.missing_topics import MissingTopics
from ssekd.bindings.kafka.stall import StallWatch

#: A record's partition and offset, for the loop over a batch that keeps the last offset of
#: each partition (the loop in C: this thread holds the GIL the reactor needs).
_partition = itemgetter(PARTITION)
_offset = itemgetter(OFFSET)

#: Seconds between measurements of the consumer lag (local calls only: no broker round trip).
LAG_INTERVAL = 1.0


@dataclass(frozen=True)
class FollowedTopic:
    """How the tail consumer follows one topic."""

    sink: TopicSink
    from_end: bool
    give_up_after: int | None
    inbox: Inbox = field(init=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "inbox", Inbox(self.sink))


class TailConsumer(ConsumerThread):
    """Owns the consumer that keeps every partition in use assigned and feeds the cache."""

    def __init__(self, client: ClientContext, cache_server: str) -> None:
        super().__init__(client, cache_server)
        self.cache_server = cache_server
        #: (topic, how to follow it), or (topic, None) to stop: applied in order by the thread.
        self.changes: queue.Queue[tuple[str, FollowedTopic | None]] = queue.Queue()
        # thread-owned state
        self._follows: dict[str, FollowedTopic] = {}
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
        self._stall: StallWatch[tuple[str, int]] = StallWatch(client.settings.stall_timeout)

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
            f"ssekd-{client.binding}-{self.cache_server}")
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
                    close_consumer(consumer)
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
                if self._connected and self._stall.due() and self._stalled(consumer):
                    close_consumer(consumer)
                    consumer = Consumer(conf)
                    self._assign_again(consumer)
                    next_refresh = 0.0
                    continue
                first = consumer.poll(0.1)
                if first is None:
                    continue
                records = [first]
                records.extend(consumer.consume(BATCH, 0))
                self._hand_over(records)
        finally:
            if consumer is not None:
                close_consumer(consumer)

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

    def _stalled(self, consumer: Any) -> bool:
        """A look of the stall watch: whether a partition that has not moved since the look
        before has records waiting at the broker (then the consumer is to be replaced, and the
        event says so). Partitions the broker does not answer for are not judged."""
        still = self._stall.still(self._next)
        waiting: list[str] = []
        for topic, p in still:
            if topic not in self._follows:
                continue
            tp = TopicPartition(topic, p)
            try:
                # the end the last fetch brought (right on tansu, whose answer to the query
                # below is the start of its last batch plus one), or the broker's answer now
                # (what a consumer whose fetches stopped coming back has no other way to learn)
                _, queried = consumer.get_watermark_offsets(tp, timeout=2.0)
                _, fetched = consumer.get_watermark_offsets(tp, cached=True)
            except KafkaException:
                continue  # no leader, no answer: the cluster's state, reported elsewhere
            known = [h for h in (queried, fetched) if h is not None and h >= 0]
            if not known:
                continue
            high = max(known)
            at = self._next[(topic, p)]
            if high > at:
                waiting.append(f"{topic} partition {p} at {at} ({high - at} waiting)")
        if not waiting:
            self._stall.flowing()
            return False
        self.client.event("BINDING_KAFKA_CONSUMER_STALLED",
                          f"{', '.join(waiting)}: no record for {self._stall.wait:.0f} s; a new "
                          f"consumer takes over where this one stood")
        self._stall.replaced()
        return True

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
            for p, last in dict(zip(map(_partition, msgs), map(_offset, msgs))).items():
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
