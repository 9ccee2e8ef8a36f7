"""One Kafka record as the cache keeps it: a plain tuple, immutable, shared by every subscriber.

A record is an exact `tuple` of ints, bytes, None and a tuple of header pairs, read by index
(`m[OFFSET]`). That is for the cyclic garbage collector: CPython stops tracking a tuple that
holds only such values the first time the collector sees it, so afterwards a cache of a million
records costs a full collection only its lists (33 ms). As instances of a class they were all
tracked, and every full collection walked each of them: about a fifth of a cold read's CPU, and
pauses of 0.2 to 0.5 s with a million records cached (bench/README.md, "Cut since: records are
plain tuples").

What a record's place in the cache says beyond its fields (whether a newer record with the same
key replaced it) is the cache's to know (`TopicLog.replaced`), not the record's.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import count
from typing import Any, Final

from confluent_kafka import Message as KafkaRecord

from ssekd.hotpath import RECORD_OVERHEAD, records_of_batch

# The first records of a list that fit a byte bound: part of the hot path (every record a stream
# catches up on passes through it), compiled when it can be; taken from here by its users.
from ssekd.hotpath import within_bytes as within_bytes

Headers = tuple[tuple[str, bytes | None], ...]

#: (partition, offset, key, value, headers, timestamp, seq, size)
Message = tuple[int, int, bytes | None, bytes | None, Headers, int, int, int]

PARTITION: Final = 0
OFFSET: Final = 1
KEY: Final = 2
VALUE: Final = 3
HEADERS: Final = 4
#: Milliseconds since the epoch, 0 when the record has none.
TIMESTAMP: Final = 5
#: Orders records as the process received them (across partitions and topics), so a catch-up
#: read of the cache interleaves partitions the way the tail did.
SEQ: Final = 6
#: What the record costs the cache's byte bound: key, value, headers and `_OVERHEAD`.
SIZE: Final = 7

#: Bytes of object overhead counted per message against the cache's byte bound.
_OVERHEAD: Final = RECORD_OVERHEAD
#: The smallest `size` a record has (no key, value or headers).
SMALLEST: Final = _OVERHEAD

#: The next `seq`: one counter for the process (its `next` is one C call, safe from any thread
#: under the GIL), so records made on different consumer threads still order by arrival.
_seqs = count(1)


def new_message(partition: int, offset: int, key: bytes | None, value: bytes | None,
                headers: Headers = (), timestamp: int = 0) -> Message:
    """A record with the next `seq` and its size."""
    size = _OVERHEAD + (len(key) if key else 0) + (len(value) if value else 0)
    if headers:
        size += sum(len(n) + (len(v) if v else 0) for n, v in headers)
    return (partition, offset, key, value, headers, timestamp, next(_seqs), size)


def renumbered(m: Message) -> Message:
    """`m` with the next `seq` (a record that reached its topic's log after a later one)."""
    return m[:SEQ] + (next(_seqs), m[SIZE])


def with_value(m: Message, value: bytes | None) -> Message:
    """`m` with another value (a model's conversion), in the same place of the arrival order."""
    size = m[SIZE] - (len(m[VALUE]) if m[VALUE] else 0) + (len(value) if value else 0)
    return (m[PARTITION], m[OFFSET], m[KEY], value, m[HEADERS], m[TIMESTAMP], m[SEQ], size)


def header(m: Message, name: str) -> bytes | None:
    """The value of the first header called `name` (docs/protocol.md: the etag is the first)."""
    for n, v in m[HEADERS]:
        if n == name:
            return v
    return None


def describe(m: Message) -> str:
    """Where the record is, for logs and events."""
    return f"partition {m[PARTITION]} offset {m[OFFSET]}"


def from_confluent_batch(records: Iterable[Any]) -> list[Message]:
    """Convert a batch of error-free confluent_kafka.Messages (called on the consumer thread).

    The same as `from_confluent` per record. This loop holds the GIL the reactor needs, and a
    cold topic passes through it a record at a time: it is part of the hot path, compiled when
    it can be (`ssekd.hotpath.records_of_batch`). The accessors are passed unbound: a C call
    each, no bound method made per record."""
    return records_of_batch(records, _seqs.__next__, KafkaRecord.partition, KafkaRecord.offset,
                            KafkaRecord.key, KafkaRecord.value, KafkaRecord.headers,
                            KafkaRecord.timestamp)


def from_confluent(record: Any) -> Message:
    """Convert a confluent_kafka.Message (called on the consumer thread)."""
    raw: Sequence[tuple[str, bytes | None]] | None = record.headers()
    ts_type, ts = record.timestamp()
    return new_message(record.partition(), record.offset(), record.key(), record.value(),
                       tuple(raw) if raw else (), ts if ts_type else 0)
