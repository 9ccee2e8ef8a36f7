"""A day in an hour: a day's key-filtered events through 20,000 streams, watched every minute.

The shape of Zilla #1340 ("stops sending updates after a couple of days": 10 million events a
day, 50,000 keys, 20,000 connections each filtering on a key, 2 CPUs), played at 24 times its
speed: a compacted topic of `--keys` keys (one record each), `--streams` streams of one key each
(`/items/<key>`, the rig, clients and producer of bench/filtered.py's `items`), then `--events`
updates of random keys spread evenly over `--minutes`. Every `--interval` seconds it prints a
row: what was produced, what the streams got and how late (write to arrival), the daemon's RSS
and open files (all its processes), its cache's records and bytes and its consumer lag (from
/metrics).

It judges itself at the end. Every stream must end at its key's last value, never get a value
twice or out of order, and never end; a stream that fell behind may get a key's latest value
instead of each update in between (a compacted topic's rule, `Streams(compacted=True)`), and
those skipped updates are counted. Nothing stops: every interval after the first delivers. And
memory is flat once the cache is full: the RSS slope (least squares over samples every 5 s) from
the first sample where the cache holds its most records to the end.

Prints the table and verdict and writes bench/results/soak.json.

    python -m bench.soak                  # 3 minutes at the day's rate (2,778/s), 2,000 streams
    FULL=1 python -m bench.soak           # the day: 10,000,000 events, 20,000 streams, 60 min
    python -m bench.soak --minutes 10 --streams 20000   # any size in between
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import random
import sys
import time
import urllib.request
from collections.abc import Callable
from typing import Any

from cryptography.hazmat.primitives.asymmetric import ec

from bench import filtered
from bench.common import table, write_result
from bench.fanout import rig as fanout
from bench.jwt_guard import _jwk
from tests.support import zilla_config as zc

#: The day of Zilla #1340.
DAY_EVENTS = 10_000_000
DAY_STREAMS = 20_000
DAY_KEYS = 50_000
#: The day's rate, played in an hour.
DAY_RATE = DAY_EVENTS / 3600
#: Seconds between RSS samples (for the slope; the table shows one per interval).
SAMPLE_EVERY = 5.0
#: The topic the streams read (bench/filtered.py's `/items/{id}` route).
TOPIC = "items"


# -- load clients ---------------------------------------------------------------------------

def _client(port: int, paths: list[str], names: list[str], ready: Any, control: Any,
            out: Any) -> None:
    """Open the streams and wait for each one's seq 0, then read; on "tick" report what came
    since the last one, on (last seqs, wait) read until every stream has its key's last seq
    (or the wait runs out) and report the end."""
    streams = filtered.Streams(port, paths, names, snapshot=True, compacted=True)
    started = time.time()
    while min(streams.next) == 0 and time.time() - started < 900:
        streams.read(0.2)
    ready.put(len(paths))
    while True:
        streams.read(0.2)
        if control.empty():
            continue
        order = control.get()
        if order == "tick":
            lat = streams.latencies
            streams.latencies = []
            out.put({"events": streams.events, "faults": streams.faults,
                     "coalesced": streams.coalesced,
                     "latencies": lat[::max(1, len(lat) // 5000)]})
            continue
        final, wait = order
        deadline = time.time() + wait
        while streams.complete(final) < len(paths) and time.time() < deadline:
            streams.read(0.2)
        out.put({"streams": len(paths), "complete": streams.complete(final),
                 "faults": streams.faults, "events": streams.events,
                 "coalesced": streams.coalesced})
        break
    for s in streams.socks:
        s.close()


# -- producer -------------------------------------------------------------------------------

def _produce(bootstrap: str, keys: int, rate: float, seconds: float, sent: Any,
             out: Any) -> None:
    """Update random keys at `rate`/s for `seconds` (filtered.py's values: `<key> <seq> <ts>`),
    counting in `sent`; put every key's last seq on `out` at the end."""
    p = filtered.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5,
                           "enable.idempotence": True})
    last = {f"item-{k}": 0 for k in range(keys)}
    rng = random.Random(11)

    def one() -> None:
        name = f"item-{rng.randrange(keys)}"
        last[name] += 1
        filtered._send(p, TOPIC, name, filtered._value(name, last[name]))
        sent.value += 1

    filtered.paced(p, rate, seconds, one)
    out.put(last)


# -- the daemon's figures -------------------------------------------------------------------

def scrape(port: int) -> dict[str, float]:
    """The topic's cache records and bytes and the consumer lag summed over its partitions,
    from the daemon's /metrics (the parent's sum of its workers: `max` for these)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=20) as r:
        text = r.read().decode()
    figures = {"cache_records": 0.0, "cache_bytes": 0.0, "lag": 0.0}
    names = {"kafka_cache_messages": "cache_records", "kafka_cache_size_bytes": "cache_bytes",
             "kafka_consumer_lag": "lag"}
    for line in text.splitlines():
        if line.startswith("#") or f'topic="{TOPIC}"' not in line:
            continue
        name = line.split("{", 1)[0]
        if name in names:
            figures[names[name]] += float(line.rsplit(" ", 1)[1])
    return figures


def with_daemon_fetch(template: Callable[[int, str, int], zc.Node]
                      ) -> Callable[[int, str, int], zc.Node]:
    """`template` with ssekd's own fetch settings instead of the other benches' 10 ms wait.

    A day's steady load is what the development broker does not keep up with at 10 ms: it
    answers such a fetch when the wait is over, before it has read the records, so it answers
    it empty; a consumer set so receives almost nothing while a new consumer with the daemon's
    default (100 ms) reads the same offsets at full speed (bench/README.md, "A day in an
    hour"). A real Kafka answers as soon as it has records."""
    def built(port: int, bootstrap: str, metrics_port: int) -> zc.Node:
        config = template(port, bootstrap, metrics_port)
        config["bindings"]["kafka_client"]["options"].pop("properties", None)
        return config
    return built


def fds(rig: fanout.Rig) -> int:
    return sum(p.num_fds() for p in rig.ssekd.processes())


def slope_mib_per_hour(samples: list[tuple[float, int]]) -> float | None:
    """Least-squares slope of (seconds, rss bytes) in MiB per hour; None under 3 samples."""
    if len(samples) < 3:
        return None
    n = len(samples)
    mx = sum(t for t, _ in samples) / n
    my = sum(r for _, r in samples) / n
    var = sum((t - mx) ** 2 for t, _ in samples)
    if var == 0:
        return None
    cov = sum((t - mx) * (r - my) for t, r in samples)
    return cov / var * 3600 / 2**20


# -- the run --------------------------------------------------------------------------------

def soak(rig: fanout.Rig, streams: int, keys: int, events: int, seconds: float,
         interval: float, settle: float) -> dict[str, Any]:
    filtered.compacted_topic(rig, TOPIC, keys)
    chosen = random.Random(7).sample(range(keys), streams)
    paths = [f"/items/item-{k}" for k in chosen]
    names = [f"item-{k}" for k in chosen]
    ctx = mp.get_context("fork")
    chunks = [list(range(i, min(i + filtered.PER_CLIENT, streams)))
              for i in range(0, streams, filtered.PER_CLIENT)]
    ready: Any = ctx.Queue()
    out: Any = ctx.Queue()
    controls = [ctx.Queue() for _ in chunks]
    t0 = time.time()
    clients = [ctx.Process(target=_client, args=(rig.port, [paths[i] for i in c],
                                                 [names[i] for i in c], ready, controls[k], out))
               for k, c in enumerate(chunks)]
    for c in clients:
        c.start()
    for _ in clients:
        ready.get(timeout=1200)
    opened = round(time.time() - t0, 1)
    print(f"{streams:,} streams open with their key's value in {opened} s", flush=True)

    rate = events / seconds
    sent: Any = ctx.Value("q", 0, lock=False)
    lasts: Any = ctx.Queue()
    producer = ctx.Process(target=_produce, args=(rig.broker.bootstrap, keys, rate, seconds,
                                                  sent, lasts))
    rows: list[dict[str, Any]] = []
    rss: list[tuple[float, int]] = []
    cache: list[float] = []
    delivered = 0
    start = time.time()
    producer.start()
    next_row = start + interval
    last: dict[str, int] | None = None
    while last is None:
        time.sleep(SAMPLE_EVERY)
        now = time.time()
        rss.append((now - start, rig.rss()))
        if now >= next_row or not lasts.empty():
            next_row += interval
            for q in controls:
                q.put("tick")
            ticks = [out.get(timeout=120) for _ in clients]
            metrics = scrape(rig.metrics_port)
            cache.append(metrics["cache_records"])
            total = sum(t["events"] for t in ticks)
            lat = sorted(x for t in ticks for x in t["latencies"])
            rows.append({
                "minute": round((now - start) / 60, 1), "produced": sent.value,
                "delivered": total - delivered, "delivered_total": total,
                "faults": sum(t["faults"] for t in ticks),
                "coalesced": sum(t["coalesced"] for t in ticks),
                "p50_ms": round(fanout.percentile(lat, 0.5) * 1000, 1) if lat else None,
                "p99_ms": round(fanout.percentile(lat, 0.99) * 1000, 1) if lat else None,
                "rss_mib": round(rss[-1][1] / 2**20, 1), "fds": fds(rig),
                "cache_records": int(metrics["cache_records"]),
                "cache_mib": round(metrics["cache_bytes"] / 2**20, 1),
                "lag": int(metrics["lag"]), "load": round(os.getloadavg()[0], 2),
                "_t": now - start})
            delivered = total
            print(row_text(rows[-1]), flush=True)
        # the producer puts its last seqs when it is done, and cannot exit before they are
        # read (a dict of every key is more than a pipe holds): read them, then join it
        if not lasts.empty():
            last = lasts.get()
        elif not producer.is_alive():
            last = lasts.get(timeout=60)
    producer.join(30)
    produced_seconds = time.time() - start
    for q in controls:
        q.put((last, settle))
    ended = time.time()
    results = [out.get(timeout=settle + 120) for _ in clients]
    settled = round(time.time() - ended, 1)
    for c in clients:
        c.join(30)

    # memory after the cache is full: from the first row where it held its most records
    full_at = next((r["_t"] for r in rows if r["cache_records"] >= max(cache) * 0.999), None)
    after = [(t, b) for t, b in rss if full_at is not None and t >= full_at - interval]
    # an interval in which records were written and no stream got any
    stopped = [r["minute"] for prev, r in zip(rows, rows[1:])
               if r["delivered"] == 0 and r["produced"] > prev["produced"]]
    complete = sum(r["complete"] for r in results)
    faults = sum(r["faults"] for r in results)
    slope = slope_mib_per_hour(after)
    # the same over the second half of those samples: past the warm-up of the first minutes
    # (socket buffers, the allocator's arenas), what a longer run would keep growing by
    later = slope_mib_per_hour(after[len(after) // 2:])
    for r in rows:
        del r["_t"]
    return {
        "streams": streams, "keys": keys, "events": sum(last.values()), "rate": round(rate),
        "seconds": round(produced_seconds), "open_seconds": opened, "rows": rows,
        "complete": complete, "faults": faults,
        "delivered": sum(r["events"] for r in results),
        "coalesced": sum(r["coalesced"] for r in results),
        # what the streams' keys were owed: their seq 0 and every update after it
        "owed": sum(last[n] + 1 for n in names),
        "settle_seconds": settled, "stopped_minutes": stopped,
        "cache_full_minute": round(full_at / 60, 1) if full_at is not None else None,
        "rss_slope_mib_per_hour": round(slope, 1) if slope is not None else None,
        "rss_slope_second_half_mib_per_hour": round(later, 1) if later is not None else None,
        "rss_samples_after_full": len(after),
        "rss_mib_samples": [[round(t), round(b / 2**20, 1)] for t, b in rss],
        "rss_mib_first_last_after_full": [round(after[0][1] / 2**20, 1),
                                          round(after[-1][1] / 2**20, 1)] if after else None,
        "failed": (failed := verdict(streams, complete, faults, stopped, later)),
        "passed": not failed,
    }


#: The RSS slope over the second half of the samples taken once the cache is full, at most, for
#: the memory to count as flat: 10 MiB an hour (a day's growth under half the RSS of the run).
FLAT_MIB_PER_HOUR = 10.0


def verdict(streams: int, complete: int, faults: int, stopped: list[float],
            later_slope: float | None) -> list[str]:
    """What the run failed (none: it passed): every stream ends with its key's last value and
    nothing twice or out of order, no interval with writes went without a delivery, and the
    memory stays flat once the cache is full (its slope over the second half of those samples;
    too few samples to tell is a failure too)."""
    failed = []
    if complete != streams:
        failed.append(f"{streams - complete:,} of {streams:,} streams did not end at their "
                      f"key's last value")
    if faults:
        failed.append(f"{faults:,} events missing, twice or out of order")
    if stopped:
        failed.append(f"no delivery in the intervals ending at minutes {stopped}")
    if later_slope is None:
        failed.append("too few RSS samples after the cache was full to tell its slope")
    elif later_slope > FLAT_MIB_PER_HOUR:
        failed.append(f"RSS grew {later_slope:.1f} MiB/hour after the cache was full "
                      f"(flat: at most {FLAT_MIB_PER_HOUR:.0f})")
    return failed


HEADER = ["min", "produced", "delivered", "faults", "coalesced", "p50 ms", "p99 ms", "RSS MiB",
          "fds", "cache records", "cache MiB", "lag", "load"]


def row_cells(r: dict[str, Any]) -> list[Any]:
    return [r["minute"], r["produced"], r["delivered"], r["faults"], r["coalesced"], r["p50_ms"],
            r["p99_ms"], r["rss_mib"], r["fds"], r["cache_records"], r["cache_mib"], r["lag"],
            r["load"]]


def row_text(r: dict[str, Any]) -> str:
    return "  ".join(f"{h}={c}" for h, c in zip(HEADER, row_cells(r)))


def print_report(r: dict[str, Any]) -> None:
    print(table(f"a day in an hour: {r['events']:,} events at {r['rate']:,}/s over "
                f"{r['keys']:,} keys, {r['streams']:,} key streams (per interval; delivered = "
                "events the streams got in it)", HEADER, [row_cells(x) for x in r["rows"]]))
    slope = r["rss_slope_mib_per_hour"]
    print(f"\nstreams complete (last value of their key, nothing twice or out of order): "
          f"{r['complete']:,}/{r['streams']:,}; faults {r['faults']}; delivered "
          f"{r['delivered']:,} of {r['owed']:,} owed, {r['coalesced']:,} updates coalesced "
          f"(a compacted topic's latest value instead); settled {r['settle_seconds']} s after "
          f"the last write")
    print(f"intervals without delivery: {r['stopped_minutes'] or 'none'}; cache full at minute "
          f"{r['cache_full_minute']}; RSS after it {r['rss_mib_first_last_after_full']} MiB, "
          f"slope {slope if slope is not None else 'n/a'} MiB/hour "
          f"({r['rss_samples_after_full']} samples), over their second half "
          f"{r['rss_slope_second_half_mib_per_hour']} MiB/hour")
    print(f"verdict: {'PASS' if r['passed'] else 'FAIL: ' + '; '.join(r['failed'])}")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="the short run even under FULL=1")
    parser.add_argument("--minutes", type=float, help="how long to produce (3; FULL=1: 60)")
    parser.add_argument("--events", type=int,
                        help=f"updates in all (default: the day's rate, {DAY_RATE:,.0f}/s, "
                             "times the minutes)")
    parser.add_argument("--streams", type=int, help="key streams (2,000; FULL=1: 20,000)")
    parser.add_argument("--keys", type=int, default=DAY_KEYS, help="keys on the topic (50,000)")
    parser.add_argument("--interval", type=float, default=60.0,
                        help="seconds between rows (60)")
    parser.add_argument("--settle", type=float, default=300.0,
                        help="seconds the streams may take after the last write (300)")
    args = parser.parse_args(argv)
    full = bool(os.environ.get("FULL")) and not args.quick
    minutes = args.minutes or (60.0 if full else 3.0)
    events = args.events or round(DAY_RATE * minutes * 60)
    streams = args.streams or (DAY_STREAMS if full else 2_000)
    if streams > args.keys:
        parser.error("--streams is at most --keys (one key per stream)")
    jwk = _jwk(ec.generate_private_key(ec.SECP256R1()), "ES256", "bench")
    workers = max(1, -(-streams // filtered.PER_WORKER))
    rig = fanout.Rig(with_daemon_fetch(filtered.config(jwk)), workers=workers)
    try:
        result = soak(rig, streams, args.keys, events, minutes * 60, args.interval, args.settle)
    finally:
        rig.close()
    result.update({"full": full, "workers": workers,
                   "command": " ".join(["python -m bench.soak", *(argv or sys.argv[1:])])})
    path = write_result("soak", result)
    print_report(result)
    print(f"\nwritten to {path}")
    return result


if __name__ == "__main__":
    sys.exit(0 if main()["passed"] else 1)
