"""100,000 concurrent streams on one machine: ssekd with workers, load clients over several
processes and loopback source addresses, then every stream gets every event of a broadcast.

One process may hold 20,000 open files here (a hard limit), so neither the daemon nor the load
can be one process: the daemon runs enough workers that each holds at most `PER_WORKER`
streams (its connection budget is `ulimit -n` less a tenth, 18,000; the kernel's SO_REUSEPORT
hash spreads connections over the workers unevenly by a few hundred, hence the headroom), and
the load runs in processes of at most `PER_LOADER` sockets, each from its own address 127.0.0.x
(one source address has 28,232 ephemeral ports, 32768-60999).

Figures, in order:
- connects per second: streams opened (response headers read) over the time from the first
  connect to the last header, overall; and per worker, from the count of its open files
  sampled every 0.25 s (the spread shows how evenly the kernel balances and how each worker
  keeps up with accepting);
- memory per stream: the RSS of the supervisor and every worker, summed, after a warm-up (each
  worker has its consumer and cache) and once every stream is open, over the streams; and the
  same per worker;
- keepalive CPU: the daemon's CPU while every stream sits idle through `KEEPALIVE_INTERVALS`
  keepalive intervals of the sse binding's `max-idle-time` (left at its default, 15 s: a `:`
  comment on every stream without a write for that long);
- the broadcast: `EVENTS` events at `RATE`/s to one topic every stream reads; per stream, the
  distinct event ids received (complete = all of them, lost = fewer, duplicated = an id twice)
  and each event's delivery time (read time less the producer's timestamp in the event), p50/p99
  over all deliveries.

    python -m bench.many_streams --quick      # 4,000 streams, 2 workers
    FULL=1 python -m bench.many_streams       # 100,000 streams (or --full)
    python -m bench.many_streams --full --daemon-root ../other-checkout   # another ssekd

`--daemon-root` puts another checkout's ssekd first on the daemon's PYTHONPATH (the load and
the rig stay this tree's), to measure a commit before against the same bench.
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
import threading
import time
import urllib.request
from array import array
from pathlib import Path
from typing import Any

import psutil

from bench.common import table, write_result
from bench.fanout.rig import Rig, config, percentile
from tests.support import zilla_config as zc

#: Streams per daemon worker at most: its connection budget is 18,000 (ulimit -n 20,000 less a
#: tenth); SO_REUSEPORT's hash leaves a worker a few hundred above the mean.
PER_WORKER = 12_500
#: Sockets per load process at most, each process from its own source address (ephemeral ports:
#: 28,232 per address; open files: 20,000 per process).
PER_LOADER = 12_500
#: Connects a load process keeps in flight (SYN sent, headers not read yet).
WINDOW = 256
#: Keepalive intervals the idle streams sit through while the daemon's CPU is measured.
KEEPALIVE_INTERVALS = 3
#: The sse binding's default `max-idle-time` (seconds), which this bench leaves as it is.
MAX_IDLE = 15.0
EVENTS = 10
RATE = 1.0
PAD = 64


def many_config(port: int, bootstrap: str, metrics_port: int) -> zc.Node:
    """The fan-out bench's daemon as a user would set it for 100,000 streams over workers:
    each worker's `limits.streams` and `connections-per-ip` count per worker process, and the
    load comes from a few addresses, so both are raised to what a worker holds at most."""
    built = config(port, bootstrap, metrics_port)
    built["bindings"]["sse"]["options"] = {"limits": {"streams": 18000}}
    return built


# -- load processes ---------------------------------------------------------------------------

class Stream:
    """What one load socket has read: its headers, the event ids seen, the tail of its text."""

    __slots__ = ("closed", "head", "ids", "refused", "tail")

    def __init__(self) -> None:
        self.head = b""
        self.ids: list[bytes] = []
        self.tail = b""
        self.closed = False
        self.refused = False


def _parse(stream: Stream, data: bytes, now: float, times: array[float]) -> None:
    """Note every complete `id:` line and time every `data:<epoch> ` of `data`."""
    text = stream.tail + data
    pos = 0
    while True:
        a = text.find(b"id:", pos)
        d = text.find(b"data:", pos)
        if a < 0 and d < 0:
            break
        if a >= 0 and (d < 0 or a < d):
            end = text.find(b"\n", a)
            if end < 0:
                break
            stream.ids.append(text[a + 3:end])
            pos = end
        else:
            end = text.find(b" ", d)
            if end < 0:
                break
            try:
                times.append(now - float(text[d + 5:end]))
            except ValueError:
                pass
            pos = end
    stream.tail = text[pos:][-200:]


def load(port: int, path: str, source: str, n: int, opened: Any, go: Any, expected: Any,
         out: Any) -> None:
    """Open `n` streams from `source` (at most `WINDOW` connects in flight), report when every
    response's headers came, then after `go` read every stream until each has `expected`
    distinct ids or 120 s pass after the last event was produced."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    request = f"GET {path} HTTP/1.1\r\nHost: b\r\n\r\n".encode()
    poll = select.epoll()
    socks: dict[int, socket.socket] = {}
    streams: dict[int, Stream] = {}
    waiting: set[int] = set()  # connect sent, headers not read yet
    buf = bytearray(1 << 16)
    times: array[float] = array("d")
    t0 = time.time()
    made = 0
    deadline = time.monotonic() + 900
    while (made < n or waiting) and time.monotonic() < deadline:
        while made < n and len(waiting) < WINDOW:
            s = socket.socket()
            s.setblocking(False)
            s.bind((source, 0))
            s.connect_ex(("127.0.0.1", port))
            fd = s.fileno()
            socks[fd], streams[fd] = s, Stream()
            waiting.add(fd)
            poll.register(fd, select.EPOLLOUT)
            made += 1
        for fd, ev in poll.poll(0.5):
            s, st = socks[fd], streams[fd]
            if ev & select.EPOLLOUT:  # connected (or failed): send the request once
                poll.modify(fd, select.EPOLLIN)
                if s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):
                    st.closed = True
                    waiting.discard(fd)
                    poll.unregister(fd)
                    continue
                s.send(request)
                continue
            try:
                got = s.recv_into(buf)
            except OSError:
                got = 0
            if not got:
                st.closed = True
                waiting.discard(fd)
                poll.unregister(fd)
                continue
            st.head += bytes(buf[:got])
            if b"\r\n\r\n" in st.head:
                waiting.discard(fd)
                body = st.head.split(b"\r\n\r\n", 1)[1]
                st.refused = b"try later" in body
    last_header = time.time()
    opened.put((source, sum(1 for st in streams.values() if not st.closed and not st.refused),
                sum(1 for st in streams.values() if st.refused),
                sum(1 for st in streams.values() if st.closed), t0, last_header))
    go.wait()
    for st in streams.values():  # what followed the headers in the first reads
        if b"\r\n\r\n" in st.head:
            _parse(st, st.head.split(b"\r\n\r\n", 1)[1], time.time(), array("d"))
        st.head = b""
    finish = 0.0
    while True:
        want = expected.value
        if want > 0:
            finish = finish or time.monotonic() + 120
            if time.monotonic() > finish or all(
                    len(set(st.ids)) >= want for st in streams.values()
                    if not st.closed and not st.refused):
                break
        for fd, _ in poll.poll(0.2):
            try:
                got = socks[fd].recv_into(buf)
            except BlockingIOError:
                continue
            except OSError:
                got = 0
            st = streams[fd]
            if not got:
                st.closed = True
                poll.unregister(fd)
                continue
            _parse(st, bytes(buf[:got]), time.time(), times)
    counts = [(len(set(st.ids)), len(st.ids) - len(set(st.ids)), st.closed, st.refused)
              for st in streams.values()]
    out.put((source, counts, times.tobytes()))
    for s in socks.values():
        s.close()


# -- the daemon, from outside ------------------------------------------------------------------

def _workers(rig: Rig) -> list[psutil.Process]:
    return sorted(rig.ssekd.proc.children(), key=lambda p: p.pid)


class FdSampler:
    """The open files of each worker every `interval` seconds, from another thread: when each
    worker's count rose, and by how much."""

    def __init__(self, workers: list[psutil.Process], interval: float = 0.25) -> None:
        self.workers = workers
        self.interval = interval
        self.samples: list[tuple[float, list[int]]] = []
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._done.is_set():
            counts = []
            for p in self.workers:
                try:
                    counts.append(p.num_fds())
                except psutil.Error:
                    counts.append(-1)
            self.samples.append((time.time(), counts))
            time.sleep(self.interval)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._done.set()
        self._thread.join()

    def per_worker(self) -> list[dict[str, Any]]:
        """Per worker: connections gained, and their rate from its first gain to its last."""
        first_t, first = self.samples[0]
        last_counts = self.samples[-1][1]
        found = []
        for i in range(len(self.workers)):
            gained = last_counts[i] - first[i]
            rising = [t for (t, c), (_, prev) in zip(self.samples[1:], self.samples)
                      if c[i] > prev[i]]
            span = (rising[-1] - first_t) if rising else 0.0
            found.append({"gained": gained, "seconds": round(span, 1),
                          "per_s": round(gained / span) if span else 0})
        return found


def listen_drops() -> tuple[int, int]:
    """The kernel's ListenOverflows and ListenDrops (machine-wide: other loads add to them)."""
    lines = Path("/proc/net/netstat").read_text().splitlines()
    for names, values in zip(lines[::2], lines[1::2]):
        if names.startswith("TcpExt:"):
            table_ = dict(zip(names.split()[1:], map(int, values.split()[1:])))
            return table_.get("ListenOverflows", 0), table_.get("ListenDrops", 0)
    return 0, 0


def rss(p: psutil.Process) -> int:
    try:
        return int(p.memory_info().rss)
    except psutil.Error:
        return 0


def cpu(p: psutil.Process) -> float:
    try:
        t = p.cpu_times()
    except psutil.Error:
        return 0.0
    return float(t.user + t.system)


def restarts(rig: Rig) -> int:
    """Workers the supervisor killed or saw die (its log): each took its streams with it."""
    log = (rig.tmp / "daemon.log").read_text(errors="replace")
    return log.count("ENGINE_WORKER_DIED")


def scrape_streams(port: int) -> tuple[float, float]:
    """The open streams the supervisor's summed metrics page reports, and the scrape's time."""
    t0 = time.monotonic()
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as r:
            page = r.read().decode()
    except OSError:
        return float("nan"), round(time.monotonic() - t0, 2)
    took = round(time.monotonic() - t0, 2)
    found = [float(line.split()[-1]) for line in page.splitlines()
             if line.startswith("stream_active_sent")]
    return (sum(found) if found else float("nan")), took


def many_streams(total: int, workers: int | None = None, loaders: int | None = None,
                 intervals: int = KEEPALIVE_INTERVALS, events: int = EVENTS,
                 rate: float = RATE) -> dict[str, Any]:
    workers = workers or max(2, math.ceil(total / PER_WORKER))
    loaders = loaders or max(1, math.ceil(total / PER_LOADER))
    rig = Rig(many_config, workers=workers)
    try:
        topic = rig.topic(f"broadcast-{time.monotonic_ns()}", 1)
        path = f"/events/{topic}"
        ctx = mp.get_context("fork")
        opened_q: Any = ctx.Queue()
        out: Any = ctx.Queue()
        go = ctx.Event()
        expected = ctx.Value("q", -1)
        procs = _workers(rig)
        # warm-up: a few streams on every worker first, so that each has its consumer and
        # cache running before memory is measured (a cost per worker, not per stream); they
        # stay open and get the broadcast too
        warm_n = 20 * workers
        warm = ctx.Process(target=load, args=(rig.port, path, "127.0.0.1", warm_n, opened_q,
                                              go, expected, out))
        warm.start()
        opened_q.get(timeout=120)
        time.sleep(3)
        supervisor = rig.ssekd.proc
        rss0 = [rss(supervisor)] + [rss(p) for p in procs]
        # the daemon's CPU with only the warm-up's streams, over one keepalive interval: what
        # it spends whatever the streams (heartbeats, consumers' polls), beside the keepalives'
        base0 = [cpu(supervisor)] + [cpu(p) for p in procs]
        time.sleep(MAX_IDLE)
        base_cpu = 100 * (sum([cpu(supervisor)] + [cpu(p) for p in procs]) - sum(base0)) \
            / MAX_IDLE
        drops0 = listen_drops()
        sampler = FdSampler(procs)
        sampler.start()
        load_avg0 = os.getloadavg()
        shares = [total // loaders + (1 if i < total % loaders else 0) for i in range(loaders)]
        ps = [ctx.Process(target=load, args=(rig.port, path, f"127.0.0.{2 + i}", n, opened_q,
                                             go, expected, out))
              for i, n in enumerate(shares)]
        started = time.time()
        for p in ps:
            p.start()
        opened = [opened_q.get(timeout=1200) for _ in ps]
        sampler.stop()
        drops1 = listen_drops()
        held = sum(o[1] for o in opened)
        refused = sum(o[2] for o in opened)
        failed = sum(o[3] for o in opened)
        connect_s = max(o[5] for o in opened) - started
        per_worker = sampler.per_worker()
        time.sleep(2)
        rss1 = [rss(supervisor)] + [rss(p) for p in procs]
        scrape = scrape_streams(rig.metrics_port)
        # keepalive: every stream idle through several intervals
        cpu0 = [cpu(supervisor)] + [cpu(p) for p in procs]
        t_idle = time.monotonic()
        time.sleep(intervals * MAX_IDLE)
        idle_s = time.monotonic() - t_idle
        cpu1 = [cpu(supervisor)] + [cpu(p) for p in procs]
        load_avg1 = os.getloadavg()
        alive = sum(1 for p in procs if p.is_running())
        # the broadcast
        go.set()
        time.sleep(1)  # the loads read what came while idle (keepalives) first
        t0 = time.time()
        sent = rig.produce_at(topic, rate, events / rate, pad=PAD)
        produce_s = time.time() - t0
        expected.value = sent
        results = [out.get(timeout=600) for _ in [*ps, warm]]
        cpu2 = [cpu(supervisor)] + [cpu(p) for p in procs]
        delivered_s = time.time() - t0
        for p in [*ps, warm]:
            p.join(60)
        counts = [c for r in results for c in r[1]]
        times: array[float] = array("d")
        for r in results:
            times.frombytes(r[2])
        delays = sorted(times)
        streams_open = [c for c in counts if not c[3]]
        all_streams = held + warm_n
        return {
            "streams": total, "warm_streams": warm_n, "workers": workers,
            "load_processes": loaders, "source_addresses": loaders + 1,
            "held": held, "refused": refused, "failed": failed,
            "connect_s": round(connect_s, 1), "connects_per_s": round(held / connect_s),
            "per_worker_connects": per_worker,
            "per_worker_connects_per_s": [w["per_s"] for w in per_worker],
            "per_worker_gained": [w["gained"] for w in per_worker],
            "listen_overflows": drops1[0] - drops0[0], "listen_drops": drops1[1] - drops0[1],
            "load_avg_connect": [round(x, 2) for x in load_avg0],
            "rss_before_mib": round(sum(rss0) / 2**20, 1),
            "rss_held_mib": round(sum(rss1) / 2**20, 1),
            "supervisor_rss_mib": [round(rss0[0] / 2**20, 1), round(rss1[0] / 2**20, 1)],
            "kib_per_stream": round((sum(rss1) - sum(rss0)) / max(1, held) / 1024, 2),
            "worker_rss_mib": [round(r / 2**20, 1) for r in rss1[1:]],
            "worker_kib_per_stream": [
                round((r1 - r0) / max(1, w["gained"]) / 1024, 2)
                for r0, r1, w in zip(rss0[1:], rss1[1:], per_worker)],
            "metrics_active_streams": scrape[0], "metrics_scrape_s": scrape[1],
            "idle_cpu_pct_warm_only": round(base_cpu, 1),
            "keepalive_s": MAX_IDLE, "idle_s": round(idle_s, 1),
            "keepalive_cpu_pct": round(100 * (sum(cpu1) - sum(cpu0)) / idle_s, 1),
            "keepalive_cpu_pct_per_worker": [round(100 * (b - a) / idle_s, 1)
                                             for a, b in zip(cpu0[1:], cpu1[1:])],
            "load_avg_idle": [round(x, 2) for x in load_avg1],
            "workers_alive": alive,
            "worker_restarts": restarts(rig),
            "broadcast_events": sent, "broadcast_rate": rate, "broadcast_s": round(produce_s, 1),
            "counted": len(counts), "expected_streams": all_streams,
            "complete": sum(1 for c in streams_open if c[0] == sent and not c[1]),
            "lost": sum(1 for c in streams_open if c[0] < sent),
            "lost_events": sum(sent - c[0] for c in streams_open if c[0] < sent),
            "duplicated": sum(1 for c in streams_open if c[1]),
            "closed": sum(1 for c in streams_open if c[2]),
            "deliveries": len(delays),
            "p50_ms": round(1000 * percentile(delays, 0.5), 1),
            "p99_ms": round(1000 * percentile(delays, 0.99), 1),
            "max_ms": round(1000 * delays[-1], 1) if delays else float("nan"),
            "delivered_s": round(delivered_s, 1),
            "daemon_cpu_pct_broadcast": round(100 * (sum(cpu2) - sum(cpu1)) / delivered_s, 1),
            # (0 when a worker was replaced meanwhile: its CPU time started again from 0)
            "deliveries_per_cpu_s": round(len(delays) / (sum(cpu2) - sum(cpu1)))
            if sum(cpu2) > sum(cpu1) else 0,
            "load_avg_end": [round(x, 2) for x in os.getloadavg()],
        }
    finally:
        rig.close()


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="4,000 streams, 2 workers")
    parser.add_argument("--full", action="store_true", help="100,000 streams (or FULL=1)")
    parser.add_argument("--streams", type=int, help="streams to open (beside the warm-up's)")
    parser.add_argument("--workers", type=int, help=f"daemon workers (default: one per "
                                                    f"{PER_WORKER:,} streams, at least 2)")
    parser.add_argument("--loaders", type=int, help=f"load processes (default: one per "
                                                    f"{PER_LOADER:,} streams)")
    parser.add_argument("--intervals", type=int, help="keepalive intervals held idle")
    parser.add_argument("--daemon-root", type=Path,
                        help="a checkout whose ssekd the daemon runs (first on its PYTHONPATH)")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    full = args.full or bool(os.environ.get("FULL"))
    total = args.streams or (100_000 if full else 4_000 if args.quick else 20_000)
    intervals = args.intervals or (1 if args.quick else KEEPALIVE_INTERVALS)
    if args.daemon_root:
        root = str(args.daemon_root.resolve())
        os.environ["PYTHONPATH"] = os.pathsep.join(
            [root, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))])
    r = many_streams(total, args.workers, args.loaders, intervals)
    r["daemon_root"] = str(args.daemon_root) if args.daemon_root else "this tree"
    pw = r["per_worker_connects_per_s"]
    kib = r["worker_kib_per_stream"]
    print(table(f"{r['held'] + r['warm_streams']:,} concurrent streams, {r['workers']} workers, "
                f"{r['load_processes']} load processes ({r['daemon_root']})",
                ["streams open", "refused", "connects/s", "per worker /s (min-max)",
                 "listen drops", "MiB before-after", "KiB/stream", "per worker KiB/stream",
                 "metrics: streams", f"idle cpu % ({r['warm_streams']} streams)",
                 f"keepalive cpu % ({r['keepalive_s']:g} s)", "load"],
                [(r["held"] + r["warm_streams"], r["refused"] + r["failed"],
                  r["connects_per_s"], f"{min(pw)}-{max(pw)}", r["listen_drops"],
                  f"{r['rss_before_mib']}-{r['rss_held_mib']}", r["kib_per_stream"],
                  f"{min(kib)}-{max(kib)}", r["metrics_active_streams"],
                  r["idle_cpu_pct_warm_only"], r["keepalive_cpu_pct"],
                  " ".join(map(str, r["load_avg_idle"])))]))
    print()
    print(table(f"broadcast: {r['broadcast_events']} events at {r['broadcast_rate']:g}/s, "
                "counted per stream",
                ["streams", "worker restarts", "complete", "lost", "duplicated", "closed", "deliveries",
                 "p50 ms", "p99 ms", "max ms", "all in (s)", "daemon cpu %",
                 "deliveries per cpu-s", "load"],
                [(r["counted"], r["worker_restarts"], r["complete"], r["lost"], r["duplicated"],
                  r["closed"], r["deliveries"], r["p50_ms"], r["p99_ms"], r["max_ms"],
                  r["delivered_s"], r["daemon_cpu_pct_broadcast"], r["deliveries_per_cpu_s"],
                  " ".join(map(str, r["load_avg_end"])))]))
    out = write_result("many_streams", r)
    print(f"\nwritten to {out}")
    return r


if __name__ == "__main__":
    main()
