"""Slow-client benchmark: clients that never read beside clients that read at full speed.

Finding 2 of the reliability review measured 1,000 HTTP/2 streams with a zero window over 2 MB
of history growing the daemon by 1.5 GB: each new stream encoded up to 2,000 records before its
transport could pause it. This measures the same situation on the real daemon and broker:

- ~2 MB of history (2,000 records of ~1 KB) in one topic, already in the daemon's cache;
- *silent* clients that never read: HTTP/1.1 sockets with a 1 KiB receive buffer that never
  `recv`, and HTTP/2 connections (prior knowledge) whose SETTINGS give every stream a zero
  window, 100 streams each, that never read either;
- *readers* at full speed on the same topic: each must get the whole history and every live
  event produced while it all runs (counted per stream: `complete`), and the live events'
  produce-to-receive latency is taken on every reader (p50/p99). Live events are produced once
  every reader has the history (how long that took is `reader_catch_up_s`): a live event cannot
  reach a reader before the history does, so producing earlier would time the catch-up.

Reported: the daemon's RSS before, its peak while it runs (sampled every 20 ms), the growth and
growth per silent stream; the readers' completeness and latency. Quick by default (`make
bench`); `FULL=1` for the full size (1,000 silent, 100 readers).

    python -m bench.slow_clients            # quick: 100 + 100 silent, 20 readers
    FULL=1 python -m bench.slow_clients     # full: 500 + 500 silent, 100 readers
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import socket
import time
from typing import Any

from bench.common import RESULTS, PeakRss, table
from bench.fanout.rig import Reader, Rig, percentile
from tests.support.silent_clients import silent_h1, silent_h2

HISTORY = 2000
VALUE = b"h " + b"v" * 1000  # "h" is no timestamp: the reader times live events only
H2_STREAMS = 100  # per HTTP/2 connection


def sizes() -> dict[str, int]:
    full = os.environ.get("FULL") == "1"
    return {"silent_h1": 500 if full else 100, "silent_h2": 500 if full else 100,
            "readers": 100 if full else 20, "rate": 100, "seconds": 20 if full else 10}


def _readers(port: int, path: str, n: int, ready: Any, expected: Any, deadline: Any,
             out: Any, caught: Any = None) -> None:
    """Open `n` streams, count every event of each, time every live event; set `caught` once
    every stream has the history."""
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: b\r\n\r\n".encode())
        socks.append(s)
    reader = Reader(socks, set(range(n)))
    ready.set()
    started = time.time()
    caught_up: list[float] = []

    def done() -> bool:
        if not caught_up and min(reader.counts) >= HISTORY:
            caught_up.append(time.time() - started)
            if caught is not None:
                caught.set()
        want = expected.value
        if want >= 0 and min(reader.counts) >= want:
            return True
        return deadline.value > 0 and time.time() > deadline.value

    reader.run(done)
    out.put((reader.counts, reader.latencies, caught_up[0] if caught_up else None))
    for s in socks:
        s.close()


def run(rig: Rig, silent_h1_n: int, silent_h2_n: int, readers: int, rate: float,
        seconds: float) -> dict[str, Any]:
    topic = rig.topic(f"slow-{time.monotonic_ns()}", 1)
    for _ in range(HISTORY):
        rig.producer.produce(topic, VALUE)
    rig.producer.flush(10)
    path = f"/events/{topic}"
    ctx = mp.get_context("fork")
    # warm up: one reader takes the whole history, so it is in the daemon's cache
    ready, expected, deadline, out = ctx.Event(), ctx.Value("q", HISTORY), ctx.Value("d", 0.0), \
        ctx.Queue()
    w = ctx.Process(target=_readers, args=(rig.port, path, 1, ready, expected, deadline, out))
    w.start()
    out.get(timeout=120)
    w.join(10)
    time.sleep(1.0)
    with PeakRss(rig.daemon.pid) as rss:
        silent = [silent_h1(rig.port, path) for _ in range(silent_h1_n)]
        silent += [silent_h2(rig.port, path, H2_STREAMS)[0]
                   for _ in range(silent_h2_n // H2_STREAMS)]
        time.sleep(2.0)  # every silent stream opened and got what it will get
        settled = rig.rss()
        ready, expected, deadline, out = ctx.Event(), ctx.Value("q", -1), ctx.Value("d", 0.0), \
            ctx.Queue()
        caught = ctx.Event()
        p = ctx.Process(target=_readers,
                        args=(rig.port, path, readers, ready, expected, deadline, out, caught))
        p.start()
        ready.wait(60)
        caught.wait(120)
        sent = rig.produce_at(topic, rate, seconds)
        expected.value = HISTORY + sent
        deadline.value = time.time() + 30.0
        counts, lat, caught_up = out.get(timeout=120)
        p.join(30)
    alive = rig.daemon.poll() is None
    for s in silent:
        s.close()
    silent_n = silent_h1_n + silent_h2_n // H2_STREAMS * H2_STREAMS
    return {
        "silent_h1": silent_h1_n, "silent_h2": silent_h2_n // H2_STREAMS * H2_STREAMS,
        "readers": readers, "history_events": HISTORY, "history_mib": round(
            HISTORY * len(VALUE) / 2**20, 2),
        "live_rate": rate, "live_events": sent,
        "rss_before_mib": round(rss.before / 2**20, 1),
        "rss_with_silent_mib": round(settled / 2**20, 1),
        "rss_peak_mib": round(rss.peak / 2**20, 1),
        "rss_growth_mib": round(rss.growth / 2**20, 1),
        "growth_per_silent_kib": round(rss.growth / silent_n / 1024, 1),
        "readers_complete": sum(1 for c in counts if c == HISTORY + sent),
        "readers_over": sum(1 for c in counts if c > HISTORY + sent),
        "reader_catch_up_s": round(caught_up, 2) if caught_up is not None else None,
        "live_latency_samples": len(lat),
        "p50_ms": round(percentile(lat, 0.5) * 1000, 2), "p99_ms": round(percentile(lat, 0.99) * 1000, 2),
        "daemon_alive": alive, "load_avg": round(os.getloadavg()[0], 2),
    }


def main() -> dict[str, Any]:
    size = sizes()
    rig = Rig()
    try:
        result = run(rig, size["silent_h1"], size["silent_h2"], size["readers"], size["rate"],
                     size["seconds"])
    finally:
        rig.close()
    print(table("Clients that never read beside readers at full speed",
                ["silent (h1 + h2)", "readers", "RSS before MiB", "peak MiB", "growth MiB",
                 "KiB / silent", "readers complete", "p50 ms", "p99 ms"],
                [[f"{result['silent_h1']} + {result['silent_h2']}", result["readers"],
                  result["rss_before_mib"], result["rss_peak_mib"], result["rss_growth_mib"],
                  result["growth_per_silent_kib"],
                  f"{result['readers_complete']}/{result['readers']}",
                  result["p50_ms"], result["p99_ms"]]]))
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "slow_clients.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    main()
