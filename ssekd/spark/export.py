"""The export job: a topic's records to Parquet, partitioned by date (`<output>/date=YYYY-MM-DD/`).

Every column of the data source is kept as it came from Kafka (key and value as bytes, headers as
a list of key/value structs, the record timestamp as a Parquet TIMESTAMP_MICROS in UTC), so
the files read back with pyarrow, pandas or Spark into the same rows. The date is the record
timestamp's calendar date in `time_zone` (UTC unless asked otherwise), never the session's zone:
a job's output should not depend on where the driver runs.

Malformed records (`ssekd.spark.quality`; for an export, only what was asked for: oversized values,
and keys that are not UTF-8 with `key_format="utf8"`) are kept out of the dataset and written to
`<output>/_malformed/` with a `problem` column. Readers skip folders starting with `_`, and
nothing is dropped.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from . import FORMAT
from .kafka_source import offsets_option, plan_ranges
from .options import KafkaOptions, OptionError, parse_source_options
from .quality import MalformedCounts, RecordRules, malformed_from, observe_records
from .snapshot import reader_options

#: Exports keep any key bytes and keyless records unless told otherwise.
EXPORT_RULES = RecordRules(key_format="binary", require_key=False)
MALFORMED_FOLDER = "_malformed"
MODES = ("errorifexists", "overwrite", "append", "ignore")


@dataclass
class ExportReport:
    topic: str
    output: str
    records: int = 0
    written: int = 0
    first_timestamp: datetime | None = None
    last_timestamp: datetime | None = None
    seconds: float = 0.0
    offsets: dict[int, tuple[int, int]] = field(default_factory=dict)
    malformed: MalformedCounts = field(default_factory=MalformedCounts)

    @property
    def records_per_second(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0

    def describe(self) -> str:
        ranges = " ".join(f"{p}:[{s},{e})" for p, (s, e) in sorted(self.offsets.items()))
        span = (f", timestamps {self.first_timestamp:%Y-%m-%d %H:%M:%S} .. "
                f"{self.last_timestamp:%Y-%m-%d %H:%M:%S} UTC"
                if self.first_timestamp and self.last_timestamp else "")
        return "\n".join([
            (f"export {self.topic} -> {self.output}: {self.records} records in "
             f"{self.seconds:.1f} s ({self.records_per_second:,.0f} records/s), "
             f"offsets {ranges}"),
            f"  written {self.written}{span}",
            "  " + self.malformed.describe(
                f"kept apart in {self.output.rstrip('/')}/{MALFORMED_FOLDER}"),
        ])

    def as_dict(self) -> dict[str, Any]:
        return {
            "topic": self.topic, "output": self.output, "records": self.records,
            "written": self.written, "seconds": round(self.seconds, 3),
            "records_per_second": round(self.records_per_second, 1),
            "first_timestamp": self.first_timestamp.isoformat() if self.first_timestamp else None,
            "last_timestamp": self.last_timestamp.isoformat() if self.last_timestamp else None,
            "offsets": {str(p): list(r) for p, r in sorted(self.offsets.items())},
            "malformed": {"total": self.malformed.total, **self.malformed.counts,
                          "first": self.malformed.first},
        }


def date_in_zone(timestamp: Column, zone: str, session_zone: str) -> Column:
    """The calendar date of an instant in `zone`, whatever the session's time zone.

    Casting to TIMESTAMP_NTZ gives the wall-clock time in the session zone; convert_timezone
    moves that wall clock to `zone` (daylight saving included), and its date is the answer.
    """
    wall = F.convert_timezone(F.lit(session_zone), F.lit(zone), timestamp.cast("timestamp_ntz"))
    return F.to_date(wall)


def _utc(moment: datetime | None) -> datetime | None:
    """PySpark hands timestamps back as naive local times of this process: make them UTC."""
    return moment.astimezone(UTC) if moment is not None else None


def _read(session: SparkSession, kafka: KafkaOptions, topic: str,
          ranges: dict[int, tuple[int, int]], rules: RecordRules) -> DataFrame:
    return (session.read.format(FORMAT).options(**reader_options(kafka, topic))
            .option("startingOffsets", offsets_option({p: s for p, (s, _) in ranges.items()}))
            .option("endingOffsets", offsets_option({p: e for p, (_, e) in ranges.items()}))
            .load().withColumn("problem", rules.problem()))


def run_export(session: SparkSession, kafka_config: Mapping[str, str], topic: str, output: str,
               *, starting: str = "earliest", ending: str = "latest", since: str | None = None,
               mode: str = "errorifexists", time_zone: str = "UTC",
               rules: RecordRules = EXPORT_RULES) -> ExportReport:
    """Export `topic` from `starting` (or `since`) to `ending` into Parquet at `output`.

    `mode` is Spark's save mode for the whole output folder: `errorifexists` (default, a rerun
    fails rather than mixing runs), `overwrite`, `append` or `ignore`.
    """
    if mode not in MODES:
        raise OptionError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    began = time.monotonic()
    kafka = KafkaOptions(None, dict(kafka_config))
    asked = reader_options(kafka, topic) | {"startingOffsets": starting, "endingOffsets": ending}
    if since is not None:
        asked["since"] = since
    ranges = plan_ranges(parse_source_options(asked, streaming=False))
    records, seen = observe_records(
        _read(session, kafka, topic, ranges, rules), f"export-{topic}",
        [F.min("timestamp").alias("first_timestamp"), F.max("timestamp").alias("last_timestamp")])
    session_zone = session.conf.get("spark.sql.session.timeZone") or "UTC"
    good = (records.where(F.col("problem").isNull()).drop("problem")
            .withColumn("date", date_in_zone(F.col("timestamp"), time_zone, session_zone)))
    stamp_key = "spark.sql.parquet.outputTimestampType"
    previous = session.conf.get(stamp_key)
    # INT96, Spark's default, is deprecated in Parquet and read back as nanoseconds elsewhere.
    session.conf.set(stamp_key, "TIMESTAMP_MICROS")
    try:
        good.write.mode(mode).partitionBy("date").parquet(output)
        metrics = seen.get
        malformed = malformed_from(metrics)
        if malformed.total:
            # Only now, and only when there is something to keep, read the same offset ranges a
            # second time for the malformed records alone.
            bad = _read(session, kafka, topic, ranges, rules).where(F.col("problem").isNotNull())
            bad.write.mode("overwrite" if mode == "overwrite" else "append").parquet(
                f"{output.rstrip('/')}/{MALFORMED_FOLDER}")
    finally:
        if previous is None:
            session.conf.unset(stamp_key)
        else:
            session.conf.set(stamp_key, previous)
    return ExportReport(
        topic=topic, output=output, records=int(metrics.get("records") or 0),
        written=int(metrics.get("records") or 0) - malformed.total,
        first_timestamp=_utc(metrics.get("first_timestamp")),
        last_timestamp=_utc(metrics.get("last_timestamp")),
        seconds=time.monotonic() - began, offsets=ranges, malformed=malformed)
