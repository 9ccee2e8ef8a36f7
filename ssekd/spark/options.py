"""Options of the Kafka data source, parsed once on the driver into plain, picklable values.

Spark hands a data source a case-insensitive dict of strings. Parsing it in one place gives every
reader and writer the same meaning for each option and the same error messages, and lets bad
input fail while the query is planned rather than inside an executor.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal, TypeAlias

#: A start or end position: symbolic, or one offset per partition (-2 earliest, -1 latest,
#: as in Spark's Kafka connector).
OffsetSpec: TypeAlias = Literal["earliest", "latest"] | dict[int, int]

EARLIEST = -2
LATEST = -1

#: Consumer settings the data source relies on; a `kafka.*` option may still override them.
#: A short fetch wait matters: the end of a partition is learned from a fetch that comes back
#: empty, and the broker holds such a fetch for up to `fetch.wait.max.ms`.
CONSUMER_DEFAULTS: dict[str, str] = {
    "fetch.wait.max.ms": "10",
    "fetch.queue.backoff.ms": "5",
    "max.partition.fetch.bytes": str(8 * 1024 * 1024),
    "socket.nagle.disable": "true",
}

#: Producer settings: idempotence keeps the per-partition order of a retried batch; murmur2 is
#: the Java client's partitioner, so a keyed record lands where a Java producer would put it.
PRODUCER_DEFAULTS: dict[str, str] = {
    "enable.idempotence": "true",
    "partitioner": "murmur2_random",
    "linger.ms": "5",
    "batch.num.messages": "10000",
    "queue.buffering.max.messages": "200000",
}


class OptionError(ValueError):
    """An option of the data source or of a job is missing or malformed."""


@dataclass(frozen=True)
class KafkaOptions:
    """What every reader and writer needs: the topic and the librdkafka settings."""

    topic: str | None
    config: dict[str, str] = field(default_factory=dict)

    @property
    def bootstrap(self) -> str:
        return self.config["bootstrap.servers"]


@dataclass(frozen=True)
class SourceOptions:
    """Reader options. `since_ms` wins over `starting` when both are given."""

    kafka: KafkaOptions
    starting: OffsetSpec
    ending: OffsetSpec
    since_ms: int | None
    max_offsets_per_trigger: int | None
    fail_on_data_loss: bool
    read_timeout_s: float

    @property
    def topic(self) -> str:
        assert self.kafka.topic is not None  # checked by parse_source_options
        return self.kafka.topic


def kafka_options(options: Mapping[str, str], *, topic_required: bool) -> KafkaOptions:
    """`kafka.*` options become librdkafka settings (prefix removed), as in Spark's connector."""
    config: dict[str, str] = {}
    topic: str | None = None
    for name, value in options.items():
        lname = name.lower()
        if lname.startswith("kafka."):
            config[lname[len("kafka."):]] = str(value)
        elif lname == "topic":
            topic = str(value)
    if "bootstrap.servers" not in config:
        raise OptionError("option kafka.bootstrap.servers is required (host:port[,host:port])")
    if topic_required and not topic:
        raise OptionError("option topic is required")
    return KafkaOptions(topic, config)


def parse_offset_spec(text: str | None, default: OffsetSpec, what: str) -> OffsetSpec:
    """`earliest`, `latest`, or a JSON object `{"0": 42, "1": -2}` (partition -> offset)."""
    if text is None or text.strip() == "":
        return default
    value = text.strip()
    if value.lower() in ("earliest", "latest"):
        return "earliest" if value.lower() == "earliest" else "latest"
    try:
        raw = json.loads(value)
    except json.JSONDecodeError as e:
        raise OptionError(f"{what}: expected earliest, latest or JSON {{partition: offset}}, "
                          f"got {text!r}") from e
    if not isinstance(raw, dict):
        raise OptionError(f"{what}: expected a JSON object {{partition: offset}}, got {text!r}")
    spec: dict[int, int] = {}
    for partition, offset in raw.items():
        try:
            p = int(partition)
        except ValueError as e:
            raise OptionError(f"{what}: partition {partition!r} is not an integer") from e
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < EARLIEST:
            raise OptionError(f"{what}: offset of partition {p} must be an integer >= -2, "
                              f"got {offset!r}")
        spec[p] = offset
    return spec


def parse_since(text: str | None) -> int | None:
    """Epoch milliseconds, or ISO-8601 (a time without a zone is UTC), like ssekd's `since`."""
    if text is None or text.strip() == "":
        return None
    value = text.strip()
    if value.lstrip("-").isdigit():
        return int(value)
    try:
        moment = datetime.fromisoformat(value)
    except ValueError as e:
        raise OptionError(f"since: expected epoch milliseconds or ISO-8601, got {text!r}") from e
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def _bool(text: str | None, default: bool, what: str) -> bool:
    if text is None:
        return default
    if text.strip().lower() in ("true", "1", "yes"):
        return True
    if text.strip().lower() in ("false", "0", "no"):
        return False
    raise OptionError(f"{what}: expected true or false, got {text!r}")


def _positive(text: str | None, what: str) -> float | None:
    if text is None:
        return None
    try:
        number = float(text)
    except ValueError as e:
        raise OptionError(f"{what}: expected a number, got {text!r}") from e
    if number <= 0:
        raise OptionError(f"{what}: must be > 0, got {text!r}")
    return number


def parse_source_options(options: Mapping[str, str], *, streaming: bool) -> SourceOptions:
    """Reader options; batch reads default to the whole topic, streams to new records only
    (Spark's Kafka connector defaults)."""
    lower = {k.lower(): str(v) for k, v in options.items()}
    kafka = kafka_options(options, topic_required=True)
    since = lower.get("since", lower.get("startingtimestamp"))
    max_per_trigger = _positive(lower.get("maxoffsetspertrigger"), "maxOffsetsPerTrigger")
    ending = parse_offset_spec(lower.get("endingoffsets"), "latest", "endingOffsets")
    if streaming and "endingoffsets" in lower:
        raise OptionError("endingOffsets applies to batch reads only")
    return SourceOptions(
        kafka=kafka,
        starting=parse_offset_spec(lower.get("startingoffsets"),
                                   "latest" if streaming else "earliest", "startingOffsets"),
        ending=ending,
        since_ms=parse_since(since),
        max_offsets_per_trigger=int(max_per_trigger) if max_per_trigger else None,
        fail_on_data_loss=_bool(lower.get("failondataloss"), True, "failOnDataLoss"),
        read_timeout_s=(_positive(lower.get("readtimeoutms"), "readTimeoutMs") or 30_000.0) / 1000,
    )


def parse_sink_options(options: Mapping[str, str]) -> KafkaOptions:
    """Writer options: the topic may instead come from a `topic` column of each row."""
    return kafka_options(options, topic_required=False)
