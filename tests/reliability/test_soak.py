"""Soak: many clients stream at a steady rate for a long time. Nothing is lost, repeated or
reordered (checked per event), no stream is dropped, the daemon's fd count stays flat, and its
RSS is sampled every second; the slope (least squares over the second half, after the cache
and allocator warmed up) and the samples go to `bench/results/soak.json`.

Default: 20 s at 100 clients x 50 events/s. `RELIABILITY_SECONDS=600`: 10 minutes at 1,000.
"""

from __future__ import annotations

import json
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
    run_daemon,
    seconds,
    sized,
    time_limit,
    tracebacks,
    usage,
)

pytestmark = pytest.mark.timeout(time_limit())

RATE = 50  # records per second, each to every client
PARTITIONS = 3
RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results"


def slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (x, y) points."""
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    var = sum((x - mx) ** 2 for x, _ in points)
    return sum((x - mx) * (y - my) for x, y in points) / var if var else 0.0


@pytest.mark.broker
@pytest.mark.daemon
def test_soak(daemons: list[Daemon], tmp_path: Path, kafka_broker: Broker) -> None:
    clients = sized(100, 1000)
    duration = seconds(20)
    raise_fd_limit(4 * clients + 1024)
    bootstrap = kafka_broker.bootstrap
    topic = f"soak-{time.monotonic_ns()}"
    create_topic(bootstrap, topic, PARTITIONS)
    producer = SeqProducer(bootstrap, topic, PARTITIONS)
    daemon, port = run_daemon(daemons, tmp_path, bootstrap)
    pid = daemon.process.pid
    pool = StreamPool(port)
    samples: list[tuple[float, int, int]] = []  # seconds, rss, fds
    try:
        pool.open([f"/events/{topic}"] * clients, PARTITIONS)
        writer = threading.Thread(target=producer.produce_at, args=(RATE, duration),
                                  daemon=True)
        started = time.monotonic()
        writer.start()
        while writer.is_alive():
            u = usage(pid)
            samples.append((time.monotonic() - started, u.rss, u.fds))
            writer.join(1.0)
        producer.flush()
        pool.wait_complete(lambda: producer.next, timeout=60 + duration / 4)
    finally:
        pool.close()
    second_half = [(t, rss / 2 ** 20) for t, rss, _ in samples if t >= duration / 2]
    rss_slope = slope(second_half) * 60  # MiB per minute
    fds = [f for _, _, f in samples]
    # the first seconds open the Kafka connections; from then on nothing should come or go
    settled = [f for t, _, f in samples if t >= min(5.0, duration / 4)]
    result = {
        "clients": clients, "rate_per_second": RATE, "seconds": duration,
        "records_per_client": producer.total, "events_delivered": producer.total * clients,
        "rss_mib_start": samples[0][1] / 2 ** 20, "rss_mib_end": samples[-1][1] / 2 ** 20,
        "rss_slope_mib_per_minute_second_half": rss_slope,
        "fds_min": min(fds), "fds_max": max(fds),
        "samples": [{"t": round(t, 1), "rss": rss, "fds": f} for t, rss, f in samples],
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "soak.json").write_text(json.dumps(result, indent=1))
    print(f"\nsoak: {clients} clients x {RATE}/s for {duration:.0f} s, {producer.total} records "
          f"each, none lost; RSS {result['rss_mib_start']:.1f} -> {result['rss_mib_end']:.1f} "
          f"MiB, slope {rss_slope:+.2f} MiB/min over the second half; fds {min(fds)}..{max(fds)}")
    assert not pool.problems()
    assert all(s.connects == 1 for s in pool.streams), "a stream was dropped"
    assert max(settled) - min(settled) <= 5, f"fds moved {settled} with no churn"
    assert daemon.alive()
    assert not tracebacks(daemon.output()), daemon.output()
