"""Where a Kafka partition starts and ends, learned from fetched data rather than from the broker's
offset listing.

The development broker (tansu) answers `ListOffsets` wrongly: its high watermark can point at the
first offset of the last record batch instead of past its end, and `offsets_for_times` always
answers 0 (docs/operations.md, the development broker). Trusting either would make a bounded
read silently miss the last records.
So the end of a partition is the offset carried by librdkafka's end-of-partition event
(`enable.partition.eof`), which comes from the high watermark of an actual fetch response, or past
the last record received, whichever is larger. The listed watermark is used only as a place to
start looking: on real Kafka it is exact and the probe reads nothing; on tansu it is at most one
batch short and the probe reads that batch. Both give the same answer.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Mapping, Sequence

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from .options import CONSUMER_DEFAULTS, EARLIEST, LATEST, KafkaOptions, OffsetSpec, OptionError


class OffsetProbeError(RuntimeError):
    """The end of a partition could not be learned (no fetch answered within the timeout)."""


class DataLossError(RuntimeError):
    """Records that should be read are gone (retention, truncation): failOnDataLoss is true."""


def consumer_config(kafka: KafkaOptions, *, reset: str = "error") -> dict[str, str | int | bool]:
    """A consumer that never joins a group or commits: every position is chosen by `assign`.

    `auto.offset.reset=error` turns "this offset no longer exists" into an event we can act on
    (DataLossError), instead of a silent jump to another offset.
    """
    config: dict[str, str | int | bool] = dict(CONSUMER_DEFAULTS)
    config.update({
        "group.id": f"ssekd-spark-{uuid.uuid4().hex}",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": True,
        "auto.offset.reset": reset,
    })
    config.update(kafka.config)
    return config


def poll_messages(consumer: Consumer, wait_s: float, max_batch: int = 10_000) -> list[Message]:
    """Whatever the consumer has now, waiting up to `wait_s` for the first message.

    `consume(n, t)` waits the whole `t` even when messages are ready, so wait with `poll` and
    then drain the queue without waiting.
    """
    first = consumer.poll(wait_s)
    if first is None:
        return []
    rest = consumer.consume(max_batch - 1, timeout=0)
    return [first, *rest]


def list_partitions(consumer: Consumer, topic: str, timeout_s: float = 10.0) -> list[int]:
    """Partition ids of `topic`, sorted; an unknown topic is an error that names it."""
    metadata = consumer.list_topics(topic, timeout=timeout_s)
    described = metadata.topics.get(topic)
    if described is None or described.error is not None or not described.partitions:
        reason = described.error if described is not None else "not in metadata"
        raise OptionError(f"topic {topic!r} does not exist or has no partitions ({reason})")
    return sorted(described.partitions)


def low_offsets(consumer: Consumer, topic: str, partitions: Sequence[int],
                timeout_s: float = 10.0) -> dict[int, int]:
    """Log start offsets. A too-low answer is harmless: reading from it reaches the first record,
    or raises DataLossError on a broker that reports the gap."""
    return {p: int(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout_s)[0])
            for p in partitions}


def probe_end_offsets(kafka: KafkaOptions, topic: str, partitions: Sequence[int],
                      floor: Mapping[int, int] | None = None,
                      idle_timeout_s: float = 10.0) -> dict[int, int]:
    """The next offset to be written in each partition, from fetch responses.

    `floor` holds offsets known to be at or before the end (a previous probe's answer); the probe
    starts at the larger of it and the listed high watermark, and reads forward to the
    end-of-partition event. A partition that goes quiet for `idle_timeout_s` without that event
    is an OffsetProbeError: guessing would risk a silently short read.
    """
    if not partitions:
        return {}
    consumer = Consumer(consumer_config(kafka))
    try:
        lows: dict[int, int] = {}
        starts: list[TopicPartition] = []
        for p in partitions:
            low, listed = consumer.get_watermark_offsets(TopicPartition(topic, p),
                                                         timeout=idle_timeout_s)
            lows[p] = int(low)
            known = (floor or {}).get(p, int(low))
            starts.append(TopicPartition(topic, p, max(int(listed), known, int(low))))
        consumer.assign(starts)
        seen: dict[int, int] = {}
        ends: dict[int, int] = {}
        last_event = time.monotonic()
        client_error: KafkaError | None = None
        while len(ends) < len(partitions):
            if time.monotonic() - last_event > idle_timeout_s:
                missing = sorted(set(partitions) - set(ends))
                raise OffsetProbeError(
                    f"{topic}: no end-of-partition event for partitions {missing} within "
                    f"{idle_timeout_s}s" + (f" (last error: {client_error})" if client_error
                                            else ""))
            for message in poll_messages(consumer, 0.1):
                q = message.partition()
                error = message.error()
                if q is None or q < 0:
                    client_error = error or client_error  # e.g. broker down: librdkafka retries
                    continue
                if q in ends:
                    continue
                if error is None or error.code() == KafkaError._PARTITION_EOF:
                    last_event = time.monotonic()
                if error is None:
                    seen[q] = max(seen.get(q, 0), int(message.offset() or 0) + 1)
                elif error.code() == KafkaError._PARTITION_EOF:
                    ends[q] = max(int(message.offset() or 0), seen.get(q, 0))
                    consumer.pause([TopicPartition(topic, q)])
                elif error.code() == KafkaError._AUTO_OFFSET_RESET:
                    # The guess lay outside the log (a broker that reports it): restart from the
                    # log start, which is always valid.
                    consumer.seek(TopicPartition(topic, q, lows[q]))
                elif not error.retriable():
                    raise KafkaException(error)
        return ends
    finally:
        consumer.close()


def first_offset_at(kafka: KafkaOptions, topic: str, partitions: Sequence[int], since_ms: int,
                    ends: Mapping[int, int], idle_timeout_s: float = 10.0) -> dict[int, int]:
    """Per partition, the first offset whose timestamp is >= `since_ms` (the end when none is).

    This is what Kafka's `offsets_for_times` answers. Its answer is taken as a place to start, then
    checked by reading forward to the first record that qualifies: on real Kafka that is the
    first record read; on tansu, whose answer is always 0, it is a scan of the partition.
    """
    consumer = Consumer(consumer_config(kafka))
    try:
        asked = [TopicPartition(topic, p, since_ms) for p in partitions]
        hints = {tp.partition: int(tp.offset)
                 for tp in consumer.offsets_for_times(asked, timeout=idle_timeout_s)}
        lows = low_offsets(consumer, topic, partitions, idle_timeout_s)
        found: dict[int, int] = {}
        starts: list[TopicPartition] = []
        for p in partitions:
            hint = hints.get(p, -1)
            start = max(hint, lows[p]) if hint >= 0 else ends[p]
            if start >= ends[p]:
                found[p] = ends[p]
            else:
                starts.append(TopicPartition(topic, p, start))
        if not starts:
            return found
        consumer.assign(starts)
        last_event = time.monotonic()
        while len(found) < len(partitions):
            if time.monotonic() - last_event > idle_timeout_s:
                raise OffsetProbeError(f"{topic}: reading toward timestamp {since_ms} stalled")
            for message in poll_messages(consumer, 0.1):
                q = message.partition()
                if q is None or q in found:
                    continue
                error = message.error()
                offset = int(message.offset() or 0)
                if error is None or error.code() == KafkaError._PARTITION_EOF:
                    last_event = time.monotonic()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF and offset >= ends[q]:
                        found[q] = ends[q]
                    elif error.code() == KafkaError._AUTO_OFFSET_RESET:
                        consumer.seek(TopicPartition(topic, q, lows[q]))
                    elif error.code() != KafkaError._PARTITION_EOF and not error.retriable():
                        raise KafkaException(error)
                    continue
                if offset >= ends[q]:
                    found[q] = ends[q]
                elif message.timestamp()[1] >= since_ms:
                    found[q] = offset
                if q in found:
                    consumer.pause([TopicPartition(topic, q)])
        return found
    finally:
        consumer.close()


def resolve(spec: OffsetSpec, partitions: Sequence[int], lows: Mapping[int, int],
            ends: Mapping[int, int]) -> dict[int, int]:
    """Concrete offsets for a spec; partitions the spec does not name take its default side
    (earliest for a start, which is what a missing key means in Spark's connector too)."""
    resolved: dict[int, int] = {}
    for p in partitions:
        if spec == "earliest":
            value = EARLIEST
        elif spec == "latest":
            value = LATEST
        else:
            assert isinstance(spec, dict)
            value = spec.get(p, EARLIEST)
        if value == EARLIEST:
            resolved[p] = lows[p]
        elif value == LATEST:
            resolved[p] = ends[p]
        else:
            resolved[p] = min(value, ends[p])
    return resolved


def resolve_end(spec: OffsetSpec, partitions: Sequence[int], lows: Mapping[int, int],
                ends: Mapping[int, int]) -> dict[int, int]:
    """Like `resolve`, but a partition the spec does not name reads to its end."""
    if isinstance(spec, dict):
        spec = {p: spec.get(p, LATEST) for p in partitions}
    return resolve(spec, partitions, lows, ends)


def iter_range(kafka: KafkaOptions, topic: str, partition: int, start: int, end: int, *,
               fail_on_data_loss: bool = True, idle_timeout_s: float = 30.0,
               max_batch: int = 10_000) -> Iterator[list[Message]]:
    """The records of one partition with start <= offset < end, in offset order, in batches.

    Offsets may have gaps (compacted topics, transaction markers), so the read is over when a
    record at or past `end` arrives, when the record at `end - 1` has been seen, or when an
    end-of-partition event says the log ends at or past `end`. Waiting longer than
    `idle_timeout_s` for records that the end offset promised is an error, never a short read.
    """
    if start >= end:
        return
    reset = "error" if fail_on_data_loss else "earliest"
    consumer = Consumer(consumer_config(kafka, reset=reset))
    try:
        consumer.assign([TopicPartition(topic, partition, start)])
        position = start
        last_progress = time.monotonic()
        while position < end:
            out: list[Message] = []
            for message in poll_messages(consumer, 0.1, max_batch):
                error = message.error()
                offset = int(message.offset() or 0)
                if error is not None:
                    code = error.code()
                    if code == KafkaError._PARTITION_EOF:
                        if offset >= end:
                            position = end
                    elif code == KafkaError._AUTO_OFFSET_RESET:
                        raise DataLossError(
                            f"{topic}[{partition}]: offset {position} is no longer in the log "
                            f"(set failOnDataLoss=false to read from the log start instead)")
                    elif not error.retriable():
                        raise KafkaException(error)
                    continue
                if offset >= end:
                    position = end
                    break
                out.append(message)
                position = offset + 1
            if out:
                last_progress = time.monotonic()
                yield out
            elif position < end and time.monotonic() - last_progress > idle_timeout_s:
                raise OffsetProbeError(
                    f"{topic}[{partition}]: stalled at offset {position}, expected records up to "
                    f"{end} (readTimeoutMs elapsed)")
    finally:
        consumer.close()
