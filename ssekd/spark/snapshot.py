"""The snapshot job: a change topic (`items`) folded into its compacted snapshot topic
(`items-snapshots`), the current state ssekd serves before live changes.

What the snapshot holds is what Kafka's log compaction would leave of the change topic: for each
key of each partition, the record with the highest offset (value, headers and timestamp), written
to the same partition number; a key whose latest change has a null value is deleted and becomes a
tombstone. Offsets only order records within a partition, so a key produced to two partitions is
two keys, exactly as compaction treats it.

Reruns are idempotent: the batch job reads the snapshot topic's current state and writes only keys
whose value (or headers) differ from it, so a rerun over unchanged input writes nothing. Keys the
change topic no longer holds (retention) are left alone. The streaming job keeps its position in
a Spark checkpoint; its first micro-batch of each run is compared with the snapshot topic the same
way, so a batch replayed after a crash writes nothing twice, and later micro-batches write each
key's latest change once.

Malformed records (see `ssekd.spark.quality`) are counted and reported, never written. A key whose
*latest* record is malformed is held: the snapshot keeps what it had, rather than an older value
presented as current.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql import functions as F

from . import FORMAT
from .kafka_source import offsets_option, plan_ranges
from .options import KafkaOptions, OptionError, parse_source_options
from .quality import DEFAULT_RULES, MalformedCounts, RecordRules, malformed_from, observe_records
from .topics import ensure_compacted_topic, partition_count

SNAPSHOT_SUFFIX = "-snapshots"


def snapshot_topic_for(source: str) -> str:
    """`items` -> `items-snapshots`, the name ssekd's examples use."""
    return source + SNAPSHOT_SUFFIX


@dataclass
class SnapshotReport:
    """What a run did. In streaming mode, counts add up over micro-batches (`keys` then counts a
    key once per micro-batch that changed it)."""

    source: str
    target: str
    records: int = 0
    keys: int = 0
    deleted: int = 0
    held: int = 0
    written: int = 0
    tombstones_written: int = 0
    batches: int = 0
    seconds: float = 0.0
    offsets: dict[int, tuple[int, int]] = field(default_factory=dict)
    malformed: MalformedCounts = field(default_factory=MalformedCounts)
    #: The models records were checked against (`--config`), described; None: not asked.
    models: list[str] | None = None

    @property
    def unchanged(self) -> int:
        """Keys whose snapshot value was already right (compared, then not written)."""
        return self.keys - self.held - self.written

    @property
    def records_per_second(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0

    def add(self, other: SnapshotReport) -> None:
        for name in ("records", "keys", "deleted", "held", "written", "tombstones_written",
                     "batches"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for p, (start, end) in other.offsets.items():
            first, _ = self.offsets.get(p, (start, end))
            self.offsets[p] = (min(first, start), end)
        self.malformed.add(other.malformed)

    def describe(self) -> str:
        ranges = " ".join(f"{p}:[{s},{e})" for p, (s, e) in sorted(self.offsets.items()))
        lines = [
            f"snapshot {self.source} -> {self.target}: {self.records} records in "
            f"{self.seconds:.1f} s ({self.records_per_second:,.0f} records/s)"
            + (f", {self.batches} micro-batches" if self.batches > 1 else "")
            + (f", offsets {ranges}" if ranges else ""),
            (f"  keys {self.keys} ({self.deleted} deleted): written {self.written} "
             f"({self.tombstones_written} tombstones), unchanged {self.unchanged}, "
             f"held {self.held}"),
            f"  {self.malformed.describe()}",
        ]
        if self.models is not None:
            lines.append("  models: " + ("; ".join(self.models) if self.models else
                                         f"none in the config for {self.source} or "
                                         f"{self.target}"))
        return "\n".join(lines)

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["offsets"] = {str(p): list(r) for p, r in sorted(self.offsets.items())}
        data["unchanged"] = self.unchanged
        data["seconds"] = round(self.seconds, 3)
        data["records_per_second"] = round(self.records_per_second, 1)
        data["malformed"] = {"total": self.malformed.total, **self.malformed.counts,
                             "first": self.malformed.first, "reasons": self.malformed.reasons}
        return data


def reader_options(kafka: KafkaOptions, topic: str) -> dict[str, str]:
    """Data source options for `topic`, carrying every librdkafka setting of `kafka`."""
    options = {f"kafka.{k}": v for k, v in kafka.config.items()}
    options["topic"] = topic
    return options


def latest_per_key(records: DataFrame) -> DataFrame:
    """(partition, key, last): `last` is the struct of the record with the highest offset."""
    last = F.max_by(F.struct("value", "headers", "timestamp", "offset", "problem"), "offset")
    return (records.where(F.col("key").isNotNull())
            .groupBy("partition", "key").agg(last.alias("last")))


def current_state(session: SparkSession, kafka: KafkaOptions, target: str) -> DataFrame:
    """What a reader of the snapshot topic sees now: the latest record per (partition, key),
    whether or not the broker has compacted the log yet."""
    options = parse_source_options(reader_options(kafka, target), streaming=False)
    ranges = plan_ranges(options)
    snapshot = (session.read.format(FORMAT).options(**reader_options(kafka, target))
                .option("startingOffsets", offsets_option({p: s for p, (s, _) in ranges.items()}))
                .option("endingOffsets", offsets_option({p: e for p, (_, e) in ranges.items()}))
                .load().withColumn("problem", F.lit(None).cast("string")))
    return latest_per_key(snapshot).select(
        "partition", "key",
        F.col("last.value").alias("current_value"),
        F.col("last.headers").alias("current_headers"),
        F.lit(True).alias("present"))


@dataclass(frozen=True)
class SnapshotJob:
    """One source -> target pair with its rules; `kafka.topic` is unused (each read names its
    own)."""

    kafka: KafkaOptions
    source: str
    target: str
    rules: RecordRules = DEFAULT_RULES

    def prepare(self) -> int:
        """Create the snapshot topic if needed; returns the partition count both share."""
        partitions = partition_count(self.kafka, self.source)
        if partitions is None:
            raise OptionError(f"source topic {self.source!r} does not exist")
        ensure_compacted_topic(self.kafka, self.target, partitions)
        return partitions

    def run_pass(self, session: SparkSession, changes: DataFrame, *, diff: bool,
                 name: str) -> SnapshotReport:
        """Fold `changes` (rows of the data source) into the snapshot topic: one Spark job."""
        records, record_metrics = observe_records(self.rules.annotate(changes),
                                                  f"{name}-records")
        key_metrics = Observation(f"{name}-keys")
        latest = latest_per_key(records).observe(
            key_metrics,
            F.count(F.lit(1)).alias("keys"),
            F.count_if(F.col("last.problem").isNull() & F.col("last.value").isNull())
            .alias("deleted"),
            F.count_if(F.col("last.problem").isNotNull()).alias("held"))
        desired = latest.where(F.col("last.problem").isNull()).select(
            "partition", "key", "last.value", "last.headers", "last.timestamp")
        if diff:
            current = current_state(session, self.kafka, self.target)
            desired = (desired.join(current, ["partition", "key"], "left")
                       .where(F.col("present").isNull()
                              | ~F.col("value").eqNullSafe(F.col("current_value"))
                              | ~F.col("headers").eqNullSafe(F.col("current_headers")))
                       .select("partition", "key", "value", "headers", "timestamp"))
        write_metrics = Observation(f"{name}-written")
        out = desired.observe(write_metrics, F.count(F.lit(1)).alias("written"),
                              F.count_if(F.col("value").isNull()).alias("tombstones"))
        (out.write.format(FORMAT).mode("append")
         .options(**reader_options(self.kafka, self.target)).save())
        seen, keys, written = record_metrics.get, key_metrics.get, write_metrics.get
        return SnapshotReport(
            source=self.source, target=self.target, batches=1,
            records=int(seen.get("records") or 0),
            keys=int(keys.get("keys") or 0), deleted=int(keys.get("deleted") or 0),
            held=int(keys.get("held") or 0),
            written=int(written.get("written") or 0),
            tombstones_written=int(written.get("tombstones") or 0),
            malformed=malformed_from(seen))


def run_snapshot(session: SparkSession, kafka_config: Mapping[str, str], source: str,
                 target: str | None = None, *, rules: RecordRules = DEFAULT_RULES,
                 starting: str = "earliest", since: str | None = None) -> SnapshotReport:
    """Batch: fold the change topic, from `starting` (or `since`) to its current end, into the
    snapshot topic, writing only what differs from it."""
    began = time.monotonic()
    kafka = KafkaOptions(None, dict(kafka_config))
    job = SnapshotJob(kafka, source, target or snapshot_topic_for(source), rules)
    job.prepare()
    asked = reader_options(kafka, source) | {"startingOffsets": starting}
    if since is not None:
        asked["since"] = since
    ranges = plan_ranges(parse_source_options(asked, streaming=False))
    changes = (session.read.format(FORMAT).options(**reader_options(kafka, source))
               .option("startingOffsets", offsets_option({p: s for p, (s, _) in ranges.items()}))
               .option("endingOffsets", offsets_option({p: e for p, (_, e) in ranges.items()}))
               .load())
    report = job.run_pass(session, changes, diff=True, name=f"snapshot-{source}")
    report.offsets = ranges
    report.models = rules.models.describe() if rules.models is not None else None
    report.seconds = time.monotonic() - began
    return report


class _MicroBatches:
    """The foreachBatch function: runs in the driver's Python process, so it can keep the
    running report and know which micro-batch is the first of this run."""

    def __init__(self, job: SnapshotJob, report: SnapshotReport,
                 log: Callable[[str], None]) -> None:
        self.job = job
        self.report = report
        self.log = log
        self.first = True

    def __call__(self, changes: DataFrame, batch_id: int) -> None:
        part = self.job.run_pass(changes.sparkSession, changes, diff=self.first,
                                 name=f"snapshot-{self.job.source}-{batch_id}")
        self.first = False
        self.report.add(part)
        if part.records or part.malformed.total:
            self.log(f"batch {batch_id}: {part.records} records, {part.written} written "
                     f"({part.tombstones_written} tombstones), {part.malformed.describe()}")


def _progress_offsets(progress: Mapping[str, Any] | None, which: str) -> dict[int, int]:
    if not progress or not progress.get("sources"):
        return {}
    raw = progress["sources"][0].get(which)
    if isinstance(raw, str):
        raw = json.loads(raw)
    return {int(p): int(o) for p, o in (raw or {}).items()}


def run_snapshot_stream(session: SparkSession, kafka_config: Mapping[str, str], source: str,
                        target: str | None = None, *, checkpoint: str,
                        rules: RecordRules = DEFAULT_RULES, starting: str = "earliest",
                        since: str | None = None, available_now: bool = False,
                        interval_s: float = 1.0, max_offsets_per_trigger: int | None = None,
                        should_stop: Callable[[], bool] = lambda: False,
                        log: Callable[[str], None] | None = None) -> SnapshotReport:
    """Streaming: keep the snapshot topic following the change topic.

    `starting`/`since` apply only to a new checkpoint; an existing one resumes where it stopped.
    With `available_now`, process what is there now and return; otherwise run micro-batches
    every `interval_s` until `should_stop()` (checked every second) says so.
    """
    began = time.monotonic()
    kafka = KafkaOptions(None, dict(kafka_config))
    job = SnapshotJob(kafka, source, target or snapshot_topic_for(source), rules)
    job.prepare()
    report = SnapshotReport(source=job.source, target=job.target,
                            models=rules.models.describe() if rules.models is not None else None)
    asked = reader_options(kafka, source) | {"startingOffsets": starting}
    if since is not None:
        asked["since"] = since
    initial = {p: s for p, (s, _) in plan_ranges(parse_source_options(asked,
                                                                      streaming=False)).items()}
    handler = _MicroBatches(job, report, log or (lambda line: print(line, file=sys.stderr)))
    reader = (session.readStream.format(FORMAT).options(**reader_options(kafka, source))
              .option("startingOffsets", starting))
    if since is not None:
        reader = reader.option("since", since)
    if max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets_per_trigger))
    writer = (reader.load().writeStream.foreachBatch(handler)
              .option("checkpointLocation", checkpoint))
    writer = (writer.trigger(availableNow=True) if available_now
              else writer.trigger(processingTime=f"{interval_s} seconds"))
    query = writer.start()
    try:
        while query.isActive and not should_stop():
            query.awaitTermination(1)
    finally:
        if query.isActive:
            query.stop()
    failure = query.exception()
    if failure is not None:
        raise failure
    progress = [p for p in query.recentProgress if p["numInputRows"]]
    if progress:
        # A new checkpoint's first micro-batch has no start offset in its progress: it began
        # where the starting options pointed when the query started.
        starts = _progress_offsets(progress[0], "startOffset") or initial
        ends = _progress_offsets(progress[-1], "endOffset")
        report.offsets = {p: (starts.get(p, e), e) for p, e in ends.items()}
    report.seconds = time.monotonic() - began
    return report
