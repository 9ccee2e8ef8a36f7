"""One Kafka record as the cache keeps it: immutable, small, shared by every subscriber."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from confluent_kafka import Message as KafkaRecord

Headers = tuple[tuple[str, bytes | None], ...]

_OVERHEAD = 120  # bytes of object overhead counted per message against the cache's byte bound


class Message:
    """A record of one topic partition.

    `seq` orders messages of a topic as the cache received them (across partitions), so a
    catch-up read interleaves partitions the way the tail did. `size` is what the message
    costs the cache's byte bound.
    """

    __slots__ = (
        "headers",
        "key",
        "offset",
        "partition",
        "replaced",
        "seq",
        "size",
        "timestamp",
        "value",
    )

    def __init__(self, partition: int, offset: int, key: bytes | None, value: bytes | None,
                 headers: Headers = (), timestamp: int = 0, seq: int = 0) -> None:
        self.partition = partition
        self.offset = offset
        self.key = key
        self.value = value
        self.headers = headers
        self.timestamp = timestamp
        self.seq = seq
        size = _OVERHEAD + (len(key) if key else 0) + (len(value) if value else 0)
        if headers:  # most records have none: skip the generator (a third of this call)
            size += sum(len(n) + (len(v) if v else 0) for n, v in headers)
        self.size = size
        #: True once a newer record with the same key replaced it in a compacted cache.
        self.replaced = False

    def header(self, name: str) -> bytes | None:
        """The value of the first header called `name` (docs/protocol.md: the etag is the first)."""
        for n, v in self.headers:
            if n == name:
                return v
        return None

    def __repr__(self) -> str:
        return f"Message(p={self.partition}, o={self.offset}, key={self.key!r})"


def from_confluent_batch(records: Iterable[Any]) -> list[Message]:
    """Convert a batch of error-free confluent_kafka.Messages (called on the consumer thread).

    The same as `from_confluent` per record, with the accessors looked up once for the batch:
    this loop holds the GIL the reactor needs, and a cold topic passes through it a record at a
    time, so it is kept to the calls it cannot do without."""
    r: Any  # the accessors are C methods called unbound: no bound method per call
    partition: Any = KafkaRecord.partition
    offset: Any = KafkaRecord.offset
    key: Any = KafkaRecord.key
    value: Any = KafkaRecord.value
    headers: Any = KafkaRecord.headers
    timestamp: Any = KafkaRecord.timestamp
    new = Message
    out: list[Message] = []
    append = out.append
    for r in records:
        h = headers(r)
        kind, ts = timestamp(r)
        append(new(partition(r), offset(r), key(r), value(r), tuple(h) if h else (),
                   ts if kind else 0))
    return out


def from_confluent(record: Any) -> Message:
    """Convert a confluent_kafka.Message (called on the consumer thread)."""
    raw: Sequence[tuple[str, bytes | None]] | None = record.headers()
    ts_type, ts = record.timestamp()
    return Message(record.partition(), record.offset(), record.key(), record.value(),
                   tuple(raw) if raw else (), ts if ts_type else 0)


def within_bytes(records: list[Message], max_bytes: int) -> list[Message]:
    """The first `records` whose sizes add up to `max_bytes`, but at least one: a catch-up step
    or a history read is bounded in bytes however small its records are, and never empty while
    there is a record to give."""
    total = 0
    for n, m in enumerate(records):
        total += m.size
        if total >= max_bytes:
            return records[:n + 1]
    return records
