"""The snapshot job, batch and streaming, against the real dev broker."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from ssekd.dev.broker import Broker
from ssekd.spark.snapshot import run_snapshot, run_snapshot_stream, snapshot_topic_for
from tests.support.kafka_records import Change, Record, create_topic, latest_per_key, produce, read_topic

pytestmark = [pytest.mark.spark, pytest.mark.broker]

N_CHANGES, N_KEYS, PARTITIONS = 100_000, 1_000, 3


def key_of(k: int) -> bytes:
    return f"item-{k:04d}".encode()


def change_stream(rng: random.Random, n: int, keys: list[int], deleted_at_end: list[int],
                  start: int = 0) -> list[Change]:
    """`n` changes: every key of `keys` set once, random updates (2% deletions, half with an
    etag header), and the keys of `deleted_at_end` deleted last."""
    changes = [Change(key_of(k), f'{{"id":{k},"rev":{start}}}'.encode()) for k in keys]
    while len(changes) < n - len(deleted_at_end):
        i = start + len(changes)
        k = rng.choice(keys)
        if rng.random() < 0.02:
            changes.append(Change(key_of(k), None))
        else:
            headers = [("etag", f"r{i}".encode())] if i % 2 else None
            changes.append(Change(key_of(k), f'{{"id":{k},"rev":{i}}}'.encode(), headers))
    changes += [Change(key_of(k), None) for k in deleted_at_end]
    return changes


def state(records: list[Record]) -> dict[tuple[int, bytes], tuple[bytes | None, list]]:  # type: ignore[type-arg]
    return {pk: (r.value, r.headers) for pk, r in latest_per_key(records).items()}


def test_snapshot_of_100k_changes_then_rerun_then_stream_from_checkpoint(
        spark_session: SparkSession, spark_broker: Broker, kafka_config: dict[str, str],
        topic_name: str, tmp_path: Path) -> None:
    bootstrap, source = spark_broker.bootstrap, topic_name
    target = snapshot_topic_for(source)
    create_topic(bootstrap, source, PARTITIONS)
    rng = random.Random(5)
    deleted = list(range(0, N_KEYS, 10))  # 100 keys end deleted
    changes = produce(bootstrap, source,
                      change_stream(rng, N_CHANGES, list(range(N_KEYS)), deleted))
    assert len(changes) == N_CHANGES
    assert {r.partition for r in changes} == set(range(PARTITIONS))
    expected = state(changes)
    assert len(expected) == N_KEYS
    expected_deleted = sum(1 for value, _ in expected.values() if value is None)
    assert expected_deleted >= len(deleted)

    # First run: one record per key, in the key's partition; deleted keys are tombstones.
    report = run_snapshot(spark_session, kafka_config, source)
    print(report.describe())
    assert (report.records, report.keys, report.written) == (N_CHANGES, N_KEYS, N_KEYS)
    assert (report.deleted, report.tombstones_written) == (expected_deleted, expected_deleted)
    assert report.malformed.total == 0 and report.held == 0
    snapshot = read_topic(bootstrap, target)
    assert len(snapshot) == N_KEYS
    assert state(snapshot) == expected
    by_key = latest_per_key(changes)
    assert all(r.timestamp_ms == by_key[(r.partition, r.key)].timestamp_ms  # type: ignore[index]
               for r in snapshot)

    # A rerun over unchanged input writes nothing.
    rerun = run_snapshot(spark_session, kafka_config, source)
    assert (rerun.records, rerun.written, rerun.unchanged) == (N_CHANGES, 0, N_KEYS)
    assert len(read_topic(bootstrap, target)) == N_KEYS

    # Streaming from a new checkpoint: the first micro-batch is compared with the snapshot.
    checkpoint = str(tmp_path / "checkpoint")
    first = run_snapshot_stream(spark_session, kafka_config, source, checkpoint=checkpoint,
                                available_now=True)
    assert (first.records, first.written) == (N_CHANGES, 0)
    ends = {p: end for p, (_, end) in first.offsets.items()}
    assert ends == {p: max(r.offset for r in changes if r.partition == p) + 1
                    for p in range(PARTITIONS)}

    # Changes made while the job was stopped: resurrect 20 deleted keys, delete 30, update some.
    more = change_stream(random.Random(6), 3_000, deleted[:20] + list(range(1, 301, 3)),
                         [k for k in range(2, 300, 10)][:30], start=N_CHANGES)
    added = produce(bootstrap, source, more)
    new_expected = state(changes + added)
    changed = {pk for pk, v in new_expected.items() if expected.get(pk) != v}
    before = {(r.partition, r.offset) for r in read_topic(bootstrap, target)}
    second = run_snapshot_stream(spark_session, kafka_config, source, checkpoint=checkpoint,
                                 available_now=True)
    print(second.describe())
    assert second.records == len(added)  # each new change read once, nothing reprocessed
    assert {p: start for p, (start, _) in second.offsets.items()} == ends
    snapshot = read_topic(bootstrap, target)
    assert state(snapshot) == new_expected
    written = Counter((r.partition, r.key) for r in snapshot
                      if (r.partition, r.offset) not in before)
    assert set(written) == changed and set(written.values()) == {1}  # each changed key once
    assert second.written == len(changed)

    # Nothing new: nothing read, nothing written.
    third = run_snapshot_stream(spark_session, kafka_config, source, checkpoint=checkpoint,
                                available_now=True)
    assert (third.records, third.written) == (0, 0)
    assert len(read_topic(bootstrap, target)) == len(snapshot)

