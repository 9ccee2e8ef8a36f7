"""Compacted topics, the broker absent at start, daemon shutdown, and a slow client."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import psutil
import pytest

from ssekd.broker import Broker, free_port, start_broker
from tests.streaming.conftest import Kafka, Streamd, run_streamd


def test_compacted_late_subscriber_gets_latest_per_live_key(kafka: Kafka,
                                                            streamd: Streamd) -> None:
    topic = kafka.topic(2, compact=True)
    for i in range(40):
        kafka.produce(topic, b"%s=%d" % (b"k%d" % (i % 5), i), key=b"k%d" % (i % 5))
    kafka.produce(topic, None, key=b"k3")  # k3 deleted
    kafka.flush()
    # the first subscriber makes the cache read the topic; it is late too: the cache compacts
    with streamd.open(f"/events/{topic}") as first:
        assert sorted(e.data or "" for e in first.quiet(1.0)) == \
            ["k0=35", "k1=36", "k2=37", "k4=39"]
    with streamd.open(f"/events/{topic}") as late:
        got = late.quiet(1.0)
        assert sorted(e.data or "" for e in got) == ["k0=35", "k1=36", "k2=37", "k4=39"]
        assert all(e.event is None for e in got)
        kafka.produce(topic, b"k1=live", key=b"k1")
        kafka.produce(topic, None, key=b"k2")
        kafka.flush()
        live = late.events(2)
    assert [(e.event, e.data) for e in live] == [(None, "k1=live"), ("delete", "azI=")]


def test_broker_down_at_start(kafka: Kafka, tmp_path: Path) -> None:
    port = free_port()
    s = run_streamd(tmp_path, f"127.0.0.1:{port}")
    broker: Broker | None = None
    try:
        assert s.status("/www/index.html") == 200
        with s.open("/events/late-topic") as c:
            assert c.status == 200
            assert c.quiet(1.0) == []
            broker = start_broker(port)
            late = Kafka(broker.bootstrap)
            late.admin.create_topics([__import__("confluent_kafka.admin").admin.NewTopic(
                "late-topic", 1, 1)])["late-topic"].result(10)
            late.produce("late-topic", b"hello", partition=0)
            late.flush()
            (e,) = c.events(1, timeout=20)
            assert e.data == "hello"
        s.daemon.wait_output("BINDING_KAFKA_BROKER_UNAVAILABLE")  # lines are written by a thread
        s.daemon.wait_output("BINDING_KAFKA_BROKER_CONNECTED")
    finally:
        s.daemon.stop()
        if broker:
            broker.stop()


def test_shutdown_ends_streams_cleanly(kafka: Kafka, kafka_broker: Broker, tmp_path: Path) -> None:
    topic = kafka.topic(1)
    kafka.produce(topic, b"x", partition=0)
    kafka.flush()
    s = run_streamd(tmp_path, kafka_broker.bootstrap)
    with s.open(f"/events/{topic}") as c:
        c.events(1)
        s.daemon.stop()
        assert c.next_event(5) is None
        assert c.ended  # the chunked response was finished, not cut
    assert s.daemon.process.returncode == 0


def test_keepalive_and_retry(kafka: Kafka, kafka_broker: Broker, tmp_path: Path) -> None:
    topic = kafka.topic(1)
    s = run_streamd(tmp_path, kafka_broker.bootstrap, idle=0.2, retry=1500)
    try:
        with s.open(f"/events/{topic}") as c:
            assert c.quiet(1.0) == []
            assert c.retry == 1500
            assert c.comments >= 3
    finally:
        s.daemon.stop()


def _latency_reader(s: Streamd, path: str, n: int, out: list[float]) -> None:
    with s.open(path, timeout=60) as c:
        for e in c.events(n, timeout=60):
            out.append(time.time() - float((e.data or "0 0").split()[1]))


@pytest.mark.timeout(180)
def test_slow_client_beside_a_fast_one(kafka: Kafka, kafka_broker: Broker,
                                       tmp_path: Path) -> None:
    """The slow reader stalls its socket; the fast one keeps its latency; memory stays bounded;
    the slow one gets every record in the end (its cursor fell out of a 2 MiB cache: Kafka)."""
    topic = kafka.topic(1)
    s = run_streamd(tmp_path, kafka_broker.bootstrap, max_bytes=2 * 1024 * 1024)
    try:
        proc = psutil.Process(s.daemon.process.pid)
        n, pad = 6000, b"p" * 1000
        # the slow client: a tiny receive buffer, reads one event a second for a while
        slow = socket.socket()
        slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        slow.connect(("127.0.0.1", s.port))
        slow.sendall(f"GET /events/{topic} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        fast_lat: list[float] = []
        base_lat: list[float] = []
        # baseline latency with the fast client alone
        t = threading.Thread(target=_latency_reader, args=(s, f"/events/{topic}", 200, base_lat))
        t.start()
        time.sleep(0.5)
        for i in range(200):
            kafka.produce(topic, b"%d %.6f " % (i, time.time()) + pad, partition=0)
            kafka.producer.poll(0)
            time.sleep(0.002)
        kafka.flush()
        t.join(30)
        rss_before = proc.memory_info().rss
        # now the slow client stays connected, reading 1 event/s, while n records flow
        fast_lat.clear()
        t = threading.Thread(target=_latency_reader,
                             args=(s, f"/events/{topic}?lastEventId=" + _id_after(200),
                                   n, fast_lat))
        t.start()
        time.sleep(0.5)
        slow_buf = b""
        next_read = time.monotonic()
        for i in range(n):
            kafka.produce(topic, b"%d %.6f " % (200 + i, time.time()) + pad, partition=0)
            kafka.producer.poll(0)
            if i % 50 == 0:
                time.sleep(0.01)
            if time.monotonic() >= next_read:
                slow_buf += slow.recv(200)
                next_read += 1.0
        kafka.flush()
        t.join(60)
        rss_peak = proc.memory_info().rss
        assert len(fast_lat) == n
        p99 = sorted(fast_lat)[int(len(fast_lat) * 0.99)]
        base99 = sorted(base_lat)[int(len(base_lat) * 0.99)]
        assert p99 < max(0.25, base99 * 5), (p99, base99)
        # memory: cache bound (2 MiB) plus buffers, never the 6 MB the slow client is behind
        assert rss_peak - rss_before < 24 * 1024 * 1024, (rss_before, rss_peak)
        # the slow client now reads everything: every record once, in order
        slow.settimeout(30)
        want = 200 + n
        seqs: list[int] = []
        while len(seqs) < want:
            chunk = slow.recv(1 << 20)
            assert chunk, f"stream ended after {len(seqs)} records"
            slow_buf += chunk
            while b"\n\n" in slow_buf:
                event, _, slow_buf = slow_buf.partition(b"\n\n")
                for line in event.split(b"\n"):
                    if line.startswith(b"data:"):
                        seqs.append(int(line[5:].split()[0]))
        assert seqs == list(range(want))
        slow.close()
    finally:
        s.daemon.stop()


def _id_after(count: int) -> str:
    from ssekd.progress import ProgressId
    return ProgressId.encode({0: count})
