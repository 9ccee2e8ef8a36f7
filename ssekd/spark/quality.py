"""Malformed records: what they are, how they are counted, how they are reported.

A record is malformed for a job when the job cannot do its work with it:
- `null_key`: no key. A compacted topic keeps the latest value *per key*, so a keyless record
  has no place in a snapshot (Kafka itself refuses keyless records on compacted topics).
- `undecodable_key`: with `key_format="utf8"` (the default), key bytes that are not valid UTF-8.
  Snapshot keys become text in browsers (filters, event ids); a key that is not text is a
  producer bug to surface, not to spread.
- `oversized_value`: a value longer than `max_value_bytes` (default 1 MiB, Kafka's default
  `max.message.bytes`), which the snapshot topic would refuse or clients choke on.

Malformed records are never written. They are counted with Spark observed metrics (exact for a
successful query, collected in the same pass as the work: no second read of the topic), and the
report names the first of each kind by partition and offset so it can be found and fixed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pyspark.sql import Column, DataFrame, Observation
from pyspark.sql import functions as F

if TYPE_CHECKING:
    from .models import TopicModels

#: `invalid_key`/`invalid_value`: the record fails a model of the daemon's config (`--config`,
#: `ssekd.spark.models`); its `problem_detail` says which model and why, as the daemon would.
PROBLEMS = ("null_key", "undecodable_key", "oversized_value", "invalid_key", "invalid_value")
MODEL_PROBLEMS = ("invalid_key", "invalid_value")
DEFAULT_MAX_VALUE_BYTES = 1024 * 1024


@dataclass(frozen=True)
class RecordRules:
    """What a job accepts. `require_key`: jobs that group by key (snapshot) need one; an export
    does not."""

    key_format: str = "utf8"
    max_value_bytes: int = DEFAULT_MAX_VALUE_BYTES
    require_key: bool = True
    #: Models every record must pass (None: no `--config`).
    models: TopicModels | None = None

    def __post_init__(self) -> None:
        if self.key_format not in ("utf8", "binary"):
            raise ValueError(f"key_format must be utf8 or binary, got {self.key_format!r}")
        if self.max_value_bytes <= 0:
            raise ValueError(f"max_value_bytes must be > 0, got {self.max_value_bytes}")

    def problem(self, model_problem: Column | None = None) -> Column:
        """A column naming what is wrong with a record, null when nothing is. `model_problem`,
        the kind a model check found, counts only when the record has nothing else wrong."""
        checks: list[tuple[Column, str]] = []
        if self.require_key:
            checks.append((F.col("key").isNull(), "null_key"))
        if self.key_format == "utf8":
            checks.append((F.col("key").isNotNull()
                           & ~F.is_valid_utf8(F.col("key").cast("string")), "undecodable_key"))
        checks.append((F.octet_length("value") > F.lit(self.max_value_bytes), "oversized_value"))
        result: Column = (model_problem if model_problem is not None
                          else F.lit(None).cast("string"))
        for condition, name in reversed(checks):
            result = F.when(condition, F.lit(name)).otherwise(result)
        return result

    def annotate(self, records: DataFrame) -> DataFrame:
        """`records` with `problem` (see `problem`) and `problem_detail`: why a model refused
        the record (null for the other kinds, which say it all)."""
        if self.models is None or not self.models.fields:
            return (records.withColumn("problem", self.problem())
                    .withColumn("problem_detail", F.lit(None).cast("string")))
        from pyspark.sql.types import StringType, StructField, StructType

        # Arrow between the JVM and Python; the function still sees one record at a time.
        verdict = F.udf(self.models.checker(), StructType([
            StructField("kind", StringType()), StructField("detail", StringType())]),
            useArrow=True)
        checked = records.withColumn("_model", verdict(F.col("key"), F.col("value")))
        problem = self.problem(F.col("_model.kind"))
        return (checked.withColumn("problem", problem)
                .withColumn("problem_detail",
                            F.when(problem.isin(*MODEL_PROBLEMS), F.col("_model.detail")))
                .drop("_model"))


#: Snapshot defaults: keys required and UTF-8, values up to 1 MiB.
DEFAULT_RULES = RecordRules()


@dataclass
class MalformedCounts:
    """Counts per kind, and where the first record of each kind is (`"p/offset"`)."""

    counts: dict[str, int] = field(default_factory=lambda: {p: 0 for p in PROBLEMS})
    first: dict[str, str] = field(default_factory=dict)
    #: Why the first record of a kind was refused, for the model kinds.
    reasons: dict[str, str] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def add(self, other: MalformedCounts) -> None:
        for name, n in other.counts.items():
            self.counts[name] = self.counts.get(name, 0) + n
        for name, where in other.first.items():
            self.first.setdefault(name, where)
        for name, why in other.reasons.items():
            self.reasons.setdefault(name, why)

    def describe(self, fate: str = "never written") -> str:
        if not self.total:
            return "malformed: 0"
        parts = [f"{name} {n}" + (f" (first at partition/offset {self.first[name]}"
                                  + (f": {self.reasons[name]}" if name in self.reasons else "")
                                  + ")" if name in self.first else "")
                 for name, n in self.counts.items() if n]
        return f"malformed: {self.total} {fate} — " + ", ".join(parts)


def observe_records(df: DataFrame, name: str,
                    extra: Sequence[Column] = ()) -> tuple[DataFrame, Observation]:
    """Attach record and malformed counters (and `extra` aggregates) to a frame that has a
    `problem` column."""
    observation = Observation(name)
    metrics = [F.count(F.lit(1)).alias("records"), *extra]
    where = ["partition", "offset"] + (["problem_detail"] if "problem_detail" in df.columns
                                       else [])
    for problem in PROBLEMS:
        hit = F.col("problem") == F.lit(problem)
        metrics.append(F.count_if(hit).alias(problem))
        # (partition, offset) come first, so the smallest struct is the first record
        metrics.append(F.min(F.when(hit, F.struct(*where))).alias(f"first_{problem}"))
    return df.observe(observation, *metrics), observation


def malformed_from(metrics: dict[str, Any]) -> MalformedCounts:
    counts = MalformedCounts()
    for problem in PROBLEMS:
        counts.counts[problem] = int(metrics.get(problem) or 0)
        first = metrics.get(f"first_{problem}")
        if first is not None:
            counts.first[problem] = f"{first['partition']}/{first['offset']}"
            detail = first.asDict().get("problem_detail")
            if detail:
                counts.reasons[problem] = str(detail)
    return counts
