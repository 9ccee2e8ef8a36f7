"""A partition whose leader is unavailable does not hold a stream up (Zilla #1628, open: Zilla
answers only once every partition is ready).

The real daemon reads the real broker through a proxy that tells every Kafka client partition 2
has no leader (`tests.support.kafka_proxy`). Once the cache's `partition-wait` (1 s here) has
passed, the stream delivers partitions 0 and 1, then their live records, its ids listing only
them; when the leader is back the stream gets partition 2 too; and a stream resumed from an id
made while it was away gets all of partition 2 and nothing of the others twice.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ssekd.dev.broker import free_port
from ssekd.event_ids import parse_last_event_id
from tests.support.broker import Kafka
from tests.support.daemon import start_daemon
from tests.support.kafka_proxy import Leaderless, ProxiedBroker, start_proxied_broker
from tests.support.sse import SseClient
from tests.support.streamd import write_config

pytestmark = [pytest.mark.daemon, pytest.mark.timeout(120)]


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[ProxiedBroker[Leaderless]]:
    b = start_proxied_broker(tmp_path, Leaderless)
    yield b
    b.stop()


def _partition(data: str | None) -> int:
    return int((data or "p?").split("-")[0][1:])


def test_a_stream_does_not_wait_for_a_partition_without_a_leader(
        broker: ProxiedBroker[Leaderless], tmp_path: Path) -> None:
    kafka = Kafka(broker.bootstrap)
    topic = kafka.topic(3)
    for p in range(3):
        for i in range(5):
            kafka.produce(topic, f"p{p}-{i}".encode(), partition=p)
    kafka.flush()
    broker.proxy.partitions.add((topic, 2))
    port = free_port()
    config = write_config(tmp_path, broker.bootstrap, port, partition_wait=1)
    daemon = start_daemon(config, wait_ports=[port])
    try:
        with SseClient(port, f"/events/{topic}", timeout=30) as c:
            first = c.events(10, timeout=30)
            assert sorted(e.data or "" for e in first) == \
                sorted(f"p{p}-{i}" for p in (0, 1) for i in range(5))
            assert set(parse_last_event_id(first[-1].id or "") or {}) == {0, 1}
            assert broker.proxy.rewritten > 0, "the daemon was told partition 2 has no leader"
            for i in range(5, 7):  # live records of a ready partition come at once
                kafka.produce(topic, f"p0-{i}".encode(), partition=0)
            kafka.flush()
            live = c.events(2, timeout=30)
            assert [e.data for e in live] == ["p0-5", "p0-6"]
            meanwhile = live[-1].id or ""
            assert set(parse_last_event_id(meanwhile) or {}) == {0, 1}
            broker.proxy.partitions.clear()  # the leader is back
            back = c.events(5, timeout=30)
            assert [e.data for e in back] == [f"p2-{i}" for i in range(5)]
            assert parse_last_event_id(back[-1].id or "") == {0: 7, 1: 5, 2: 5}
        with SseClient(port, f"/events/{topic}", {"Last-Event-ID": meanwhile}, timeout=30) as c:
            resumed = c.events(5, timeout=30)
            assert [e.data for e in resumed] == [f"p2-{i}" for i in range(5)]
            kafka.produce(topic, b"p1-5", partition=1)
            kafka.flush()
            assert [e.data for e in c.events(1, timeout=30)] == ["p1-5"], \
                "nothing of partitions 0 and 1 came twice"
    finally:
        daemon.stop()
