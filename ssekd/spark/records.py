"""Kafka records as Arrow record batches, and Arrow record batches as Kafka records.

The Python data source hands Spark Arrow batches rather than tuples: building columns directly
skips a per-value conversion in the worker, which is most of the cost of a read. The row shape
follows Spark's own Kafka connector so that code written against it reads the same, except that
records without headers carry an empty list (not null): "no headers" then compares equal however
the record was made.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, cast

import pyarrow as pa
from confluent_kafka import KafkaError, KafkaException, Message, Producer

from .options import PRODUCER_DEFAULTS, KafkaOptions

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

#: The rows a read produces, in Spark DDL. `partition`/`offset` locate the record; `timestamp`
#: is the record's own (create or log-append) time, null when the record has none.
SCHEMA_DDL = (
    "key BINARY, value BINARY, headers ARRAY<STRUCT<key: STRING, value: BINARY>>, "
    "topic STRING, partition INT, offset BIGINT, timestamp TIMESTAMP"
)


def spark_schema() -> StructType:
    """SCHEMA_DDL as a StructType, built by hand: parsing DDL needs a JVM, and executors and the
    data source's planner processes have none."""
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
    return StructType([
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("headers", ArrayType(header)),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
    ])


def arrow_schema(schema: StructType) -> pa.Schema:
    """The Arrow schema Spark checks a returned batch against (it compares them exactly)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema, timezone="UTC")


def to_record_batch(messages: list[Message], schema: pa.Schema) -> pa.RecordBatch:
    """One Arrow batch from consumed messages, shaped exactly like `schema`."""
    keys: list[bytes | None] = []
    values: list[bytes | None] = []
    topics: list[str | None] = []
    partitions: list[int | None] = []
    offsets: list[int | None] = []
    stamps: list[int | None] = []
    header_offsets = [0]
    header_keys: list[str] = []
    header_values: list[bytes | None] = []
    for m in messages:
        keys.append(m.key())
        values.append(m.value())
        topics.append(m.topic())
        partitions.append(m.partition())
        offsets.append(m.offset())
        kind, ms = m.timestamp()
        stamps.append(ms * 1000 if kind != 0 and ms >= 0 else None)
        headers = m.headers()
        if headers:
            # A consumed message's headers are always a list of (name, bytes | None) pairs.
            for name, value in cast(list[tuple[str, bytes | None]], headers):
                header_keys.append(name)
                header_values.append(value)
        header_offsets.append(len(header_keys))
    headers_type = schema.field("headers").type
    entry_type = headers_type.value_type
    entries = pa.StructArray.from_arrays(
        [pa.array(header_keys, entry_type.field("key").type),
         pa.array(header_values, entry_type.field("value").type)],
        fields=[entry_type.field("key"), entry_type.field("value")],
    )
    columns = {
        "key": pa.array(keys, schema.field("key").type),
        "value": pa.array(values, schema.field("value").type),
        "headers": pa.ListArray.from_arrays(pa.array(header_offsets, pa.int32()), entries,
                                            type=headers_type),
        "topic": pa.array(topics, schema.field("topic").type),
        "partition": pa.array(partitions, schema.field("partition").type),
        "offset": pa.array(offsets, schema.field("offset").type),
        "timestamp": pa.array(stamps, pa.int64()).cast(schema.field("timestamp").type),
    }
    return pa.RecordBatch.from_arrays([columns[name] for name in schema.names], schema=schema)


def producer_config(kafka: KafkaOptions) -> dict[str, str | int | bool]:
    config: dict[str, str | int | bool] = dict(PRODUCER_DEFAULTS)
    config.update(kafka.config)
    return config


def _as_bytes(value: Any) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    raise TypeError(f"cannot write a {type(value).__name__} as Kafka bytes; cast the column "
                    f"to binary or string")


def _column(batch: pa.RecordBatch, name: str) -> list[Any] | None:
    if name not in batch.schema.names:
        return None
    column = batch.column(name)
    if name == "timestamp" and pa.types.is_timestamp(column.type):
        column = column.cast(pa.timestamp("ms", tz="UTC"), safe=False).cast(pa.int64())
    return column.to_pylist()  # type: ignore[no-any-return]


class DeliveryFailed(RuntimeError):
    """The broker did not accept some records; the task fails so Spark can retry it."""


def produce_batches(kafka: KafkaOptions, batches: Iterable[pa.RecordBatch],
                    flush_timeout_s: float = 60.0) -> int:
    """Produce every row; return how many the broker acknowledged.

    Columns: `value` (required, null = tombstone), optional `key`, `headers`
    (array<struct<key, value>>), `partition` (int: that partition, null: the partitioner's
    choice), `topic` (when the `topic` option is not set) and `timestamp` (kept as the record's
    create time; absent or null: now). Binary or string columns are both accepted.
    Any delivery error raises once everything in flight has settled, so a task never reports
    success for records that were not written.
    """
    producer = Producer(producer_config(kafka))
    failures: list[KafkaError] = []
    acknowledged = 0

    def delivered(error: KafkaError | None, _message: Message) -> None:
        nonlocal acknowledged
        if error is not None:
            failures.append(error)
        else:
            acknowledged += 1

    for batch in batches:
        if "value" not in batch.schema.names:
            raise ValueError("writing to Kafka needs a value column (null values are tombstones)")
        n = batch.num_rows
        values = _column(batch, "value") or []
        keys = _column(batch, "key") or [None] * n
        headers = _column(batch, "headers") or [None] * n
        partitions = _column(batch, "partition") or [None] * n
        topics = _column(batch, "topic") or [None] * n
        stamps = _column(batch, "timestamp") or [None] * n
        for i in range(n):
            topic = kafka.topic or topics[i]
            if not topic:
                raise ValueError("no topic: set the topic option or give every row a topic")
            kwargs: dict[str, Any] = {"key": _as_bytes(keys[i]), "value": _as_bytes(values[i]),
                                      "on_delivery": delivered}
            if headers[i]:
                kwargs["headers"] = [(h["key"], _as_bytes(h["value"])) for h in headers[i]]
            if partitions[i] is not None:
                kwargs["partition"] = int(partitions[i])
            if stamps[i] is not None:
                kwargs["timestamp"] = int(stamps[i])
            while True:
                try:
                    producer.produce(topic, **kwargs)
                    break
                except BufferError:
                    producer.poll(0.05)  # the local queue is full: let deliveries drain it
            if failures:
                break
        producer.poll(0)
        if failures:
            break
    deadline = time.monotonic() + flush_timeout_s
    while producer.flush(1.0) > 0:
        if time.monotonic() > deadline:
            raise DeliveryFailed(f"{len(producer)} records still undelivered after "
                                 f"{flush_timeout_s}s")
    if failures:
        raise DeliveryFailed(f"{len(failures)} records were not written; first error: "
                             f"{failures[0]}") from KafkaException(failures[0])
    return acknowledged

