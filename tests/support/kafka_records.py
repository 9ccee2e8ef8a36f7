"""Plain confluent-kafka helpers for setting up and checking topics, written independently of
the `spark` package so that a test does not check the code with itself."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

Headers = list[tuple[str, bytes | None]]


@dataclass(frozen=True)
class Record:
    """A record as the broker holds it."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: Headers
    timestamp_ms: int


@dataclass(frozen=True)
class Change:
    """A record to produce. `partition=None`: the producer's (murmur2) partitioner decides."""

    key: bytes | None
    value: bytes | None
    headers: Headers | None = None
    partition: int | None = None
    timestamp_ms: int | None = None


def create_topic(bootstrap: str, name: str, partitions: int, compact: bool = False) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    config = {"cleanup.policy": "compact"} if compact else {}
    admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1,
                                  config=config)])[name].result(10)


def produce(bootstrap: str, topic: str, changes: Iterable[Change]) -> list[Record]:
    """Produce in order and return what the broker acknowledged, with partitions and offsets."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5,
                         "partitioner": "murmur2_random", "enable.idempotence": True})
    acked: list[Record] = []
    failed: list[KafkaError] = []

    def reporter(change: Change) -> Callable[[KafkaError | None, Message], None]:
        # Delivery reports carry no headers: take them from what was sent.
        def report(error: KafkaError | None, m: Message) -> None:
            if error is not None:
                failed.append(error)
                return
            acked.append(Record(m.partition() or 0, m.offset() or 0, m.key(), m.value(),
                                list(change.headers or []), m.timestamp()[1]))
        return report

    for change in changes:
        kwargs: dict[str, object] = {"key": change.key, "value": change.value,
                                     "on_delivery": reporter(change)}
        if change.headers:
            kwargs["headers"] = change.headers
        if change.partition is not None:
            kwargs["partition"] = change.partition
        if change.timestamp_ms is not None:
            kwargs["timestamp"] = change.timestamp_ms
        while True:
            try:
                producer.produce(topic, **kwargs)  # type: ignore[arg-type]
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    assert producer.flush(30) == 0
    assert not failed, failed[:3]
    return sorted(acked, key=lambda r: (r.partition, r.offset))


def read_topic(bootstrap: str, topic: str, idle_s: float = 0.5) -> list[Record]:
    """Every record of `topic`: read each partition until an end-of-partition event, then keep
    polling until nothing has come for `idle_s` (so no reliance on the listed high watermark)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex,
                         "enable.auto.commit": False, "enable.partition.eof": True,
                         "fetch.wait.max.ms": 10})
    try:
        metadata = consumer.list_topics(topic, timeout=10)
        partitions = sorted(metadata.topics[topic].partitions)
        consumer.assign([TopicPartition(topic, p, -2) for p in partitions])  # -2: beginning
        records: list[Record] = []
        at_end: set[int] = set()
        quiet_since = time.monotonic()
        while len(at_end) < len(partitions) or time.monotonic() - quiet_since < idle_s:
            m = consumer.poll(0.1)
            if m is None:
                continue
            quiet_since = time.monotonic()
            error = m.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    at_end.add(m.partition() or 0)
                    continue
                raise AssertionError(str(error))
            records.append(Record(m.partition() or 0, m.offset() or 0, m.key(), m.value(),
                                  list(m.headers() or []),  # type: ignore[arg-type]
                                  m.timestamp()[1]))
        return sorted(records, key=lambda r: (r.partition, r.offset))
    finally:
        consumer.close()


def latest_per_key(records: Iterable[Record]) -> dict[tuple[int, bytes], Record]:
    """What log compaction keeps: the highest offset per (partition, key)."""
    state: dict[tuple[int, bytes], Record] = {}
    for r in sorted(records, key=lambda r: (r.partition, r.offset)):
        if r.key is not None:
            state[(r.partition, r.key)] = r
    return state
