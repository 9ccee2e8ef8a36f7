"""Client churn beside steady streams: thousands of connections that come and go - clean
closes, resets (SO_LINGER 0) and half-open ones (a partial request, then silence until the
daemon's header deadline closes it) - while other clients stream. Afterwards the daemon's fds
and memory are back within 10% of where they were, and the steady streams lost nothing
(checked per event).

Default: 1,000 churned beside 50 streams; `RELIABILITY_SECONDS`: 5,000 in a minute beside 500.
"""

from __future__ import annotations

import random
import socket
import threading
import time
from pathlib import Path

import pytest

from ssekd.dev.broker import Broker
from tests.support.daemon import Daemon
from tests.support.faults import (
    SeqProducer,
    StreamPool,
    create_topic,
    raise_fd_limit,
    rst_close,
    run_daemon,
    seconds,
    sized,
    time_limit,
    tracebacks,
    usage,
    wait_for,
)

pytestmark = pytest.mark.timeout(time_limit())

PARTITIONS = 2
HEADER_TIMEOUT = 2.0
WORKERS = 4
#: Records the daemon's cache keeps (filled before the baseline is taken).
CACHE = 2000


def churn_one(port: int, path: str, kind: str, held: list[socket.socket]) -> None:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    if kind == "half-open":
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/ev".encode())
        held.append(sock)  # never finished, never closed by us: the daemon must let go
        return
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                 f"Accept: text/event-stream\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        data = sock.recv(4096)
        assert data, f"connection closed before the response head: {head!r}"
        head += data
    assert head.startswith(b"HTTP/1.1 200"), head[:80]
    if kind == "rst":
        rst_close(sock)
    else:
        sock.shutdown(socket.SHUT_RDWR)
        sock.close()


@pytest.mark.broker
@pytest.mark.daemon
def test_churn_beside_streams(daemons: list[Daemon], tmp_path: Path,
                              kafka_broker: Broker) -> None:
    """Memory is compared at two quiet points (producer paused, every stream caught up), so
    what is measured is what churn left behind, not data in flight or the cache filling: the
    cache is bounded at CACHE records and filled before the baseline."""
    steady = sized(50, 500)
    churn = sized(1000, 5000)
    over = seconds(10, 60)
    raise_fd_limit(4 * (steady + churn) + 1024)
    bootstrap = kafka_broker.bootstrap
    topic = f"churn-{time.monotonic_ns()}"
    create_topic(bootstrap, topic, PARTITIONS)
    producer = SeqProducer(bootstrap, topic, PARTITIONS)
    daemon, port = run_daemon(daemons, tmp_path, bootstrap, header_timeout=HEADER_TIMEOUT,
                              cache_messages=CACHE)
    pid = daemon.process.pid
    path = f"/events/{topic}"
    pool = StreamPool(port)
    held: list[socket.socket] = []
    kinds = ["clean", "rst", "half-open"]
    failures: list[str] = []

    def worker(n: int, seed: int) -> None:
        rng = random.Random(seed)
        pace = over / max(1, n)
        started = time.monotonic()
        for i in range(n):
            try:
                churn_one(port, path, rng.choice(kinds), held)
            except (OSError, AssertionError) as e:
                failures.append(repr(e))
            # spread evenly over `over` seconds, no faster
            ahead = started + (i + 1) * pace - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)

    def churn_beside_traffic(n: int) -> float:
        """`n` churned connections while the producer writes 100/s; then a quiet point."""
        stop = threading.Event()
        writer = threading.Thread(target=producer.produce_at, args=(100, 3600, stop),
                                  daemon=True)
        writer.start()
        threads = [threading.Thread(target=worker, args=(n // WORKERS, k), daemon=True)
                   for k in range(WORKERS)]
        started = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        took = time.monotonic() - started
        stop.set()
        writer.join(10)
        producer.flush()
        pool.wait_complete(lambda: producer.next, timeout=120)
        return took

    try:
        pool.open([path] * steady, PARTITIONS)  # before the cache fills: they get everything
        # one record per partition first, so every stream is placed before the burst (see
        # test_burst_at_open.py for what a burst at once does to them)
        producer.produce(PARTITIONS)
        producer.flush()
        pool.wait_complete(lambda: producer.next, timeout=30)
        producer.produce(CACHE * 2)
        producer.flush()
        pool.wait_complete(lambda: producer.next, timeout=60)
        # warm up with a round of the same size, so the baseline is not the cold daemon and the
        # allocator's high-water mark of one round is already reached (measured: about 1 KiB
        # more per churned connection and round after that, still under investigation)
        churn_beside_traffic(churn)
        wait_for(lambda: usage(pid).fds <= steady + 40, HEADER_TIMEOUT + 15, "warm-up to settle")
        for s in held:
            s.close()
        held.clear()
        time.sleep(0.5)
        base = usage(pid)

        took = churn_beside_traffic(churn)
        peak = usage(pid)
        # the daemon closes the half-open ones at its header deadline
        wait_for(lambda: usage(pid).fds <= base.fds * 1.1, HEADER_TIMEOUT + 30,
                 f"fds back near {base.fds}")
        time.sleep(0.5)
        after = usage(pid)
    finally:
        pool.close()
        for s in held:
            s.close()
    print(f"\nchurn: {churn} connections (clean/RST/half-open) in {took:.1f} s beside {steady} "
          f"streams; fds {base.fds} -> {peak.fds} at the end of churn -> {after.fds}; "
          f"RSS {base.rss / 2**20:.1f} -> {after.rss / 2**20:.1f} MiB; "
          f"{producer.total} records per stream, none lost")
    assert not failures, failures[:5]
    assert not pool.problems()
    assert all(s.connects == 1 for s in pool.streams), "a steady stream was dropped"
    assert after.fds <= base.fds * 1.1
    assert after.rss <= base.rss * 1.1, f"RSS {base.rss} -> {after.rss}"
    assert daemon.alive()
    assert not tracebacks(daemon.output()), daemon.output()
