"""Validated snapshots: with `--config zilla.yaml`, the snapshot job checks every record against
the models that config gives the change topic or the snapshot topic (the daemon's catalogs and
checks), counts and reports the ones that fail, and never writes one into the snapshot topic."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from pyspark.sql import SparkSession

from ssekd.dev.broker import Broker
from ssekd.spark.cli import EXIT_MALFORMED, main
from tests.spark.daemon_config import daemon_config as config
from tests.support.kafka_records import Change, create_topic, latest_per_key, produce, read_topic
from tests.support.schema_registry import Registry, avro_bytes, wire

pytestmark = [pytest.mark.spark, pytest.mark.broker]

ITEM = {"type": "object", "required": ["id", "name"],
        "properties": {"id": {"type": "integer"}, "name": {"type": "string"}}}
PRICE = {"type": "record", "name": "Price",
         "fields": [{"name": "sku", "type": "string"}, {"name": "cents", "type": "long"}]}


def cli(bootstrap: str, *args: str) -> list[str]:
    return ["snapshot", "--bootstrap", bootstrap, "--master", "local[2]",
            "--kafka", "fetch.wait.max.ms=10", "--conf", "spark.sql.shuffle.partitions=2",
            "--log-level", "ERROR", *args]


def valid(value: bytes | None) -> bool:
    if value is None:
        return True
    try:
        jsonschema.validate(json.loads(value), ITEM)
    except (ValueError, jsonschema.ValidationError):
        return False
    return True


def test_records_that_fail_the_topics_json_model_are_counted_and_never_written(
        spark_session: SparkSession, spark_broker: Broker, topic_name: str, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    bootstrap, source = spark_broker.bootstrap, topic_name
    (tmp_path / "schemas").mkdir()
    (tmp_path / "schemas" / "items.json").write_text(json.dumps(ITEM))
    path = config(tmp_path,
                  f"        - name: {source}\n"
                  f"          value: {{model: json, catalog: {{files: [{{subject: items}}]}}}}",
                  "  files:\n    type: filesystem\n    options:\n      subjects:\n"
                  "        items: {path: schemas/items.json}")
    create_topic(bootstrap, source, 2)
    good = [Change(f"k{i}".encode(), json.dumps({"id": i, "name": f"n{i}"}).encode(),
                   partition=i % 2) for i in range(20)]
    bad = [
        Change(b"k1", b"not json", partition=1),                         # latest of k1: held
        Change(b"k2", json.dumps({"id": "two", "name": "x"}).encode(), partition=0),
        Change(b"k2", json.dumps({"id": 2, "name": "fixed"}).encode(), partition=0),  # k2 moves on
        Change(b"new", json.dumps({"name": "no id"}).encode(), partition=0),  # never valid
        Change(b"k3", None, partition=1),                                # a tombstone: no check
    ]
    produced = produce(bootstrap, source, good)
    assert main(cli(bootstrap, "--topic", source, "--config", str(path))) == 0
    assert "written 20" in capsys.readouterr().out
    produced += produce(bootstrap, source, bad)

    assert main(cli(bootstrap, "--topic", source, "--config", str(path), "--json")) == 0
    report = json.loads(capsys.readouterr().out)
    print(json.dumps(report["malformed"], indent=1))
    assert report["records"] == len(produced)
    assert report["malformed"]["invalid_value"] == 3 and report["malformed"]["total"] == 3
    first = min((r.partition, r.offset) for r in produced if not valid(r.value))
    assert report["malformed"]["first"]["invalid_value"] == f"{first[0]}/{first[1]}"
    assert report["malformed"]["reasons"]["invalid_value"] == (
        f"{source} value: json (files: items version latest): "
        "['id']: 'two' is not of type 'integer'")
    assert report["models"] == [f"{source} value: json (files: items version latest)"]
    assert report["held"] == 2  # k1 (latest not JSON) and `new` (never valid)
    assert report["written"] == 2  # k2 fixed, k3 deleted

    snapshot = read_topic(bootstrap, f"{source}-snapshots")
    assert all(valid(r.value) for r in snapshot), "an invalid value reached the snapshot"
    state = {k: r.value for (_, k), r in latest_per_key(snapshot).items()}
    assert state[b"k1"] == json.dumps({"id": 1, "name": "n1"}).encode(), "held at its last good"
    assert state[b"k2"] == json.dumps({"id": 2, "name": "fixed"}).encode()
    assert state[b"k3"] is None and b"new" not in state
    assert len(state) == 20

    # The text report says it too; --strict turns invalid records into exit status 3.
    assert main(cli(bootstrap, "--topic", source, "--config", str(path), "--strict")) \
        == EXIT_MALFORMED
    text = capsys.readouterr().out
    assert "written 0" in text and "invalid_value 3 (first at partition/offset" in text
    assert f"models: {source} value: json (files: items version latest)" in text

    # Streaming counts the same, micro-batch by micro-batch.
    assert main(cli(bootstrap, "--topic", source, "--config", str(path), "--json",
                    "--streaming", "--available-now",
                    "--checkpoint", str(tmp_path / "ck"))) == 0
    streamed = json.loads(capsys.readouterr().out)
    assert streamed["malformed"]["invalid_value"] == 3 and streamed["written"] == 0


@pytest.fixture
def registry() -> Iterator[Registry]:
    running = Registry().start()
    yield running
    running.stop()


def test_the_snapshot_topics_avro_model_with_a_registry_checks_wire_format_records(
        spark_session: SparkSession, spark_broker: Broker, topic_name: str, tmp_path: Path,
        registry: Registry, capsys: pytest.CaptureFixture[str]) -> None:
    """The model of the *snapshot* topic applies too (it is what the daemon serves); values stay
    the bytes they were (wire format, not the JSON view the daemon sends)."""
    bootstrap, source = spark_broker.bootstrap, topic_name
    target = f"{source}-snapshots"
    sid = registry.register(f"{target}-value", PRICE)
    path = config(tmp_path,
                  f"        - name: {target}\n"
                  f"          value: {{model: avro, view: json, "
                  f"catalog: {{sr: [{{strategy: topic, version: latest}}]}}}}",
                  f"  sr:\n    type: schema-registry\n    options: {{url: '{registry.url}'}}")
    create_topic(bootstrap, source, 1)
    lamp = wire(sid, avro_bytes(PRICE, {"sku": "lamp", "cents": 1999}))
    produce(bootstrap, source, [
        Change(b"lamp", lamp),
        Change(b"desk", avro_bytes(PRICE, {"sku": "desk", "cents": 5})),   # not wire format
        Change(b"sofa", wire(sid + 40, avro_bytes(PRICE, {"sku": "sofa", "cents": 1}))),
    ])
    assert main(cli(bootstrap, "--topic", source, "--config", str(path), "--json")) == 0
    report: dict[str, Any] = json.loads(capsys.readouterr().out)
    assert (report["written"], report["malformed"]["invalid_value"]) == (1, 2)
    assert f"unknown schema id {sid + 40}" in json.dumps(report["malformed"]) or \
        "not Confluent wire format" in report["malformed"]["reasons"]["invalid_value"]
    assert report["models"] == [f"{target} value: avro (sr: {target}-value version 1)"], \
        "latest pinned to the version resolved"
    (record,) = read_topic(bootstrap, target)
    assert (record.key, record.value) == (b"lamp", lamp)
    assert f"/schemas/ids/{sid + 40}" in registry.requests, "an executor asked for the id"


def test_a_bad_config_or_an_unreachable_registry_stops_the_job_before_it_reads(
        spark_session: SparkSession, spark_broker: Broker, topic_name: str, tmp_path: Path,
        registry: Registry, capsys: pytest.CaptureFixture[str]) -> None:
    bootstrap = spark_broker.bootstrap
    create_topic(bootstrap, topic_name, 1)
    path = config(tmp_path, f"        - name: {topic_name}\n"
                            f"          value: {{model: json, catalog: {{nope: [{{subject: x}}]}}}}",
                  "  sr:\n    type: schema-registry\n    options: {url: 'http://127.0.0.1:9'}")
    assert main(cli(bootstrap, "--topic", topic_name, "--config", str(path))) == 2
    err = capsys.readouterr().err
    assert f"{path}:" in err and "no catalog 'nope' under `catalogs`" in err

    path = config(tmp_path, f"        - name: {topic_name}\n"
                            f"          value: {{model: json, catalog: {{sr: [{{subject: x}}]}}}}",
                  f"  sr:\n    type: schema-registry\n    options: {{url: '{registry.url}'}}")
    registry.stop()
    assert main(cli(bootstrap, "--topic", topic_name, "--config", str(path))) == 1
    err = capsys.readouterr().err
    assert "cannot check records" in err and "catalog 'sr'" in err
    assert "Traceback" not in err
