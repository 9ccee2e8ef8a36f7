"""Compacted topics, the broker absent at start, daemon shutdown, and a slow client."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka.admin import NewTopic

from ssekd.dev.broker import Broker, free_port, start_broker
from ssekd.event_ids import ProgressId
from tests.support.broker import Kafka
from tests.support.streamd import Streamd, run_streamd

pytestmark = [pytest.mark.daemon, pytest.mark.broker]


def test_compacted_late_subscriber_gets_latest_per_live_key(kafka: Kafka,
                                                            streamd: Streamd) -> None:
    topic = kafka.topic(2, compact=True)
    for i in range(40):
        kafka.produce(topic, b"%s=%d" % (b"k%d" % (i % 5), i), key=b"k%d" % (i % 5))
    kafka.produce(topic, None, key=b"k3")  # k3 deleted
    kafka.flush()
    latest = ["k0=35", "k1=36", "k2=37", "k4=39"]
    # the first subscriber makes the cache read the topic; it is late too: the cache compacts
    with streamd.open(f"/events/{topic}") as first:
        before = kafka.mark(topic, (0, 1), key=b"marker-1")
        assert sorted(e.data or "" for e in first.until(before)) == latest
    with streamd.open(f"/events/{topic}") as late:
        got = late.until(kafka.mark(topic, (0, 1), key=b"marker-2"))
        assert sorted(e.data or "" for e in got) == sorted(latest + before)
        assert all(e.event is None for e in got)
        kafka.produce(topic, b"k1=live", key=b"k1")
        kafka.produce(topic, None, key=b"k2")
        kafka.flush()
        live = late.until(kafka.mark(topic, (0, 1), key=b"marker-3"))
    assert [(e.event, e.data) for e in live] == [(None, "k1=live"), ("delete", "azI=")]


def test_broker_down_at_start(kafka: Kafka, tmp_path: Path) -> None:
    port = free_port()
    s = run_streamd(tmp_path, f"127.0.0.1:{port}")
    broker: Broker | None = None
    try:
        assert s.status("/www/index.html") == 200
        with s.open("/events/late-topic") as c:
            assert c.status == 200
            s.daemon.wait_output("BINDING_KAFKA_BROKER_UNAVAILABLE")
            broker = start_broker(port)
            late = Kafka(broker.bootstrap)
            late.admin.create_topics([NewTopic("late-topic", 1, 1)])["late-topic"].result(10)
            late.produce("late-topic", b"hello", partition=0)
            late.flush()
            (e,) = c.events(1, timeout=20)
            assert e.data == "hello"
            assert c.until(late.mark("late-topic")) == []
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
            deadline = time.monotonic() + 10
            while c.comments < 3:  # a keepalive comment each 0.2 s idle, and no event
                assert time.monotonic() < deadline, c.comments
                assert c.next_event(0.1) is None
            assert c.retry == 1500  # sent first, before any comment
    finally:
        s.daemon.stop()


@pytest.mark.timeout(180)
def test_slow_client_beside_a_fast_one(kafka: Kafka, kafka_broker: Broker,
                                       tmp_path: Path) -> None:
    """A client that stops reading holds up no other: the fast one gets every record while the
    slow one reads nothing; the slow one then gets every record once, in order (by then its
    position has fallen out of the 2 MiB cache: read back from Kafka). How fast and how much
    memory is the benchmarks' business (bench/)."""
    topic = kafka.topic(1)
    s = run_streamd(tmp_path, kafka_broker.bootstrap, max_bytes=2 * 1024 * 1024)
    try:
        n, pad = 6000, b"p" * 1000  # 6 MB: three times the cache
        path = f"/events/{topic}?lastEventId=" + ProgressId.encode({0: 0})  # from offset 0
        # the slow client: a tiny receive buffer, and it reads nothing after the head
        slow = socket.socket()
        slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        slow.settimeout(30)
        slow.connect(("127.0.0.1", s.port))
        slow.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        slow_buf = b""
        while b"\r\n\r\n" not in slow_buf:
            slow_buf += slow.recv(4096)
        assert slow_buf.startswith(b"HTTP/1.1 200 OK\r\n")
        slow_buf = slow_buf.partition(b"\r\n\r\n")[2]

        fast_seqs: list[int] = []
        fast = s.open(path, timeout=60)

        def read_fast() -> None:
            with fast:
                fast_seqs.extend(int((e.data or "").split()[0])
                                 for e in fast.events(n, timeout=120))

        reader = threading.Thread(target=read_fast)
        reader.start()
        for i in range(n):
            kafka.produce(topic, b"%d " % i + pad, partition=0)
            kafka.producer.poll(0)
        kafka.flush()
        reader.join(150)
        assert not reader.is_alive() and fast_seqs == list(range(n))

        # the slow client now reads everything: every record once, in order
        seqs: list[int] = []
        while len(seqs) < n:
            while b"\n\n" in slow_buf:
                event, _, slow_buf = slow_buf.partition(b"\n\n")
                seqs += [int(line[5:].split()[0]) for line in event.split(b"\n")
                         if line.startswith(b"data:")]
            if len(seqs) < n:
                chunk = slow.recv(1 << 20)
                assert chunk, f"stream ended after {len(seqs)} records"
                slow_buf += chunk
        assert seqs == list(range(n))
        slow.close()
    finally:
        s.daemon.stop()
