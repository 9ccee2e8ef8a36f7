"""Soak: many clients stream at a steady rate for a long time. Nothing is lost, repeated or
reordered (checked per event), no stream is dropped, the daemon's fd count stays flat, and its
memory does not grow with the events it delivers.

The memory bound is measured between two quiet points (producer paused, every stream caught
up), so nothing in flight is counted: the first half of the run is a warm-up (the cache fills to
its bound of `CACHE` records, the allocator reaches its high-water mark for this load), then the
resident memory at rest is taken (the median of a second's samples), the second half runs, and
it is taken again. What grew, divided by the events delivered in the second half, must stay
under `BYTES_PER_EVENT`.

Measured (100 clients, 100 records/s, 10 s after a 10 s warm-up, 99,900 events): +2.7 bytes
an event, the same in two runs (at 50 records/s over 20 s: +2.2; tracemalloc in the daemon sees
no live Python objects grow over that half beyond the cache's replaced records and the streams'
rearmed keepalive timers, so it is below Python: allocator pages and librdkafka's buffers). The
smallest leak Python can have, a stream keeping a reference to each chunk it writes (an 8-byte
list slot per event, the chunk itself shared by every stream), measured +15.7 bytes an event
(+10.7 at 50 records/s over 20 s) and fails here; anything that copies what it keeps is larger
still. Fewer events do not tell them apart (50,000 at 50 records/s: the same leak measured 4.8
bytes an event, the kept list growing by reallocation and its pages touched late).

The RSS is also sampled four times a second; the least-squares slope over the second half and
the samples go to `bench/results/test-soak.json` for the long run's record (the day-scale
benchmark, `python -m bench.soak`, writes its own `soak.json` beside it).

Default: 20 s at 100 clients x 100 events/s. `RELIABILITY_SECONDS=600`: 10 minutes at 1,000
clients x 50 events/s.
"""

from __future__ import annotations

import json
import statistics
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

PARTITIONS = 3
#: Records the daemon's cache keeps: fewer than the warm-up produces, so it is full (and stays
#: the same size) before the baseline.
CACHE = 200
#: How much the daemon's resident memory may grow per event delivered after the warm-up.
BYTES_PER_EVENT = 6.0
#: RSS samples a second while streaming (for the slope) and at rest (for the two quiet points).
SAMPLES_PER_SECOND = 4
RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results"


def slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (x, y) points."""
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    var = sum((x - mx) ** 2 for x, _ in points)
    return sum((x - mx) * (y - my) for x, y in points) / var if var else 0.0


def rss_at_rest(pid: int) -> int:
    """The median of a second's RSS samples with nothing in flight."""
    samples = []
    for _ in range(SAMPLES_PER_SECOND + 1):
        samples.append(usage(pid).rss)
        time.sleep(1 / SAMPLES_PER_SECOND)
    return int(statistics.median(samples))


@pytest.mark.broker
@pytest.mark.daemon
def test_soak(daemons: list[Daemon], tmp_path: Path, kafka_broker: Broker) -> None:
    clients = sized(100, 1000)
    rate = sized(100, 50)  # records per second, each to every client
    duration = seconds(20)
    raise_fd_limit(4 * clients + 1024)
    bootstrap = kafka_broker.bootstrap
    topic = f"soak-{time.monotonic_ns()}"
    create_topic(bootstrap, topic, PARTITIONS)
    producer = SeqProducer(bootstrap, topic, PARTITIONS)
    daemon, port = run_daemon(daemons, tmp_path, bootstrap, cache_messages=CACHE)
    pid = daemon.process.pid
    pool = StreamPool(port)
    samples: list[tuple[float, int, int]] = []  # seconds, rss, fds
    started = time.monotonic()

    def stream_for(half: float) -> None:
        """`rate` records a second for `half` seconds, sampling; then a quiet point."""
        writer = threading.Thread(target=producer.produce_at, args=(rate, half), daemon=True)
        writer.start()
        while writer.is_alive():
            u = usage(pid)
            samples.append((time.monotonic() - started, u.rss, u.fds))
            writer.join(1 / SAMPLES_PER_SECOND)
        producer.flush()
        pool.wait_complete(lambda: producer.next, timeout=60 + half / 2)

    try:
        pool.open([f"/events/{topic}"] * clients, PARTITIONS)
        stream_for(duration / 2)  # the warm-up
        assert producer.total > CACHE, "the warm-up fills the cache"
        base, records_before = rss_at_rest(pid), producer.total
        measured_from = time.monotonic() - started
        stream_for(duration / 2)
        after = rss_at_rest(pid)
    finally:
        pool.close()
    delivered = (producer.total - records_before) * clients
    per_event = (after - base) / delivered
    second_half = [(t, rss / 2 ** 20) for t, rss, _ in samples if t >= measured_from]
    rss_slope = slope(second_half) * 60  # MiB per minute
    fds = [f for _, _, f in samples]
    # the first seconds open the Kafka connections; from then on nothing should come or go
    settled = [f for t, _, f in samples if t >= min(5.0, duration / 4)]
    result = {
        "clients": clients, "rate_per_second": rate, "seconds": duration,
        "records_per_client": producer.total, "events_delivered": producer.total * clients,
        "rss_mib_start": samples[0][1] / 2 ** 20, "rss_mib_end": samples[-1][1] / 2 ** 20,
        "rss_mib_at_rest_after_warm_up": base / 2 ** 20, "rss_mib_at_rest_end": after / 2 ** 20,
        "events_after_warm_up": delivered, "rss_bytes_per_event_after_warm_up": per_event,
        "rss_slope_mib_per_minute_second_half": rss_slope,
        "fds_min": min(fds), "fds_max": max(fds),
        "samples": [{"t": round(t, 2), "rss": rss, "fds": f} for t, rss, f in samples],
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "test-soak.json").write_text(json.dumps(result, indent=1))
    print(f"\nsoak: {clients} clients x {rate}/s for {duration:.0f} s, {producer.total} records "
          f"each, none lost; RSS at rest {base / 2 ** 20:.2f} -> {after / 2 ** 20:.2f} MiB over "
          f"{delivered} events after the warm-up ({per_event:+.2f} bytes/event), slope "
          f"{rss_slope:+.2f} MiB/min; fds {min(fds)}..{max(fds)}")
    assert not pool.problems()
    assert all(s.connects == 1 for s in pool.streams), "a stream was dropped"
    assert max(settled) - min(settled) <= 5, f"fds moved {settled} with no churn"
    assert per_event <= BYTES_PER_EVENT, (
        f"RSS grew {(after - base) / 2 ** 10:.0f} KiB over {delivered} events after the warm-up:"
        f" {per_event:.1f} bytes/event, more than {BYTES_PER_EVENT}")
    assert daemon.alive()
    assert not tracebacks(daemon.output()), daemon.output()
