"""A PySpark Python Data Source for Kafka, over confluent-kafka: batch and streaming, read and write.

    session.dataSource.register(KafkaDataSource)
    df = (session.read.format("ssekd_kafka")
          .option("kafka.bootstrap.servers", "127.0.0.1:9092").option("topic", "items").load())

One Spark input partition per Kafka partition (a task reads one partition's offset range with its
own consumer). Offsets, in a streaming checkpoint as in options, are `{"partition": offset}`
objects. Ends of partitions come from fetched data, not from the broker's offset listing (see
`ssekd.spark.offsets`). Options are described in `ssekd/spark/README.md` and parsed in `ssekd.spark.options`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from confluent_kafka import Consumer
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from . import FORMAT
from .offsets import (
    consumer_config,
    first_offset_at,
    iter_range,
    list_partitions,
    low_offsets,
    probe_end_offsets,
    resolve,
    resolve_end,
)
from .options import (
    KafkaOptions,
    OptionError,
    SourceOptions,
    parse_sink_options,
    parse_source_options,
)
from .records import SCHEMA_DDL, arrow_schema, produce_batches, spark_schema, to_record_batch


class KafkaPartition(InputPartition):
    """The offsets [start, end) of one Kafka partition: the work of one Spark task."""

    def __init__(self, partition: int, start: int, end: int) -> None:
        super().__init__((partition, start, end))
        self.partition = partition
        self.start = start
        self.end = end


def _check_schema(schema: StructType) -> None:
    if schema != spark_schema():
        raise OptionError(f"the {FORMAT} source has a fixed schema ({SCHEMA_DDL}); "
                          f"do not pass another one")


def _discover(options: SourceOptions,
              floor: dict[int, int] | None = None) -> tuple[list[int], dict[int, int],
                                                             dict[int, int]]:
    """Partitions, log start offsets and end offsets (probed from fetched data) of the topic."""
    consumer = Consumer(consumer_config(options.kafka))
    try:
        partitions = list_partitions(consumer, options.topic)
        lows = low_offsets(consumer, options.topic, partitions)
    finally:
        consumer.close()
    ends = probe_end_offsets(options.kafka, options.topic, partitions, floor)
    return partitions, lows, ends


def _starts(options: SourceOptions, partitions: list[int], lows: dict[int, int],
            ends: dict[int, int]) -> dict[int, int]:
    if options.since_ms is not None:
        return first_offset_at(options.kafka, options.topic, partitions, options.since_ms, ends)
    return resolve(options.starting, partitions, lows, ends)


def plan_ranges(options: SourceOptions) -> dict[int, tuple[int, int]]:
    """The offsets [start, end) a batch read of `options` covers, per partition.

    Jobs call this first and pass the answer as explicit `startingOffsets`/`endingOffsets`, so
    that every read of one run (a retry, a second pass over malformed records) covers exactly
    the same records, and the report can say which.
    """
    partitions, lows, ends = _discover(options)
    starts = _starts(options, partitions, lows, ends)
    stops = resolve_end(options.ending, partitions, lows, ends)
    return {p: (min(starts[p], stops[p]), stops[p]) for p in partitions}


def offsets_option(offsets: dict[int, int]) -> str:
    """`{partition: offset}` as the JSON text the startingOffsets/endingOffsets options take."""
    return json.dumps({str(p): o for p, o in sorted(offsets.items())})


def _read(options: SourceOptions, partition: InputPartition) -> Iterator[pa.RecordBatch]:
    """Shared by both readers: runs in an executor, one consumer per task."""
    if not isinstance(partition, KafkaPartition):  # Spark's placeholder for "no partitions"
        return
    schema = arrow_schema(spark_schema())
    for messages in iter_range(options.kafka, options.topic, partition.partition,
                               partition.start, partition.end,
                               fail_on_data_loss=options.fail_on_data_loss,
                               idle_timeout_s=options.read_timeout_s):
        yield to_record_batch(messages, schema)


class KafkaBatchReader(DataSourceReader):
    """Reads each partition from its start to its end offset, both fixed when Spark plans the
    query (so every task of one query sees the same bounded range)."""

    def __init__(self, options: SourceOptions) -> None:
        self.source = options

    def partitions(self) -> Sequence[InputPartition]:
        return [KafkaPartition(p, start, end)
                for p, (start, end) in plan_ranges(self.source).items() if start < end]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self.source, partition)


def _offsets_json(offsets: dict[int, int]) -> dict[str, int]:
    return {str(p): o for p, o in sorted(offsets.items())}


def _offsets(raw: dict[str, Any]) -> dict[int, int]:
    return {int(p): int(o) for p, o in raw.items()}


def limit_rows(start: dict[int, int], end: dict[int, int], max_rows: int) -> dict[int, int]:
    """Move at most `max_rows` offsets past `start`, shared across partitions in proportion to
    what each has waiting, and always at least one offset when anything is waiting."""
    waiting = {p: max(0, end[p] - start.get(p, end[p])) for p in end}
    total = sum(waiting.values())
    if total <= max_rows:
        return dict(end)
    share = {p: (n * max_rows) // total for p, n in waiting.items()}
    spare = max_rows - sum(share.values())
    for p in sorted(waiting, key=lambda q: waiting[q] - share[q], reverse=True):
        if spare <= 0:
            break
        if waiting[p] > share[p]:
            share[p] += 1
            spare -= 1
    return {p: start.get(p, end[p]) + share[p] for p in end}


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches over offset ranges. Spark checkpoints the end of each batch, so a restarted
    query resumes exactly there; nothing is committed to Kafka.

    The instance that answers `latestOffset` lives in one driver-side Python process for the
    query's lifetime, so it keeps the last probed ends as a floor for the next probe (ends only
    grow) and the log start offsets for partitions that appear later.
    """

    def __init__(self, options: SourceOptions) -> None:
        self.source = options
        self._lows: dict[int, int] = {}
        self._ends: dict[int, int] = {}
        self._target: dict[int, int] | None = None

    def _probe(self, floor: dict[int, int] | None = None) -> dict[int, int]:
        merged = dict(self._ends)
        for p, o in (floor or {}).items():
            merged[p] = max(o, merged.get(p, o))
        _, lows, ends = _discover(self.source, merged)
        self._lows.update(lows)
        self._ends = ends
        return ends

    def initialOffset(self) -> dict[str, int]:
        ends = self._probe()
        partitions = sorted(ends)
        return _offsets_json(_starts(self.source, partitions, self._lows, ends))

    def prepareForTriggerAvailableNow(self) -> None:
        """Trigger.AvailableNow: fix the ends now; later records wait for the next run."""
        self._target = self._probe()

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.source.max_offsets_per_trigger:
            return ReadMaxRows(self.source.max_offsets_per_trigger)
        return ReadAllAvailable()

    def latestOffset(self, start: dict[str, Any] | None = None,
                     limit: ReadLimit | None = None) -> dict[str, int]:
        begin = _offsets(start) if start else {}
        ends = dict(self._target) if self._target is not None else self._probe(begin)
        for p, o in begin.items():  # never move backwards, even if a partition vanished
            ends[p] = max(o, ends.get(p, o))
        for p in ends:
            begin.setdefault(p, self._lows.get(p, 0))
        if isinstance(limit, ReadMaxRows) and start is not None:
            ends = limit_rows(begin, ends, limit.max_rows)
        return _offsets_json(ends)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        begin, stop = _offsets(start), _offsets(end)
        return [KafkaPartition(p, begin.get(p, self._lows.get(p, 0)), o)
                for p, o in sorted(stop.items()) if begin.get(p, self._lows.get(p, 0)) < o]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self.source, partition)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: progress lives in Spark's checkpoint, not in a consumer group."""


class KafkaCommitMessage(WriterCommitMessage):
    """What one write task produced."""

    def __init__(self, records: int) -> None:
        self.records = records


class KafkaBatchWriter(DataSourceArrowWriter):
    """`df.write.format("ssekd_kafka").mode("append")`: each task produces its rows and waits for
    every acknowledgement. Kafka cannot take back a record, so a failed job may leave some
    records written (at-least-once)."""

    def __init__(self, kafka: KafkaOptions) -> None:
        self.kafka = kafka

    def write(self, iterator: Iterator[pa.RecordBatch]) -> KafkaCommitMessage:
        return KafkaCommitMessage(produce_batches(self.kafka, iterator))

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Records are visible as soon as acknowledged; there is nothing left to publish."""

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Acknowledged records cannot be withdrawn from Kafka."""


class KafkaStreamWriter(DataSourceStreamArrowWriter):
    """`df.writeStream.format("ssekd_kafka")`: at-least-once, like the batch writer. A batch that
    is replayed after a crash is produced again."""

    def __init__(self, kafka: KafkaOptions) -> None:
        self.kafka = kafka

    def write(self, iterator: Iterator[pa.RecordBatch]) -> KafkaCommitMessage:
        return KafkaCommitMessage(produce_batches(self.kafka, iterator))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to publish; see KafkaBatchWriter.commit."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing can be withdrawn; see KafkaBatchWriter.abort."""


class KafkaDataSource(DataSource):
    """The data source itself: options in, readers and writers out."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> str:
        return SCHEMA_DDL

    def reader(self, schema: StructType) -> DataSourceReader:
        _check_schema(schema)
        return KafkaBatchReader(parse_source_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        _check_schema(schema)
        return KafkaStreamReader(parse_source_options(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> KafkaBatchWriter:
        if overwrite:
            raise OptionError("a Kafka topic can only be appended to: use mode('append')")
        return KafkaBatchWriter(parse_sink_options(self.options))

    def streamWriter(self, schema: StructType, overwrite: bool) -> KafkaStreamWriter:
        if overwrite:
            raise OptionError("a Kafka topic can only be appended to: use outputMode('append')")
        return KafkaStreamWriter(parse_sink_options(self.options))

