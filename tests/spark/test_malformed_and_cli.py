"""Malformed records are counted and reported, never written, never silently dropped; and the
`ssekd-spark` command line runs the same jobs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from ssekd.dev.broker import Broker
from ssekd.spark.cli import EXIT_MALFORMED, main
from ssekd.spark.options import OptionError
from ssekd.spark.quality import RecordRules
from ssekd.spark.snapshot import run_snapshot, run_snapshot_stream
from tests.support.kafka_records import Change, create_topic, latest_per_key, produce, read_topic

pytestmark = pytest.mark.spark


@pytest.mark.broker
def test_malformed_records_are_counted_reported_and_never_written(
        spark_session: SparkSession, spark_broker: Broker, kafka_config: dict[str, str],
        topic_name: str, tmp_path: Path) -> None:
    bootstrap, source, target = spark_broker.bootstrap, topic_name, topic_name + "-snap"
    create_topic(bootstrap, source, 2)
    rules = RecordRules(max_value_bytes=100)
    produce(bootstrap, source, [
        Change(b"good", b"1", partition=0),
        Change(b"held", b"small", partition=1),
    ])
    assert run_snapshot(spark_session, kafka_config, source, target, rules=rules).written == 2
    bad = produce(bootstrap, source, [
        Change(None, b"keyless", partition=0),
        Change(b"\xff\xfe-not-utf8", b"x", partition=1),
        Change(b"\xff\xfe-not-utf8", b"y", partition=1),
        Change(b"big", b"z" * 101, partition=0),
        Change(b"held", b"h" * 500, partition=1),  # the latest value of a known key is too big
        Change(b"good", b"2", partition=0),
    ])
    report = run_snapshot(spark_session, kafka_config, source, target, rules=rules)
    text = report.describe()
    print(text)
    assert report.malformed.counts == {"null_key": 1, "undecodable_key": 2, "oversized_value": 2,
                                       "invalid_key": 0, "invalid_value": 0}
    keyless = next(r for r in bad if r.key is None)
    assert report.malformed.first["null_key"] == f"{keyless.partition}/{keyless.offset}"
    assert "malformed: 5 never written" in text and "undecodable_key 2" in text
    # "held" keeps its last good value instead of being rolled back or dropped; "good" moves on.
    assert report.held == 3  # held, big and the undecodable key: their latest record is bad
    assert report.written == 1
    snapshot = {k: r.value for (_, k), r in latest_per_key(read_topic(bootstrap, target)).items()}
    assert snapshot == {b"good": b"2", b"held": b"small"}

    # A micro-batch reports the same way.
    stream = run_snapshot_stream(spark_session, kafka_config, source, target, rules=rules,
                                 checkpoint=str(tmp_path / "ck"), available_now=True)
    assert stream.malformed.total == 5 and stream.records == 8


@pytest.mark.broker
def test_a_snapshot_topic_with_another_partition_count_is_refused(
        spark_session: SparkSession, spark_broker: Broker, kafka_config: dict[str, str],
        topic_name: str) -> None:
    create_topic(spark_broker.bootstrap, topic_name, 3)
    create_topic(spark_broker.bootstrap, topic_name + "-snapshots", 2, compact=True)
    with pytest.raises(OptionError, match="has 2 partitions, the source has 3"):
        run_snapshot(spark_session, kafka_config, topic_name)


@pytest.mark.broker
def test_command_line_snapshot_and_export(
        spark_session: SparkSession, spark_broker: Broker, topic_name: str, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    create_topic(spark_broker.bootstrap, topic_name, 2)
    produce(spark_broker.bootstrap, topic_name,
            [Change(f"k{i % 5}".encode(), f"v{i}".encode()) for i in range(50)]
            + [Change(b"\xc3\x28", b"bad key")])
    common = ["--bootstrap", spark_broker.bootstrap, "--topic", topic_name,
              "--master", "local[2]", "--kafka", "fetch.wait.max.ms=10",
              "--conf", "spark.sql.shuffle.partitions=2", "--log-level", "ERROR"]
    assert main(["snapshot", *common, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["records"] == 51 and report["written"] == 5
    assert report["malformed"]["undecodable_key"] == 1
    assert main(["snapshot", *common, "--strict"]) == EXIT_MALFORMED
    out = capsys.readouterr().out
    assert "written 0" in out and "undecodable_key 1" in out
    assert main(["export", *common, "--output", str(tmp_path / "out")]) == 0
    assert "export" in capsys.readouterr().out and (tmp_path / "out").is_dir()
    assert main(["snapshot", *common[:2], "--topic", "no-such-topic", *common[4:]]) == 2
    assert spark_session.sparkContext._jsc is not None  # the shared session still runs


def test_console_script_needs_no_spark_to_explain_itself() -> None:
    done = subprocess.run([str(Path(sys.executable).with_name("ssekd-spark")), "snapshot",
                           "--help"], check=False, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0 and "--master" in done.stdout and "local[*]" in done.stdout
    bad = subprocess.run([str(Path(sys.executable).with_name("ssekd-spark")), "snapshot",
                          "--topic", "t", "--streaming"], check=False, capture_output=True,
                         text=True, timeout=30)
    assert bad.returncode == 2 and "--checkpoint" in bad.stderr
