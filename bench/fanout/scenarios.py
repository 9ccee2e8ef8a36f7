"""The fan-out benchmark's scenarios: fan-out at fixed rates, idle streams, connection and resume
storms, scraping overhead, one client against a bare consumer; and `main`, which runs them."""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from bench.fanout.report import plot, print_table
from bench.fanout.rig import ROOT, Reader, Rig, Server, hold_idle, percentile, run_clients
from bench.fanout.syscalls import SyscallCount


def fanout(rig: Rig, clients: int, rate: float, seconds: float, procs: int | None = None,
           sample: int = 100, query: str = "", server: Server | None = None,
           syscalls: bool = False) -> dict[str, Any]:
    """`clients` streams of one topic while `rate` events/s are produced for `seconds`.

    Every stream is drained and counted (a stream that misses or repeats an event shows in
    `complete`, `lost` and `duplicated`); latency is taken on `sample` streams spread over the
    clients. `query` is added to each stream's path (e.g. `?access_token=...` for guarded
    streams, `bench/jwt_guard.py`). `server` is ssekd unless given (the baseline). `syscalls`:
    count the server's send syscalls meanwhile (`syscalls.SyscallCount`) and the bytes the
    streams got, for syscalls per event and bytes per syscall.
    """
    server = server or rig.ssekd
    if procs is None:  # readers enough that they are not what is measured
        procs = 1 if clients <= 200 else 2 if clients <= 2000 else 4
    topic = rig.topic(f"fanout-{server.name}-{clients}-{int(rate)}-{time.monotonic_ns()}")
    ctx = mp.get_context("fork")
    ready = [ctx.Event() for _ in range(procs)]
    go = ctx.Event()
    expected = ctx.Value("q", -1)
    deadline = ctx.Value("d", 0.0)
    out: Any = ctx.Queue()
    per = clients // procs
    rss0 = server.rss()
    ps = [ctx.Process(target=run_clients, args=(server.port, f"/events/{topic}{query}", per,
                                             max(1, sample // procs), ready[i], go, expected,
                                             deadline, out))
          for i in range(procs)]
    for p in ps:
        p.start()
    for r in ready:
        r.wait(300)
    time.sleep(1.0)
    rss = server.rss()
    profilers = _profile(server, f"{clients}x{int(rate)}", seconds) if PROFILE else []
    counting = SyscallCount(p.pid for p in server.processes()) if syscalls else None
    user0, sys0 = server.cpu_split()
    cpu0 = user0 + sys0
    go.set()
    t0 = time.time()
    sent = rig.produce_at(topic, rate, seconds)
    produce_time = time.time() - t0
    expected.value = sent
    # what is not received by then counts as lost: room for a server that fell behind to catch
    # up (ssekd never drops an event for a slow stream; it is late, and shows here as lost)
    deadline.value = time.time() + 10.0 + clients / 500
    results = [out.get(timeout=300) for _ in ps]
    user1, sys1 = server.cpu_split()
    cpu = user1 + sys1 - cpu0
    sends = counting.stop() if counting is not None else None
    for p in ps:
        p.join(30)
    for profiler in profilers:
        profiler.wait(60)
    costs = top_costs(ROOT / "bench" / "results" / f"profile-{server.name}-{clients}x{int(rate)}.txt") \
        if profilers else None
    counts = [c for r in results for c in r[0]]
    lat = [x for r in results for x in r[1]]
    delivered = sum(counts)
    return {
        "server": server.name,
        "clients": len(counts), "rate": rate, "seconds": round(produce_time, 2),
        "produced": sent, "delivered": delivered, "expected": sent * len(counts),
        "complete": sum(1 for c in counts if c == sent),
        "over": sum(1 for c in counts if c > sent),
        "lost": sum(max(0, sent - c) for c in counts),
        "duplicated": sum(max(0, c - sent) for c in counts),
        # over the production time: what the server keeps up with (a server that falls behind
        # and catches up in the 10 s after delivers the same total, later)
        "delivered_per_s": round(delivered / max(produce_time, *(r[3] for r in results))),
        # what reached the clients while the producer ran: short of `expected` when the daemon
        # fell behind (the rest arrives after, and counts in `delivered`)
        "on_time_per_s": round(sum(r[4] for r in results) / produce_time),
        "latency_streams": sum(max(1, sample // procs) for _ in ps),
        "latency_samples": len(lat),
        "p50_ms": round(percentile(lat, 0.5) * 1000, 2), "p99_ms": round(percentile(lat, 0.99) * 1000, 2),
        "p999_ms": round(percentile(lat, 0.999) * 1000, 2),
        "max_ms": round(max(lat, default=float("nan")) * 1000, 2),
        "daemon_cpu_pct": round(100 * cpu / produce_time, 1),
        "cpu_us_per_event": round(cpu * 1e6 / max(1, delivered), 2),
        # user (the process's own code) and system (the kernel's: sends) apart
        "user_us_per_event": round((user1 - user0) * 1e6 / max(1, delivered), 2),
        "system_us_per_event": round((sys1 - sys0) * 1e6 / max(1, delivered), 2),
        "client_cpu_pct": round(100 * sum(r[2] for r in results) / produce_time, 1),
        "rss_mib": round(rss / 2**20, 1),
        "kib_per_stream": round(max(0, rss - rss0) / len(counts) / 1024, 2),
        "load_avg": round(os.getloadavg()[0], 2),
        **({"top_costs": costs} if costs is not None else {}),
        **(_per_syscall(sends, delivered, sum(r[5] for r in results)) if syscalls else {}),
    }


def _per_syscall(sends: dict[str, int] | None, delivered: int, received: int) -> dict[str, Any]:
    """Send syscalls per delivered event and bytes per send syscall (None without perf)."""
    total = sum(n for name, n in sends.items() if name != "all") if sends else 0
    return {"sends": sends, "bytes_received": received,
            "all_syscalls_per_event": round(sends.get("all", 0) / max(1, delivered), 4)
            if sends else None,
            "syscalls_per_event": round(total / max(1, delivered), 4) if total else None,
            "bytes_per_syscall": round(received / total) if total else None}


#: `--profile`: sample the server with py-spy during each fan-out scenario and each phase of the
#: single client.
PROFILE = False


def _profile(server: Server, name: str, seconds: float) -> list[subprocess.Popen[bytes]]:
    """py-spy on the server for `seconds`: a flame graph (SVG) and the collapsed stacks (text,
    for `top_costs`) in bench/results/, named after the server and scenario."""
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    # Paths relative to the checkout: py-spy writes its command line into the flame graph's
    # title, and a graph kept in bench/profiles/ should not name the machine it was made on.
    spy = os.path.relpath(Path(sys.executable).with_name("py-spy"), ROOT)
    base = [spy, "record", "-p", str(server.proc.pid), "-d", str(int(seconds)), "-r", "250",
            "--nonblocking", "-t"]
    return [subprocess.Popen(base + ["-f", fmt, "-o",
                                     os.path.relpath(out / f"profile-{server.name}-{name}.{ext}",
                                                     ROOT)],
                             cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for fmt, ext in (("flamegraph", "svg"), ("raw", "txt"))]


def top_costs(path: Path, n: int = 8) -> list[tuple[str, float]]:
    """The functions with the most samples on top of the stack (self time) in py-spy's raw
    output, as (function, share of all samples of the reactor thread)."""
    own: dict[str, int] = {}
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if "MainThread" not in stack.split(";")[0]:
            continue
        # "func (file:line)" frames below the thread's name; self time by function, any line
        frames = [f.rpartition(":")[0] + ")" for f in stack.split(";")[1:]]
        if not frames:
            continue
        total += int(count)
        own[frames[-1]] = own.get(frames[-1], 0) + int(count)
    return [(f, round(c / total, 3)) for f, c in sorted(own.items(), key=lambda x: -x[1])[:n]]


def _storm(port: int, path: str, n: int, out: Any) -> None:
    """Open `n` streams as fast as one process can, each waiting for its response headers
    before the next; stop at the first error. Reports (opened, seconds, error)."""
    socks = []
    error = ""
    t0 = time.time()
    try:
        for _ in range(n):
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            s.sendall(f"GET {path} HTTP/1.1\r\nHost: b\r\n\r\n".encode())
            head = s.recv(4096)
            if not head.startswith(b"HTTP/1.1 200"):
                error = head[:40].decode("latin-1")
                break
            socks.append(s)
    except OSError as e:
        error = str(e)
    out.put((len(socks), time.time() - t0, error))
    for s in socks:
        s.close()


def _in_processes(server: Server, target: Any, args: tuple[Any, ...],
                  procs: int) -> tuple[list[Any], float]:
    """`target(*args, out)` in `procs` forked processes at once: what each put on `out`, and
    the server's CPU seconds meanwhile."""
    ctx = mp.get_context("fork")
    out: Any = ctx.Queue()
    ps = [ctx.Process(target=target, args=(*args, out)) for _ in range(procs)]
    cpu0 = server.cpu()
    for p in ps:
        p.start()
    results = [out.get(timeout=300) for _ in ps]
    cpu = server.cpu() - cpu0
    for p in ps:
        p.join(30)
    return results, cpu


def connection_storm(rig: Rig, server: Server, n: int, procs: int = 4) -> dict[str, Any]:
    """Connects/s: `procs` processes open `n` streams in all as fast as they can."""
    topic = rig.topic(f"storm-{server.name}-{time.monotonic_ns()}", 1)
    results, cpu = _in_processes(server, _storm, (server.port, f"/events/{topic}", n // procs),
                                 procs)
    opened = sum(r[0] for r in results)
    seconds = max(r[1] for r in results)
    errors = [r[2] for r in results if r[2]]
    return {"server": server.name, "attempted": n, "opened": opened,
            "connects_per_s": round(opened / seconds), "first_error": errors[0] if errors else "",
            "cpu_ms_per_connect": round(cpu * 1000 / max(1, opened), 3),
            "load_avg": round(os.getloadavg()[0], 2)}


def _event_ids(port: int, path: str, n: int) -> list[bytes]:
    """The ids of the first `n` events of a stream."""
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: b\r\n\r\n".encode())
    data = b""
    while data.count(b"\nid:") + data.startswith(b"id:") < n or not data.endswith(b"\n"):
        got = s.recv(1 << 20)
        if not got:
            break
        data += got
    s.close()
    ids = []
    for line in data.split(b"\n"):
        i = line.find(b"id:")
        if i >= 0:
            ids.append(line[i + 3:].strip())
    return ids[:n]


def _resumers(port: int, path: str, last_id: bytes, n: int, want: int, out: Any) -> None:
    """`n` streams resuming after `last_id` at once; time until each has `want` events."""
    t0 = time.time()
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: b\r\nLast-Event-ID: ".encode() + last_id
                  + b"\r\n\r\n")
        socks.append(s)
    reader = Reader(socks, set())
    deadline = time.time() + 60
    reader.run(lambda: min(reader.counts) >= want or time.time() > deadline)
    out.put((reader.counts, time.time() - t0))
    for s in socks:
        s.close()


def resume_storm(rig: Rig, server: Server, clients: int, events: int,
                 procs: int = 2) -> dict[str, Any]:
    """`clients` streams reconnect at once with the id of the middle event of `events`: time
    until every one has the other half, and whether any got one more or one less."""
    topic = rig.topic(f"resume-{server.name}-{time.monotonic_ns()}")
    rig.fill(topic, events)
    ids = _event_ids(server.port, f"/events/{topic}", events)
    half = events // 2
    want = events - half
    results, cpu = _in_processes(server, _resumers, (server.port, f"/events/{topic}",
                                                     ids[half - 1], clients // procs, want), procs)
    counts = [c for r in results for c in r[0]]
    seconds = max(r[1] for r in results)
    return {"server": server.name, "clients": len(counts), "events_each": want,
            "seconds": round(seconds, 2), "complete": sum(1 for c in counts if c == want),
            "lost": sum(max(0, want - c) for c in counts),
            "duplicated": sum(max(0, c - want) for c in counts),
            "delivered_per_s": round(sum(counts) / seconds),
            "cpu_us_per_event": round(cpu * 1e6 / max(1, sum(counts)), 2),
            "load_avg": round(os.getloadavg()[0], 2)}


def _scraper(port: int, interval: float, stop: Any, out: Any) -> None:
    """GET the metrics page every `interval` seconds until `stop`; report the scrape times."""
    import urllib.request

    times: list[float] = []
    size = 0
    while not stop.is_set():
        began = time.monotonic()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            size = len(r.read())
        took = time.monotonic() - began
        times.append(took)
        stop.wait(max(0.0, interval - took))
    out.put((times, size))


def scrape_overhead(rig: Rig, clients: int, rate: float, seconds: float,
                    rounds: int = 2) -> dict[str, Any]:
    """The same fan-out with and without a scraper hitting the metrics page every 100 ms, in
    alternating order (`rounds` of each): delivered events/s and the daemon's CPU per 1,000
    deliveries, so the cost of metrics being read shows even when delivery keeps up."""
    ctx = mp.get_context("fork")
    runs: list[dict[str, Any]] = []
    for i in range(rounds):
        for scraping in ((False, True) if i % 2 == 0 else (True, False)):
            stop = ctx.Event()
            out: Any = ctx.Queue()
            scraper = ctx.Process(target=_scraper, args=(rig.metrics_port, 0.1, stop, out)) \
                if scraping else None
            if scraper is not None:
                scraper.start()
            run = fanout(rig, clients, rate, seconds)
            if scraper is not None:
                stop.set()
                times, size = out.get(timeout=30)
                scraper.join(10)
                run.update(scrapes=len(times), scrape_p50_ms=round(percentile(times, 0.5) * 1000, 2),
                           scrape_max_ms=round(max(times, default=0.0) * 1000, 2),
                           page_bytes=size)
            run["scraping"] = scraping
            run["cpu_ms_per_1000"] = round(run["daemon_cpu_pct"] / 100 * run["seconds"] * 1e6
                                           / max(1, run["delivered"]), 2)
            runs.append(run)

    def mean(key: str, scraping: bool) -> float:
        values = [r[key] for r in runs if r["scraping"] is scraping]
        return sum(values) / len(values)

    base, scraped = mean("delivered_per_s", False), mean("delivered_per_s", True)
    cpu_base, cpu_scraped = mean("cpu_ms_per_1000", False), mean("cpu_ms_per_1000", True)
    return {
        "clients": clients, "rate": rate, "runs": runs,
        "delivered_per_s_without": round(base), "delivered_per_s_with": round(scraped),
        "throughput_cost_pct": round(100 * (base - scraped) / base, 2),
        "cpu_ms_per_1000_without": round(cpu_base, 2),
        "cpu_ms_per_1000_with": round(cpu_scraped, 2),
        "cpu_cost_pct": round(100 * (cpu_scraped - cpu_base) / cpu_base, 2),
        "complete": all(r["complete"] == r["clients"] for r in runs),
    }


def idle(rig: Rig, n: int, server: Server | None = None) -> dict[str, Any]:
    server = server or rig.ssekd
    topic = rig.topic(f"idle-{server.name}-{time.monotonic_ns()}", 1)
    ctx = mp.get_context("fork")
    # open one stream first so the cache and consumer exist before measuring
    warm_ready, warm_done = ctx.Event(), ctx.Event()
    w = ctx.Process(target=hold_idle, args=(server.port, f"/events/{topic}", 1, warm_ready,
                                             warm_done))
    w.start()
    warm_ready.wait(30)
    time.sleep(1)
    before = server.rss()
    done = ctx.Event()
    procs = 4 if n > 2000 else 1
    ready = [ctx.Event() for _ in range(procs)]
    ps = [ctx.Process(target=hold_idle, args=(server.port, f"/events/{topic}", n // procs,
                                               ready[i], done))
          for i in range(procs)]
    for p in ps:
        p.start()
    ok = all(r.wait(300) for r in ready)
    time.sleep(2)
    after = server.rss()
    cpu0 = server.cpu()
    time.sleep(3)
    idle_cpu = (server.cpu() - cpu0) / 3
    done.set()
    warm_done.set()
    for p in ps:
        p.join(60)
    w.join(10)
    return {"server": server.name, "streams": n, "held": bool(ok),
            "rss_before_mib": round(before / 2**20, 1), "rss_after_mib": round(after / 2**20, 1),
            "kib_per_stream": round((after - before) / n / 1024, 2),
            "idle_cpu_pct": round(100 * idle_cpu, 1)}


def _bare_consumer(bootstrap: str, topic: str, messages: int) -> float:
    """Records/s of a plain confluent-kafka consumer reading `topic` from its beginning
    (values taken as bytes, nothing else done with them: the fastest a Python reader gets)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-bare",
                  "enable.auto.commit": False, "fetch.wait.max.ms": 10,
                  "fetch.queue.backoff.ms": 5, "enable.partition.eof": False})
    c.assign([TopicPartition(topic, p, 0) for p in range(3)])
    got = 0
    t0 = time.time()
    while got < messages:
        batch = c.consume(1000, 1.0)
        got += sum(1 for m in batch if m.value() is not None)
    rate = messages / (time.time() - t0)
    c.close()
    return rate


def _sse_consumer(port: int, path: str, messages: int) -> tuple[float, float, int]:
    """Events/s of one SSE stream reading `messages` events, the reader's CPU share, and how
    many events it got (fewer: the stream ended first)."""
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: b\r\n\r\n".encode())
    s.settimeout(60)
    buf = bytearray(1 << 20)
    view = memoryview(buf)
    n = 0
    tail = b""
    t0 = time.time()
    cpu0 = time.process_time()
    while n < messages:
        try:
            got = s.recv_into(buf)
        except TimeoutError:
            break
        if not got:
            break
        n += buf.count(b"id:", 0, got) + (tail + bytes(view[:2])).count(b"id:")
        tail = bytes(view[max(0, got - 2):got])
    elapsed = time.time() - t0
    cpu = time.process_time() - cpu0
    s.close()
    return n / elapsed, cpu / elapsed, n


def single_client(rig: Rig, messages: int) -> dict[str, Any]:
    """One client reading a whole topic, against a bare consumer of the same topic.

    Per server, on a topic of its own with the same records: the SSE stream while the server
    loads the topic from Kafka (cold), then the same stream again (cached). The bare consumer
    runs before and after; each SSE figure is compared with the faster of the two bare runs.
    """
    topics = {}
    for server in rig.servers:
        topic = topics[server.name] = rig.topic(f"single-{server.name}-{time.monotonic_ns()}")
        rig.fill(topic, messages)
    first_topic = topics[rig.ssekd.name]
    bare_cold = _bare_consumer(rig.broker.bootstrap, first_topic, messages)
    out: dict[str, Any] = {"messages": messages}
    for server in rig.servers:
        path = f"/events/{topics[server.name]}"
        row: dict[str, Any] = {}
        for phase in ("cold", "cached"):
            profilers = _profile(server, f"single-{phase}", 600) if PROFILE else []
            cpu0 = server.cpu()
            t0 = time.time()
            rate, reader_cpu, got = _sse_consumer(server.port, path, messages)
            cpu = server.cpu() - cpu0
            for profiler in profilers:  # py-spy writes what it has on SIGINT
                profiler.send_signal(signal.SIGINT)
                profiler.wait(60)
            if profilers:
                row[f"{phase}_top_costs"] = top_costs(
                    ROOT / "bench" / "results" / f"profile-{server.name}-single-{phase}.txt")
            row[f"{phase}_per_s"] = round(rate)
            row[f"{phase}_got"] = got
            row[f"{phase}_daemon_cpu_pct"] = round(100 * cpu / (time.time() - t0), 1)
            row[f"{phase}_reader_cpu_pct"] = round(100 * reader_cpu, 1)
        out[server.name] = row
    bare_again = _bare_consumer(rig.broker.bootstrap, first_topic, messages)
    bare = max(bare_cold, bare_again)
    out.update(bare_consumer_per_s=round(bare), bare_cold_per_s=round(bare_cold),
               bare_again_per_s=round(bare_again), load_avg=round(os.getloadavg()[0], 2))
    for server in rig.servers:
        row = out[server.name]
        row["ratio_cold"] = round(row["cold_per_s"] / bare, 2)
        row["ratio_cached"] = round(row["cached_per_s"] / bare, 2)
    return out


#: (clients, events/s per client) of each fan-out scenario.
QUICK_SCENARIOS = [(100, 50), (1000, 50), (1000, 100), (1000, 250)]
FULL_SCENARIOS = [(100, 50), (100, 250), (1000, 20), (1000, 50), (1000, 100), (1000, 250),
                  (10_000, 20)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fanout",
                                     description="Fan-out benchmark: many SSE clients (HTTP/1.1) "
                                     "on one topic while a producer writes at a fixed rate.")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", choices=["fanout", "idle", "single", "storm", "resume",
                                           "scrape"], action="append")
    parser.add_argument("--no-baseline", action="store_true",
                        help="ssekd alone (e.g. while profiling it)")
    parser.add_argument("--scenario", action="append", default=[],
                        help="CLIENTSxRATE instead of the default list, e.g. 1000x100")
    parser.add_argument("--profile", action="store_true",
                        help="py-spy flame graphs of each fan-out scenario in bench/results/")
    args = parser.parse_args(argv)
    global PROFILE
    PROFILE = args.profile
    q = args.quick
    only = set(args.only or ["fanout", "idle", "single", "storm", "resume"]
               + ([] if q or args.only else ["scrape"]))
    scenarios = [tuple(int(x) for x in s.split("x")) for s in args.scenario] or \
        (QUICK_SCENARIOS if q else FULL_SCENARIOS)
    results: dict[str, Any] = {"machine": {"cpus": os.cpu_count(),
                                           "python": sys.version.split()[0]},
                               "mode": "quick" if q else "full"}
    rig = Rig(baseline=not args.no_baseline)
    started = time.monotonic()
    try:
        if "idle" in only:  # first: later scenarios leave the heaps grown
            results["idle"] = [idle(rig, 1000 if q else 10_000, s) for s in rig.servers]
        if "fanout" in only:
            rows = []
            for i, (clients, rate) in enumerate(scenarios):
                order = rig.servers if i % 2 == 0 else rig.servers[::-1]
                for server in order:
                    row = fanout(rig, clients, rate, 5 if q else 10, server=server)
                    rows.append(row)
                    print(f"  {server.name:>8} {clients:>6} x {rate:<4} delivered "
                          f"{row['delivered_per_s']:>9,}/s p99 {row['p99_ms']} ms lost "
                          f"{row['lost']} dup {row['duplicated']}", flush=True)
            results["fanout"] = rows
        if "single" in only:
            results["single_client"] = single_client(rig, 100_000 if q else 1_000_000)
        if "storm" in only:
            results["connection_storm"] = [connection_storm(rig, s, 1000 if q else 5000)
                                           for s in rig.servers]
        if "resume" in only:
            results["resume_storm"] = [resume_storm(rig, s, 1000, 200 if q else 2000)
                                       for s in rig.servers]
        if "scrape" in only:
            results["scrape_overhead"] = scrape_overhead(rig, 200 if q else 1000, 100,
                                                         5 if q else 10)
    finally:
        rig.close()
    results["seconds"] = round(time.monotonic() - started)
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "fanout.json").write_text(json.dumps(results, indent=2) + "\n")
    print_table(results)
    if "fanout" in results:
        plot(results, out / "fanout.png")
    return 0
