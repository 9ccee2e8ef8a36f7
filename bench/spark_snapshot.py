"""Snapshot job throughput: Spark at local[2] beside a single-process confluent-kafka compaction.

Both fold the same change topic (100,000 changes over 1,000 keys on 3 partitions, some keys
deleted) into a snapshot topic on the dev broker, doing the same work: read every change, keep
the latest record per (partition, key), read the snapshot topic's current state, write what
differs. records/s is changes read per second of wall time for the whole job.

Spark is timed three ways, because on a small machine start-up dominates: the session start
(a JVM), the first job in that JVM (cold: Python workers start, code is compiled), and the same
job again into a fresh topic (warm, `--repeat` times, median). The baseline also runs `--repeat`
times into fresh topics. A rerun, which writes nothing, is timed for both. The machine's load
average is printed with the table: figures taken beside other work are not comparable.

    .venv/bin/python -m bench.spark_snapshot [--changes N] [--master local[2]] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import time
import uuid
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from bench.common import table, write_result
from ssekd.dev.broker import start_broker

Key = tuple[int, bytes]
Headers = list[tuple[str, str | bytes | None]]
Latest = dict[Key, tuple[bytes | None, Headers, int]]


def produce_changes(bootstrap: str, topic: str, changes: int, keys: int, partitions: int,
                    seed: int = 7) -> float:
    """Every key once, then random updates (2% deletions), then every 10th key deleted."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=partitions,
                                  replication_factor=1)])[topic].result(10)
    rng = random.Random(seed)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5,
                         "partitioner": "murmur2_random", "queue.buffering.max.messages": 500000})
    deleted = list(range(0, keys, 10))
    began = time.monotonic()
    for i in range(changes):
        if i < keys:
            k, value = i, b'{"rev":0}'
        elif i >= changes - len(deleted):
            k, value = deleted[i - (changes - len(deleted))], None
        else:
            k = rng.randrange(keys)
            value = None if rng.random() < 0.02 else f'{{"id":{k},"rev":{i}}}'.encode()
        headers: Headers | None = [("etag", str(i).encode())] if i % 2 else None
        while True:
            try:
                producer.produce(topic, key=f"item-{k:04d}".encode(), value=value,
                                 headers=headers)
                break
            except BufferError:
                producer.poll(0.05)
    producer.flush(60)
    return time.monotonic() - began


def read_latest(bootstrap: str, topic: str) -> tuple[Latest, int]:
    """Latest record per (partition, key) and the number of records read, to the end of each
    partition as fetched data tells it (end-of-partition events)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex,
                         "enable.auto.commit": False, "enable.partition.eof": True,
                         "fetch.wait.max.ms": 10, "fetch.queue.backoff.ms": 5,
                         "max.partition.fetch.bytes": 8 * 1024 * 1024})
    try:
        partitions = sorted(consumer.list_topics(topic, timeout=10).topics[topic].partitions)
        consumer.assign([TopicPartition(topic, p, -2) for p in partitions])
        latest: Latest = {}
        done: set[int] = set()
        count = 0
        while len(done) < len(partitions):
            first = consumer.poll(0.1)
            if first is None:
                continue
            for m in [first, *consumer.consume(10000, timeout=0)]:
                error = m.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        done.add(m.partition() or 0)
                        continue
                    raise RuntimeError(str(error))
                key = m.key()
                if key is None:
                    continue
                count += 1
                latest[(m.partition() or 0, key)] = (
                    m.value(), list(m.headers() or []), m.timestamp()[1])  # type: ignore[arg-type]
        return latest, count
    finally:
        consumer.close()


def baseline_compaction(bootstrap: str, source: str, target: str) -> dict[str, Any]:
    """The same fold in one Python process with confluent-kafka: no Spark, no parallelism."""
    began = time.monotonic()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    if target not in admin.list_topics(timeout=10).topics:
        partitions = len(admin.list_topics(timeout=10).topics[source].partitions)
        admin.create_topics([NewTopic(target, num_partitions=partitions, replication_factor=1,
                                      config={"cleanup.policy": "compact"})])[target].result(10)
    desired, records = read_latest(bootstrap, source)
    current, _ = read_latest(bootstrap, target)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5,
                         "enable.idempotence": True})
    written = 0
    for (partition, key), (value, headers, stamp) in desired.items():
        now = current.get((partition, key))
        if now is not None and now[0] == value and now[1] == headers:
            continue
        producer.produce(target, key=key, value=value, headers=headers or None,
                         partition=partition, timestamp=stamp)
        written += 1
        producer.poll(0)
    producer.flush(60)
    seconds = time.monotonic() - began
    return {"seconds": seconds, "records": records, "written": written,
            "records_per_second": records / seconds}


def _spread(seconds: list[float]) -> str:
    return f"{min(seconds):.2f}..{max(seconds):.2f}"


def main(changes: int = 100_000, keys: int = 1_000, partitions: int = 3,
         master: str = "local[2]", repeat: int = 3) -> dict[str, Any]:
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark import __version__ as pyspark_version

    from ssekd.spark.session import build_session
    from ssekd.spark.snapshot import SnapshotReport, run_snapshot

    broker = start_broker()
    config = {"bootstrap.servers": broker.bootstrap, "fetch.wait.max.ms": "10"}
    try:
        produce_s = produce_changes(broker.bootstrap, "items", changes, keys, partitions)
        # Each timed run writes the whole snapshot into a fresh topic: the same work each time.
        base = [baseline_compaction(broker.bootstrap, "items", f"items-baseline-{i}")
                for i in range(repeat)]
        base_rerun = baseline_compaction(broker.bootstrap, "items", "items-baseline-0")

        began = time.monotonic()
        session = build_session(master, "bench-spark-snapshot", {
            "spark.sql.shuffle.partitions": "8", "spark.ui.showConsoleProgress": "false"})
        session.sparkContext.setLogLevel("ERROR")
        session_s = time.monotonic() - began
        try:
            cold = run_snapshot(session, config, "items", "items-snapshots")
            warm = [run_snapshot(session, config, "items", f"items-snapshots-{i}")
                    for i in range(repeat)]
            rerun = run_snapshot(session, config, "items", "items-snapshots")
        finally:
            session.stop()
        same = (read_latest(broker.bootstrap, "items-snapshots")[0]
                == read_latest(broker.bootstrap, "items-baseline-0")[0])
    finally:
        broker.stop()

    base_s = statistics.median([b["seconds"] for b in base])
    warm_s = statistics.median([w.seconds for w in warm])
    rows: list[list[Any]] = [
        [f"confluent-kafka, 1 process (median of {repeat})", changes, keys, round(base_s, 2),
         round(changes / base_s), _spread([b["seconds"] for b in base])],
        ["confluent-kafka, rerun", base_rerun["records"], base_rerun["written"],
         round(base_rerun["seconds"], 2), round(base_rerun["records_per_second"]), ""],
        [f"Spark {master}, session start", "", "", round(session_s, 2), "", ""],
        [f"Spark {master}, first job (cold)", cold.records, cold.written, round(cold.seconds, 2),
         round(cold.records_per_second), ""],
        [f"Spark {master}, same job again (warm, median of {repeat})", changes, keys,
         round(warm_s, 2), round(changes / warm_s), _spread([w.seconds for w in warm])],
        [f"Spark {master}, rerun (warm)", rerun.records, rerun.written, round(rerun.seconds, 2),
         round(rerun.records_per_second), ""],
    ]
    load = os.getloadavg()[0]
    print(table(f"snapshot of {changes:,} changes over {keys:,} keys, {partitions} partitions "
                f"({os.cpu_count()} CPUs, load {load:.1f})",
                ["job", "records", "written", "seconds", "records/s", "range (s)"], rows))
    print(f"\nproduced in {produce_s:.2f} s; Spark and baseline snapshots identical: {same}")

    def report(r: SnapshotReport) -> dict[str, Any]:
        return {k: r.as_dict()[k] for k in ("records", "written", "seconds",
                                             "records_per_second", "malformed")}

    result = {
        "changes": changes, "keys": keys, "partitions": partitions, "master": master,
        "repeat": repeat, "pyspark": pyspark_version, "python": platform.python_version(),
        "load_average_1m": round(load, 2), "produce_seconds": round(produce_s, 3),
        "baseline_seconds": [round(b["seconds"], 3) for b in base],
        "baseline_records_per_second": round(changes / base_s, 1),
        "baseline_rerun": {k: round(v, 3) for k, v in base_rerun.items()},
        "spark_session_start_seconds": round(session_s, 3),
        "spark_cold": report(cold),
        "spark_warm_seconds": [round(w.seconds, 3) for w in warm],
        "spark_warm_records_per_second": round(changes / warm_s, 1),
        "spark_rerun": report(rerun),
        "snapshots_identical": same,
    }
    path = write_result("spark_snapshot", result)
    print(f"written to {path}")
    if not same or cold.written != keys or rerun.written != 0 or any(
            w.written != keys for w in warm):
        raise RuntimeError("the Spark snapshot disagrees with the baseline")
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--changes", type=int, default=100_000)
    parser.add_argument("--keys", type=int, default=1_000)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--repeat", type=int, default=3,
                        help="timed runs of each warm job (the median is reported)")
    args = parser.parse_args()
    main(args.changes, args.keys, args.partitions, args.master, args.repeat)
