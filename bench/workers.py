"""Scale-out benchmark: what `--workers` buys on this machine, and how many idle streams one
machine holds.

1. The fan-out scenario 1,000 clients x 250 events/s (bench/fanout), and 2,000 x 250/s,
   each with 1 worker and with one per core, in the same run: events delivered while the
   producer ran (what a daemon that falls behind cannot deliver in time) and in all,
   completeness (every stream counted), latency, the daemon's CPU summed over its processes.
   Per-core figures (deliveries per CPU-second) come from these runs.
2. With --full: 50,000 concurrent idle streams held by several load-client
   processes, each connecting from its own loopback address (127.0.0.x) so that source ports
   do not run out; then a broadcast at 10 events/s that every stream must receive, nothing
   lost. Reports the connect rate, the daemon's memory per stream and the broadcast's delivery.

Each worker and each load client stays under this machine's open-file limit: the stream count
is split over enough of both.

    python -m bench.workers            # the 1 vs N workers fan-out
    python -m bench.workers --quick    # smaller numbers
    python -m bench.workers --full     # and the 50,000 idle streams (make bench FULL=1
                                       # runs bench.many_streams, 100,000, instead)
"""

from __future__ import annotations

import argparse
import math
import multiprocessing as mp
import os
import resource
import select
import socket
import sys
import time
from typing import Any

from bench.common import table, write_result
from bench.fanout.rig import Rig, config
from bench.fanout.scenarios import fanout
from tests.support import zilla_config as zc

#: Streams per process at most (daemon workers and load clients): below the open-file limit.
PER_PROCESS = 12_500
#: Bytes of each broadcast event's payload.
PAD = 64
def idle_config(port: int, bootstrap: str, metrics_port: int) -> zc.Node:
    """The fan-out config with room for many streams per process (the default keeps one
    process to 10,000 streams; the fan-out config already lets one address open 19,000)."""
    built = config(port, bootstrap, metrics_port)
    built["bindings"]["sse"]["options"] = {"limits": {"streams": 20000}}
    return built


def cores() -> int:
    return len(os.sched_getaffinity(0))


def compare_workers(quick: bool) -> dict[str, Any]:
    """Each scenario with 1 worker, then one per core. 1,000 x 250/s is the issue's scenario;
    2,000 x 250/s asks more than one process can deliver on a 2-core machine, which is where
    workers show (when one process keeps up, both deliver everything and tie)."""
    scenarios = [(300, 250, 5)] if quick else [(1000, 250, 10), (2000, 250, 10)]
    runs = []
    for clients, rate, seconds in scenarios:
        for workers in sorted({1, max(2, cores())}):
            rig = Rig(idle_config, workers=workers)
            try:
                run = fanout(rig, clients, rate, seconds, procs=max(1, clients // 1000))
            finally:
                rig.close()
            run["workers"] = workers
            cpu_s = run["daemon_cpu_pct"] / 100 * run["seconds"]
            run["deliveries_per_cpu_s"] = round(run["delivered"] / cpu_s) if cpu_s else 0
            runs.append(run)
    return {"runs": runs}


# -- 50,000 idle streams --------------------------------------------------------------------------

def _hold(port: int, path: str, source: str, n: int, ready: Any, go: Any, expected: Any,
          out: Any) -> None:
    """Open `n` streams from `source`, report when all have their headers, then count the
    events of every stream until each has `expected` (or 60 s pass after `go`)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    request = f"GET {path} HTTP/1.1\r\nHost: b\r\n\r\n".encode()
    socks = []
    t0 = time.monotonic()
    poll = select.epoll()
    pending = {}
    for _ in range(n):
        s = socket.socket()
        s.bind((source, 0))
        s.connect(("127.0.0.1", port))
        s.sendall(request)
        s.setblocking(False)
        socks.append(s)
        pending[s.fileno()] = s
        poll.register(s.fileno(), select.EPOLLIN)
    # wait for every response's headers
    counts = {fd: 0 for fd in pending}
    buf = bytearray(1 << 16)
    while pending:
        for fd, _ in poll.poll(1.0):
            if fd in pending:
                pending[fd].recv_into(buf)
                del pending[fd]
        if time.monotonic() - t0 > 600:
            break
    connect_s = time.monotonic() - t0
    ready.put((n - len(pending), connect_s))
    go.wait()
    deadline = time.monotonic() + 60
    by_fd = {s.fileno(): s for s in socks}
    while time.monotonic() < deadline:
        want = expected.value
        if want > 0 and min(counts.values()) >= want:
            break
        for fd, _ in poll.poll(0.2):
            try:
                got = by_fd[fd].recv_into(buf)
            except BlockingIOError:
                continue
            if not got:
                poll.unregister(fd)
                continue
            counts[fd] += buf.count(b"id:", 0, got)
    values = list(counts.values())
    out.put((values, time.monotonic() - t0))
    for s in socks:
        s.close()


def idle_streams(total: int) -> dict[str, Any]:
    workers = max(cores(), math.ceil(total / PER_PROCESS))
    loaders = math.ceil(total / PER_PROCESS)
    rig = Rig(idle_config, workers=workers)
    try:
        topic = rig.topic(f"broadcast-{time.monotonic_ns()}", 1)
        ctx = mp.get_context("fork")
        ready: Any = ctx.Queue()
        out: Any = ctx.Queue()
        go = ctx.Event()
        expected = ctx.Value("q", -1)
        per = total // loaders
        # warm up: a few streams on every worker first, so that each has its consumer and
        # cache running before memory is measured (a cost per worker, not per stream)
        warm_ready: Any = ctx.Queue()
        warm = ctx.Process(target=_hold, args=(rig.port, f"/events/{topic}", "127.0.0.1",
                                               20 * workers, warm_ready, go, expected, out))
        warm.start()
        warm_ready.get(timeout=120)
        time.sleep(3)
        rss0 = rig.rss()
        started = time.monotonic()
        ps = [ctx.Process(target=_hold, args=(rig.port, f"/events/{topic}", f"127.0.0.{2 + i}",
                                              per, ready, go, expected, out))
              for i in range(loaders)]
        for p in ps:
            p.start()
        opened = [ready.get(timeout=900) for _ in ps]
        connect_s = time.monotonic() - started
        held = sum(o[0] for o in opened)
        time.sleep(2)
        rss1 = rig.rss()
        cpu0 = rig.cpu()
        time.sleep(5)
        cpu1 = rig.cpu()
        idle_cpu = (cpu1 - cpu0) / 5
        go.set()
        t0 = time.time()
        sent = rig.produce_at(topic, 10, 10, pad=PAD)
        produce_s = time.time() - t0
        cpu = rig.cpu() - cpu1
        expected.value = sent
        results = [out.get(timeout=300) for _ in [*ps, warm]]
        delivered_s = time.time() - t0
        for p in [*ps, warm]:
            p.join(60)
        counts = [c for r in results for c in r[0]]
        return {
            "streams": total + 20 * workers, "workers": workers, "load_processes": loaders, "held": held,
            "connect_s": round(connect_s, 1), "connects_per_s": round(held / connect_s),
            "rss_before_mib": round(rss0 / 2**20, 1), "rss_held_mib": round(rss1 / 2**20, 1),
            "kib_per_stream": round((rss1 - rss0) / max(1, held) / 1024, 2),
            "idle_cpu_pct": round(100 * idle_cpu, 1),
            "broadcast_events": sent, "broadcast_s": round(produce_s, 1),
            "expected": sent * len(counts), "delivered": sum(counts), "counted": len(counts),
            "complete": sum(1 for c in counts if c == sent),
            "over": sum(1 for c in counts if c > sent),
            "delivered_per_s": round(sum(counts) / delivered_s),
            "daemon_cpu_pct_broadcast": round(100 * cpu / produce_s, 1),
            "deliveries_per_cpu_s": round(sum(counts) / cpu) if cpu else 0,
        }
    finally:
        rig.close()


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--full", action="store_true", help="also the 50,000 idle streams")
    parser.add_argument("--streams", type=int, default=50_000)
    parser.add_argument("--only-idle", action="store_true")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    result: dict[str, Any] = {"cores": cores()}
    if not args.only_idle:
        result["workers"] = compare_workers(args.quick)
        rows = [(r["workers"], r["clients"], r["rate"], r["on_time_per_s"],
                 r["delivered_per_s"], f"{r['complete']}/{r['clients']}", r["over"],
                 r["p50_ms"], r["p99_ms"], r["daemon_cpu_pct"], r["deliveries_per_cpu_s"],
                 r["load_avg"])
                for r in result["workers"]["runs"]]
        print(table("fan-out with 1 worker and one per core (same run)",
                    ["workers", "clients", "ev/s each", "delivered/s while producing",
                     "delivered/s in all", "complete", "over", "p50 ms", "p99 ms",
                     "daemon cpu %", "deliveries per cpu-s", "load"],
                    rows))
    # not with FULL=1 alone: `make bench FULL=1` holds 100,000 streams in bench.many_streams,
    # which measures the same things and more; this part stays for --full/--only-idle
    if args.full or args.only_idle:
        i = result["idle"] = idle_streams(args.streams)
        print(table(f"{i['streams']:,} idle streams, then a broadcast at 10 events/s",
                    ["workers", "load procs", "held", "connects/s", "KiB/stream",
                     "idle cpu %", "events", "complete", "over", "broadcast cpu %",
                     "deliveries per cpu-s"],
                    [(i["workers"], i["load_processes"], i["held"], i["connects_per_s"],
                      i["kib_per_stream"], i["idle_cpu_pct"], i["broadcast_events"],
                      f"{i['complete']}/{i['streams']}", i["over"],
                      i["daemon_cpu_pct_broadcast"], i["deliveries_per_cpu_s"])]))
    path = write_result("workers", result)
    print(f"\nwritten to {path}")
    return result


if __name__ == "__main__":
    main()
