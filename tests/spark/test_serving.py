"""The pipeline end to end: the Spark snapshot job builds `<topic>-snapshots`, and ssekd serving
that topic gives a new subscriber exactly the snapshot's state, then the live changes."""

from __future__ import annotations

import base64
import json
import random
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from ssekd.dev.broker import Broker
from ssekd.spark.snapshot import run_snapshot, snapshot_topic_for
from tests.support.broker import Kafka
from tests.support.kafka_records import Change, create_topic, latest_per_key, produce
from tests.support.sse import Event
from tests.support.streamd import run_streamd

pytestmark = [pytest.mark.spark, pytest.mark.broker, pytest.mark.daemon]


def key_of(event: Event) -> bytes:
    """The record key from a key-form id: `["<base64url(key)>","<progress>"]`."""
    encoded = json.loads(event.id or "null")[0]
    return base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4))


def test_new_subscriber_gets_the_snapshot_state_then_live_changes(
        spark_session: SparkSession, spark_broker: Broker, kafka_config: dict[str, str],
        kafka: Kafka, topic_name: str, tmp_path: Path) -> None:
    bootstrap, source = spark_broker.bootstrap, topic_name
    target = snapshot_topic_for(source)
    create_topic(bootstrap, source, 3)
    rng = random.Random(7)
    changes = [Change(b"k%02d" % (i % 40), b"v%d" % i) for i in range(400)]
    changes += [Change(b"k%02d" % rng.randrange(40), None) for _ in range(6)]  # deletions
    produced = produce(bootstrap, source, changes)
    state = {pk[1]: r.value for pk, r in latest_per_key(produced).items()}
    live = {k: v for k, v in state.items() if v is not None}
    assert 30 <= len(live) < 40

    report = run_snapshot(spark_session, kafka_config, source)
    assert report.written == len(state)

    streamd = run_streamd(tmp_path, bootstrap)
    try:
        with streamd.open(f"/keyed/{target}") as client:
            first = client.events(len(live), timeout=30)
            assert all(e.event is None for e in first), "no deletes for keys already gone"
            assert {key_of(e): (e.data or "").encode() for e in first} == live, \
                "each live key once"

            # Live: new changes to the source, folded by a rerun of the job (it writes only the
            # keys whose value differs), reach the open stream.
            gone = sorted(live)[0]
            produce(bootstrap, source, [Change(b"k99", b"new key"), Change(gone, None),
                                        Change(sorted(live)[1], b"updated")])
            rerun = run_snapshot(spark_session, kafka_config, source)
            assert rerun.written == 3
            got = client.events(3, timeout=30)
            # and nothing else: no key sent twice, no other change
            assert client.until(kafka.mark(target, (0, 1, 2))) == []
    finally:
        streamd.daemon.stop()
    assert {(key_of(e), e.event, e.data) for e in got} == {
        (b"k99", None, "new key"),
        (gone, "delete", base64.urlsafe_b64encode(gone).decode()),
        (sorted(live)[1], None, "updated"),
    }
