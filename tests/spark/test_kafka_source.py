"""The Kafka data source against the real dev broker: what a Spark user reads and writes."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from pyspark.sql import SparkSession

from ssekd.dev.broker import Broker
from ssekd.spark import FORMAT
from ssekd.spark.kafka_source import KafkaDataSource, limit_rows
from ssekd.spark.offsets import probe_end_offsets
from ssekd.spark.options import KafkaOptions, OptionError, parse_since, parse_source_options
from tests.support.kafka_records import Change, Record, create_topic, produce, read_topic

pytestmark = pytest.mark.spark

T0 = 1_700_000_000_000  # 2023-11-14T22:13:20Z


def as_records(rows: list) -> list[Record]:  # type: ignore[type-arg]
    return sorted(
        (Record(r["partition"], r["offset"], r["key"], r["value"],
                [(h["key"], h["value"]) for h in r["headers"]],
                int(r["timestamp"].timestamp() * 1000))
         for r in rows),
        key=lambda r: (r.partition, r.offset))


def load(session: SparkSession, broker: Broker, topic: str, **options: str):  # type: ignore[no-untyped-def]
    reader = (session.read.format(FORMAT).option("kafka.bootstrap.servers", broker.bootstrap)
              .option("kafka.fetch.wait.max.ms", "10").option("topic", topic))
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def sample_changes(n: int) -> list[Change]:
    """Keys, keyless records, tombstones, repeated and ordered headers, explicit timestamps."""
    changes = []
    for i in range(n):
        key = None if i % 17 == 0 else f"k{i % 40}".encode()
        value = None if i % 11 == 0 else f"v{i}".encode()
        headers = [("etag", f"e{i}".encode()), ("x", b"1"), ("etag", None)] if i % 3 else None
        changes.append(Change(key, value, headers, partition=i % 3, timestamp_ms=T0 + i * 1000))
    return changes


@pytest.mark.broker
def test_batch_read_returns_every_record_as_the_broker_holds_it(
        spark_session: SparkSession, spark_broker: Broker, topic_name: str) -> None:
    create_topic(spark_broker.bootstrap, topic_name, 3)
    produced = produce(spark_broker.bootstrap, topic_name, sample_changes(3000))
    df = load(spark_session, spark_broker, topic_name)
    assert df.columns == ["key", "value", "headers", "topic", "partition", "offset", "timestamp"]
    rows = df.collect()
    assert {r["topic"] for r in rows} == {topic_name}
    assert as_records(rows) == produced
    # One Spark input partition per Kafka partition.
    assert df.rdd.getNumPartitions() == 3


@pytest.mark.broker
def test_end_offsets_come_from_fetched_data_not_the_listed_watermark(
        spark_broker: Broker, topic_name: str) -> None:
    create_topic(spark_broker.bootstrap, topic_name, 2)
    # Produced as a few large batches: tansu lists the start of the last batch as its end.
    produced = produce(spark_broker.bootstrap, topic_name,
                       [Change(b"k", b"v", partition=i % 2) for i in range(5000)])
    true_ends = {p: max(r.offset for r in produced if r.partition == p) + 1 for p in (0, 1)}
    kafka = KafkaOptions(topic_name, {"bootstrap.servers": spark_broker.bootstrap})
    assert probe_end_offsets(kafka, topic_name, [0, 1]) == true_ends
    # A floor (a previous answer) is a valid place to start, never a reason to stop short.
    assert probe_end_offsets(kafka, topic_name, [0, 1], floor={0: 10, 1: 2500}) == true_ends
    consumer = Consumer({"bootstrap.servers": spark_broker.bootstrap, "group.id": "probe-test"})
    listed = {p: consumer.get_watermark_offsets(TopicPartition(topic_name, p), timeout=5)[1]
              for p in (0, 1)}
    consumer.close()
    assert all(listed[p] <= true_ends[p] for p in (0, 1))  # never more; on tansu often less


@pytest.mark.broker
def test_starting_and_ending_offsets_bound_the_read(
        spark_session: SparkSession, spark_broker: Broker, topic_name: str) -> None:
    create_topic(spark_broker.bootstrap, topic_name, 3)
    produced = produce(spark_broker.bootstrap, topic_name, sample_changes(300))
    rows = load(spark_session, spark_broker, topic_name,
                startingOffsets='{"0": 10, "1": -2, "2": 95}',
                endingOffsets='{"0": 20, "1": 5, "2": -1}').collect()
    expected = [r for r in produced
                if (r.partition == 0 and 10 <= r.offset < 20)
                or (r.partition == 1 and r.offset < 5)
                or (r.partition == 2 and r.offset >= 95)]
    assert as_records(rows) == expected
    assert load(spark_session, spark_broker, topic_name, startingOffsets="latest").count() == 0


@pytest.mark.broker
def test_since_starts_at_the_first_record_at_or_after_that_time(
        spark_session: SparkSession, spark_broker: Broker, topic_name: str) -> None:
    create_topic(spark_broker.bootstrap, topic_name, 3)
    produced = produce(spark_broker.bootstrap, topic_name, sample_changes(300))
    since = T0 + 200 * 1000
    iso = datetime.fromtimestamp(since / 1000, UTC).isoformat()
    for text in (str(since), iso):
        rows = load(spark_session, spark_broker, topic_name, since=text).collect()
        assert as_records(rows) == [r for r in produced if r.timestamp_ms >= since]


@pytest.mark.broker
def test_writer_produces_keys_headers_tombstones_and_partitions(
        spark_session: SparkSession, spark_broker: Broker, topic_name: str) -> None:
    create_topic(spark_broker.bootstrap, topic_name, 3)
    rows = [
        (b"a", b"1", [("etag", b"x"), ("etag", b"y")], 2, datetime(2024, 1, 2, tzinfo=UTC)),
        (b"b", None, [], 0, None),
        (None, b"keyless", None, 1, None),
        (b"\xff\x00", b"\x00binary", [("h", None)], 2, None),
    ]
    df = spark_session.createDataFrame(
        rows, "key BINARY, value BINARY, headers ARRAY<STRUCT<key: STRING, value: BINARY>>, "
              "partition INT, timestamp TIMESTAMP")
    (df.write.format(FORMAT).mode("append").option("kafka.bootstrap.servers",
                                                   spark_broker.bootstrap)
     .option("topic", topic_name).save())
    got = {r.key: r for r in read_topic(spark_broker.bootstrap, topic_name)}
    assert len(got) == 4
    assert got[b"a"].value == b"1" and got[b"a"].headers == [("etag", b"x"), ("etag", b"y")]
    assert got[b"a"].partition == 2
    assert got[b"a"].timestamp_ms == int(datetime(2024, 1, 2, tzinfo=UTC).timestamp() * 1000)
    assert got[b"b"].value is None and got[b"b"].partition == 0
    assert got[None].value == b"keyless" and got[None].partition == 1
    assert got[b"\xff\x00"].value == b"\x00binary" and got[b"\xff\x00"].headers == [("h", None)]
    # String columns are written as UTF-8; without a partition column the partitioner decides.
    text = spark_session.createDataFrame([("k", "héllo")], "key STRING, value STRING")
    (text.write.format(FORMAT).mode("append")
     .option("kafka.bootstrap.servers", spark_broker.bootstrap).option("topic", topic_name)
     .save())
    assert {r.value for r in read_topic(spark_broker.bootstrap, topic_name) if r.key == b"k"} \
        == {"héllo".encode()}
    with pytest.raises(Exception, match="appended"):
        (text.write.format(FORMAT).mode("overwrite")
         .option("kafka.bootstrap.servers", spark_broker.bootstrap).option("topic", topic_name)
         .save())


@pytest.mark.broker
def test_stream_resumes_from_its_checkpoint_and_delivers_each_record_once(
        spark_session: SparkSession, spark_broker: Broker, topic_name: str,
        tmp_path: Path) -> None:
    source, sink = topic_name, topic_name + "-copy"
    create_topic(spark_broker.bootstrap, source, 3)
    create_topic(spark_broker.bootstrap, sink, 3)
    first = produce(spark_broker.bootstrap, source, sample_changes(900))

    def copy_available() -> int:
        stream = (spark_session.readStream.format(FORMAT)
                  .option("kafka.bootstrap.servers", spark_broker.bootstrap)
                  .option("kafka.fetch.wait.max.ms", "10")
                  .option("topic", source).option("startingOffsets", "earliest")
                  .option("maxOffsetsPerTrigger", "400").load())
        query = (stream.select("key", "value", "headers", "partition").writeStream
                 .format(FORMAT).option("kafka.bootstrap.servers", spark_broker.bootstrap)
                 .option("topic", sink)
                 .option("checkpointLocation", str(tmp_path / "checkpoint"))
                 .trigger(availableNow=True).start())
        query.awaitTermination(120)
        assert query.exception() is None
        return len([p for p in query.recentProgress if p["numInputRows"]])

    assert copy_available() >= 3  # 900 records at most 400 per micro-batch
    second = produce(spark_broker.bootstrap, source,
                     [Change(f"new{i}".encode(), b"n", partition=i % 3) for i in range(150)])
    assert copy_available() >= 1
    copied = read_topic(spark_broker.bootstrap, sink)

    def key(r: Any) -> tuple[Any, ...]:
        return (r.partition, r.key, r.value, tuple(r.headers))
    assert Counter(map(key, copied)) == Counter(map(key, first + second))


def test_options_are_checked_when_the_query_is_planned() -> None:
    base = {"kafka.bootstrap.servers": "127.0.0.1:1", "topic": "t"}
    with pytest.raises(OptionError, match="bootstrap"):
        parse_source_options({"topic": "t"}, streaming=False)
    with pytest.raises(OptionError, match="startingOffsets"):
        parse_source_options(base | {"startingOffsets": "[1]"}, streaming=False)
    with pytest.raises(OptionError, match="since"):
        parse_source_options(base | {"since": "yesterday"}, streaming=False)
    with pytest.raises(OptionError, match="batch"):
        parse_source_options(base | {"endingOffsets": "latest"}, streaming=True)
    assert parse_since("2023-11-14T22:13:20Z") == T0
    assert parse_since("2023-11-14T22:13:20") == T0
    parsed = parse_source_options(base | {"STARTINGOFFSETS": '{"1": 7}', "kafka.acks": "all"},
                                  streaming=True)
    assert parsed.starting == {1: 7}
    assert parsed.kafka.config == {"bootstrap.servers": "127.0.0.1:1", "acks": "all"}
    assert KafkaDataSource.name() == FORMAT


def test_read_limit_spreads_over_partitions_and_always_moves() -> None:
    start, end = {0: 0, 1: 100, 2: 50}, {0: 300, 1: 200, 2: 50}  # waiting: 300, 100, 0
    assert limit_rows(start, end, 100) == {0: 75, 1: 125, 2: 50}  # in proportion: 3 to 1
    assert limit_rows(start, end, 1000) == end
    # a limit smaller than a fair share still moves: the largest backlog goes first
    assert limit_rows(start, end, 1) == {0: 1, 1: 100, 2: 50}
    assert limit_rows({0: 0, 1: 0, 2: 0}, {0: 1, 1: 1, 2: 1}, 2) == {0: 1, 1: 1, 2: 0}
    # a partition the start does not know yet waits from its end: nothing to read there
    assert limit_rows({0: 0}, {0: 10, 1: 7}, 4) == {0: 4, 1: 7}
