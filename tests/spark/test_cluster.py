"""The snapshot jobs on a real Spark standalone cluster (tests/spark/standalone.py): a master and
two one-core workers in their own JVMs, jobs submitted by `ssekd-spark --master spark://...`
from a driver process of their own, executors whose Python has the dependencies but not this
project. Their output must equal the same jobs' on `local[2]`, and the work must have run on the
workers' executors, not in the driver.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from ssekd.dev.broker import Broker
from ssekd.spark.models import models_for
from ssekd.spark.pack import pack_code
from ssekd.spark.quality import RecordRules
from ssekd.spark.snapshot import run_snapshot, run_snapshot_stream
from tests.spark.daemon_config import daemon_config
from tests.spark.standalone import (
    PYTHON,
    PYTHON_LACKING_KAFKA,
    SPARK_HOME,
    Cluster,
    JobEvidence,
    job_evidence,
    start_cluster,
)
from tests.support.kafka_records import Change, Record, create_topic, latest_per_key, produce, read_topic

# Each cluster job starts a driver and two executor JVMs: about 20 s on a quiet 2-core machine,
# over 60 s when other test runs share it (seen at a load average of 11), and the first test
# runs four of them. The suite's 300 s would then cut it short.
pytestmark = [pytest.mark.spark, pytest.mark.broker, pytest.mark.timeout(900)]

CLI = str(Path(sys.executable).with_name("ssekd-spark"))
PARTITIONS, KEYS = 3, 300


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    running = start_cluster(tmp_path_factory.mktemp("standalone"))
    try:
        yield running
    finally:
        running.stop()


def changes(rng: random.Random, n: int, start: int = 0) -> list[Change]:
    """`n` changes over KEYS keys: values with a revision, an etag header on every other one,
    3% deletions, and the last ten keys deleted at the end."""
    out = []
    for i in range(start, start + n - 10):
        key = f"item-{rng.randrange(KEYS):03d}".encode()
        if rng.random() < 0.03:
            out.append(Change(key, None))
        else:
            headers = [("etag", f"r{i}".encode())] if i % 2 else None
            out.append(Change(key, f'{{"rev":{i}}}'.encode(), headers))
    out += [Change(f"item-{k:03d}".encode(), None) for k in range(KEYS - 10, KEYS)]
    return out


def state(records: list[Record]) -> dict[tuple[int, bytes], tuple[bytes | None, Any]]:
    return {pk: (r.value, r.headers) for pk, r in latest_per_key(records).items()}


def submit(cluster: Cluster, bootstrap: str, work: Path, name: str, *args: str,
           python: str = PYTHON) -> tuple[subprocess.CompletedProcess[str], Path]:
    """`ssekd-spark snapshot ARGS` against the cluster, from its own driver process."""
    event_log = work / "events" / name
    began = time.monotonic()
    done = subprocess.run(
        [CLI, "snapshot", "--master", cluster.master, "--bootstrap", bootstrap,
         "--kafka", "fetch.wait.max.ms=10", "--log-level", "ERROR", "--json",
         *cluster.spark_conf(event_log, python), *args],
        env=cluster.driver_env(), cwd=work, capture_output=True, text=True, timeout=600)
    print(f"{name}: ssekd-spark exited {done.returncode} after {time.monotonic() - began:.1f} s "
          f"(the job's own report: {_seconds(done.stdout)} s)")
    return done, event_log


def _seconds(stdout: str) -> str:
    try:
        return str(json.loads(stdout)["seconds"])
    except ValueError:
        return "-"


def spark_submit(cluster: Cluster, work: Path, name: str,
                 *args: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    """tests/spark/submitted_snapshot.py ARGS through spark-submit, the code as --py-files."""
    archive = pack_code(work / "ssekd-spark.zip")
    event_log = work / "events" / name
    began = time.monotonic()
    done = subprocess.run(
        [str(SPARK_HOME / "bin" / "spark-submit"), "--master", cluster.master,
         "--py-files", str(archive), *cluster.spark_conf(event_log),
         str(Path(__file__).with_name("submitted_snapshot.py")), *args],
        env=cluster.driver_env() | {"PYSPARK_PYTHON": PYTHON}, cwd=work, capture_output=True,
        text=True, timeout=600)
    print(f"{name}: spark-submit exited {done.returncode} after "
          f"{time.monotonic() - began:.1f} s")
    return done, event_log


def report_of(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert done.returncode == 0, done.stderr[-3000:]
    text = done.stdout.strip()
    # ssekd-spark --json prints the report alone; a submitted script's is its last line.
    return json.loads(text if text.startswith("{") else text.splitlines()[-1])  # type: ignore[no-any-return]


def assert_ran_on_the_workers(cluster: Cluster, event_log: Path) -> JobEvidence:
    evidence = job_evidence(cluster, event_log)
    print(f"{evidence.app_id}: tasks per executor {evidence.tasks}, "
          f"executors per worker {evidence.by_worker}")
    assert "driver" not in evidence.tasks
    assert set(evidence.tasks) <= set(evidence.executors), "tasks ran on executors only"
    assert all(host == "127.0.0.1" and cores == 1 for host, cores in evidence.executors.values())
    # The workers' own status pages: each ran an executor of this application that ran tasks.
    # (Not "exactly one each": on a loaded machine a worker may replace an executor that
    # missed its heartbeats, and the job goes on with the new one.)
    assert len(evidence.by_worker) == 2
    assert all(set(ids) & set(evidence.tasks) for ids in evidence.by_worker.values()), \
        "both workers ran tasks"
    assert {i for ids in evidence.by_worker.values() for i in ids} == set(evidence.executors)
    return evidence


def test_batch_and_streaming_snapshots_on_the_cluster_equal_local(
        cluster: Cluster, spark_session: SparkSession, spark_broker: Broker,
        kafka_config: dict[str, str], topic_name: str, tmp_path: Path) -> None:
    bootstrap, source = spark_broker.bootstrap, topic_name
    create_topic(bootstrap, source, PARTITIONS)
    # One value that fails the topic's model (below), early: counted, never the latest.
    rejected = produce(bootstrap, source, [Change(b"item-000", b"not json")])
    produced = rejected + produce(bootstrap, source, changes(random.Random(11), 6_000))
    expected = state(produced)
    tombstones = sum(1 for value, _ in expected.values() if value is None)
    assert len(expected) == KEYS and tombstones >= 10
    assert expected[(rejected[0].partition, b"item-000")][0] != b"not json"
    (tmp_path / "revision.json").write_text('{"type": "object", "required": ["rev"]}')
    config = daemon_config(
        tmp_path, f"        - name: {source}\n          value: {{model: json, "
                  f"catalog: {{files: [{{subject: revision}}]}}}}",
        "  files:\n    type: filesystem\n    options:\n      subjects:\n"
        "        revision: {path: revision.json}")

    # Batch: the cluster and local[2] build the same snapshot, which is the expected one; the
    # executors check the records against the daemon config's model.
    done, events = submit(cluster, bootstrap, tmp_path, "batch", "--topic", source,
                          "--snapshot-topic", f"{source}-cluster", "--config", str(config))
    report = report_of(done)
    assert (report["records"], report["written"]) == (len(produced), KEYS)
    assert report["tombstones_written"] == tombstones
    assert report["malformed"]["invalid_value"] == 1 and report["malformed"]["first"] == {
        "invalid_value": f"{rejected[0].partition}/{rejected[0].offset}"}
    assert_ran_on_the_workers(cluster, events)
    rules = RecordRules(models=models_for(config, [source]))
    local = run_snapshot(spark_session, kafka_config, source, f"{source}-local", rules=rules)
    assert local.malformed.counts["invalid_value"] == 1
    assert (local.records, local.written) == (len(produced), KEYS)
    on_cluster = read_topic(bootstrap, f"{source}-cluster")
    assert state(on_cluster) == state(read_topic(bootstrap, f"{source}-local")) == expected
    assert len(on_cluster) == KEYS, "one record per key"

    # A rerun on the cluster writes nothing. It goes the other way in: `spark-submit
    # --py-files` with the zip of `ssekd-spark pack`, from a driver whose Python has the
    # dependencies but not ssekd either.
    done, events = spark_submit(cluster, tmp_path, "rerun", bootstrap, source,
                                f"{source}-cluster")
    rerun = report_of(done)
    assert (rerun["records"], rerun["written"], rerun["unchanged"]) == (len(produced), 0, KEYS)
    assert len(read_topic(bootstrap, f"{source}-cluster")) == KEYS
    assert_ran_on_the_workers(cluster, events)

    # Streaming with --available-now, twice from one checkpoint around more changes.
    checkpoint = tmp_path / "checkpoint"
    stream_args = ("--topic", source, "--snapshot-topic", f"{source}-stream-cluster",
                   "--streaming", "--available-now", "--checkpoint", str(checkpoint))
    done, events = submit(cluster, bootstrap, tmp_path, "stream-1", *stream_args)
    first = report_of(done)
    assert (first["records"], first["written"]) == (len(produced), KEYS)
    assert_ran_on_the_workers(cluster, events)
    local_checkpoint = str(tmp_path / "local-checkpoint")
    run_snapshot_stream(spark_session, kafka_config, source, f"{source}-stream-local",
                        checkpoint=local_checkpoint, available_now=True)

    more = produce(bootstrap, source, changes(random.Random(12), 1_000, start=len(produced)))
    done, events = submit(cluster, bootstrap, tmp_path, "stream-2", *stream_args)
    second = report_of(done)
    assert second["records"] == len(more), "each new change read once, nothing read again"
    assert_ran_on_the_workers(cluster, events)
    local_second = run_snapshot_stream(spark_session, kafka_config, source,
                                       f"{source}-stream-local", checkpoint=local_checkpoint,
                                       available_now=True)
    assert (local_second.records, local_second.written) == (second["records"], second["written"])
    streamed = read_topic(bootstrap, f"{source}-stream-cluster")
    assert state(streamed) == state(read_topic(bootstrap, f"{source}-stream-local")) \
        == state(produced + more)
    assert len(streamed) == KEYS + second["written"]
    # Only the driver wrote the checkpoint (offsets and commits; no executor-side state).
    assert {p.name for p in checkpoint.iterdir()} <= {"offsets", "commits", "metadata",
                                                       "sources", ".metadata.crc"}


def test_a_worker_without_confluent_kafka_is_named_in_one_line(
        cluster: Cluster, spark_broker: Broker, topic_name: str, tmp_path: Path) -> None:
    bootstrap = spark_broker.bootstrap
    create_topic(bootstrap, topic_name, 2)
    produce(bootstrap, topic_name, [Change(b"k", b"v")])
    done, _ = submit(cluster, bootstrap, tmp_path, "lacking", "--topic", topic_name,
                     python=PYTHON_LACKING_KAFKA)
    print(done.stderr[-2000:])
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("ssekd-spark: confluent-kafka is not installed in the Python that "
                           "Spark started on the executors"), last
    assert repr(PYTHON_LACKING_KAFKA) in last and "pip install 'ssekd[spark]'" in last
    assert "spark/cli.py" not in done.stderr, "no traceback of the driver"
    assert read_topic(bootstrap, f"{topic_name}-snapshots") == []
