"""Fan-out benchmark: many SSE clients (HTTP/1.1) on one topic while a producer writes at a
fixed rate. Starts its own broker (tansu) and daemon (`twistd -n ssekd`) on free ports.

Reports, per scenario: delivered events/s in aggregate, produce->receive latency p50/p99, the
daemon's CPU and RSS per connection; and one client's catch-up rate against a bare
confluent-kafka consumer on the same topic. Prints a table and writes bench/results/fanout.json.

How the clients are measured (they share the daemon's cores, so they must stay cheap):

- one process reads all the streams of a scenario with `recv_into` into one preallocated buffer
  and counts events with `bytearray.count(b"id:")` (plus a 4-byte check for an `id:` split
  across reads): C-level work per read, no per-event Python;
- every stream is drained and counted; `complete` is how many streams got exactly every event
  produced (`over` counts streams that got more: a duplicate), so a miss anywhere shows;
- latency (receive time minus the producer's timestamp in the payload) is parsed on a fixed
  sample of 50 streams spread over the clients, so its cost does not grow with the client count;
- the reader's own CPU share is reported next to the daemon's, to show it is not the bottleneck;
- the single-client comparison runs the bare consumer (cold), the SSE stream while the daemon's
  cache loads the topic from Kafka (cold), the SSE stream served from the cache, then the bare
  consumer again, and compares each SSE rate with the faster bare run.

The machine's load average is recorded with each scenario: run it more than once on a shared
machine and compare ranges.

    python bench/fanout.py                 # all scenarios (a few minutes)
    python bench/fanout.py --quick         # smaller numbers, for development
    python bench/fanout.py --only latency --only single
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import select
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ssekd.dev.broker import free_port, port_open, start_broker  # noqa: E402 - after the sys.path line above

TWISTD = str(Path(sys.executable).with_name("twistd"))
BASELINE = ROOT / "bench" / "baseline" / "app.py"
#: Records ssekd's cache and the baseline's ring keep per topic: the whole single-client topic.
CACHE_MESSAGES = 1_100_000

CONFIG = """\
name: bench
bindings:
  tcp:
    type: tcp
    kind: server
    # every benchmark client comes from 127.0.0.1: 10,000 streams and the storms need room
    options: {{host: 127.0.0.1, port: {port}, limits: {{connections-per-ip: 19000}}}}
    exit: http
  http: {{type: http, kind: server, exit: sse}}
  sse: {{type: sse, kind: server, exit: sse_kafka}}
  sse_kafka:
    type: sse-kafka
    kind: proxy
    routes:
      - when: [{{path: "/events/{{topic}}"}}]
        exit: cache_client
        with: {{topic: "${{params.topic}}"}}
  cache_client: {{type: kafka, kind: cache_client, exit: cache_server}}
  cache_server:
    type: kafka
    kind: cache_server
    options: {{cache: {{max-messages: 1100000, max-bytes: 536870912}}}}
    exit: kafka_client
  kafka_client:
    type: kafka
    kind: client
    options:
      servers: ["{bootstrap}"]
      properties: {{fetch.wait.max.ms: 10}}
telemetry:
  exporters:
    prom: {{type: prometheus, options: {{endpoints: [{{port: {metrics_port}}}]}}}}
"""


# -- client processes -----------------------------------------------------------------------

class _Reader:
    """Counts the events of many SSE streams cheaply, and times a fixed sample of them.

    The counting is C-level work per `recv_into`: `bytearray.count(b"id:")` over a preallocated
    buffer, plus a 4-byte check for an `id:` split across two reads. Only the sampled streams
    pay for finding `data:` and parsing the producer's timestamp, so one Python process can
    drain a thousand sockets without becoming what the benchmark measures.
    """

    def __init__(self, socks: list[socket.socket], sampled: set[int]) -> None:
        self.socks = socks
        self.sampled = sampled
        self.counts = [0] * len(socks)
        self.latencies: list[float] = []
        self._tails = [b""] * len(socks)  # last 2 bytes of each stream's previous read
        self._text = [b""] * len(socks)  # unparsed end of a sampled stream's previous read
        self._buf = bytearray(1 << 18)
        self._view = memoryview(self._buf)
        self._poll = select.epoll()
        self._by_fd: dict[int, int] = {}
        for i, s in enumerate(socks):
            s.setblocking(False)
            self._by_fd[s.fileno()] = i
            self._poll.register(s.fileno(), select.EPOLLIN)
        self.open = len(socks)

    def run(self, until: Any) -> None:
        """Read until `until()` is true or every stream ended."""
        buf, view, counts, tails = self._buf, self._view, self.counts, self._tails
        while self.open and not until():
            # a short wait: `until` is asked between polls, and the time it turns true ends the
            # run's clock (with 0.1 s, a server whose last event came just after a poll began was
            # charged up to 100 ms more, 2% of a 5 s run's delivered/s)
            for fd, _ in self._poll.poll(0.005):
                i = self._by_fd[fd]
                try:
                    n = self.socks[i].recv_into(buf)
                except BlockingIOError:
                    continue
                if not n:
                    self._poll.unregister(fd)
                    self.open -= 1
                    continue
                head = bytes(view[:2])
                counts[i] += buf.count(b"id:", 0, n) + (tails[i] + head).count(b"id:")
                tails[i] = bytes(view[max(0, n - 2):n])
                if i in self.sampled:
                    self._times(i, bytes(view[:n]))

    def _times(self, i: int, data: bytes) -> None:
        now = time.time()
        text = self._text[i] + data
        pos = 0
        while True:
            a = text.find(b"data:", pos)
            if a < 0:
                break
            b = text.find(b" ", a)
            if b < 0:
                break
            try:
                self.latencies.append(now - float(text[a + 5:b]))
            except ValueError:
                pass
            pos = b
        self._text[i] = text[pos:][-64:]


def _clients(port: int, path: str, n: int, sample: int, ready: Any, go: Any, expected: Any,
             deadline: Any, out: Any) -> None:
    """Open `n` SSE streams; count every event on all of them, time `sample` of them.

    Reads until each stream has the `expected` count (set by the producer once it is done) or
    the `deadline` passes, then reports per-stream counts, latencies and its own CPU time.
    """
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: b\r\n\r\n".encode())
        socks.append(s)
    step = max(1, n // sample) if sample else n + 1
    reader = _Reader(socks, set(range(0, n, step)))
    ready.set()
    go.wait()
    cpu0 = time.process_time()
    t0 = time.time()

    on_time: list[int] = []  # events counted when the producer finished (before catching up)

    def done() -> bool:
        want = expected.value
        if want >= 0 and not on_time:
            on_time.append(sum(reader.counts))
        if want >= 0 and min(reader.counts) >= want:
            return True
        return deadline.value > 0 and time.time() > deadline.value

    reader.run(done)
    out.put((reader.counts, reader.latencies, time.process_time() - cpu0, time.time() - t0,
             on_time[0] if on_time else sum(reader.counts)))
    for s in socks:
        s.close()


def _hold_idle(port: int, path: str, n: int, ready: Any, done: Any) -> None:
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: b\r\n\r\n".encode())
        socks.append(s)
    for s in socks:  # wait for every response's headers
        s.settimeout(30)
        s.recv(4096)
    ready.set()
    done.wait()
    for s in socks:
        s.close()


# -- helpers ---------------------------------------------------------------------------------

class Server:
    """One SSE server under test, its process and port: ssekd or the baseline bridge."""

    def __init__(self, name: str, process: subprocess.Popen[bytes], port: int,
                 log: Path) -> None:
        self.name = name
        self.process = process
        self.port = port
        deadline = time.monotonic() + 30
        while not port_open("127.0.0.1", port):
            if time.monotonic() > deadline or process.poll() is not None:
                raise SystemExit(f"{name} did not start: {log}")
            time.sleep(0.05)
        self.proc = psutil.Process(process.pid)

    def processes(self) -> list[psutil.Process]:
        """The server's process and its children (ssekd's workers), whose CPU and memory count."""
        return [self.proc, *self.proc.children(recursive=True)]

    def cpu(self) -> float:
        return sum(t.user + t.system for t in (p.cpu_times() for p in self.processes()))

    def rss(self) -> int:
        return sum(int(p.memory_info().rss) for p in self.processes())

    def close(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(20)
        except subprocess.TimeoutExpired:
            self.process.kill()


class Rig:
    """A broker, ssekd on it, and (with `baseline`) the baseline bridge on the same broker; with
    `workers` above 1, ssekd is a parent and its workers, its CPU and memory summed over them."""

    def __init__(self, template: str = CONFIG, baseline: bool = False, workers: int = 1) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="ssekd-bench-"))
        self.broker = start_broker(log_path=self.tmp / "tansu.log")
        self.admin = AdminClient({"bootstrap.servers": self.broker.bootstrap})
        self.port = free_port()
        self.metrics_port = free_port()
        config = self.tmp / "zilla.yaml"
        config.write_text(template.format(port=self.port, bootstrap=self.broker.bootstrap,
                                          metrics_port=self.metrics_port))
        self.log = open(self.tmp / "daemon.log", "wb")  # noqa: SIM115 - lives as long as the daemon
        daemon = subprocess.Popen([TWISTD, "-n", "--pidfile=", "ssekd", "--config", str(config),
                                   "--workers", str(workers)],
                                  stdout=self.log, stderr=subprocess.STDOUT, cwd=self.tmp)
        self.servers: list[Server] = []
        try:
            self.ssekd = Server("ssekd", daemon, self.port, self.tmp / "daemon.log")
            deadline = time.monotonic() + 20
            while len(self.ssekd.proc.children()) < (workers if workers > 1 else 0):
                if time.monotonic() > deadline:
                    raise SystemExit(f"workers did not start: {self.tmp / 'daemon.log'}")
                time.sleep(0.05)
            self.servers.append(self.ssekd)
            if baseline:
                self._start_baseline()
        except BaseException:
            daemon.kill()
            self.close()
            raise
        self.daemon, self.proc = daemon, self.ssekd.proc
        self.producer = Producer({"bootstrap.servers": self.broker.bootstrap, "linger.ms": 2})

    def _start_baseline(self) -> None:
        port = free_port()
        self.baseline_log = open(self.tmp / "baseline.log", "wb")  # noqa: SIM115
        app = subprocess.Popen([sys.executable, str(BASELINE), "--bootstrap",
                                self.broker.bootstrap, "--port", str(port),
                                "--ring", str(CACHE_MESSAGES)],
                               stdout=self.baseline_log, stderr=subprocess.STDOUT)
        try:
            self.servers.append(Server("baseline", app, port, self.tmp / "baseline.log"))
        except BaseException:
            app.kill()
            raise

    def topic(self, name: str, partitions: int = 3) -> str:
        self.admin.create_topics([NewTopic(name, partitions, 1)])[name].result(10)
        return name

    def produce_at(self, topic: str, rate: float, seconds: float, pad: int = 100) -> int:
        """Produce `rate`/s for `seconds`, each value "<epoch> <pad>"; return how many."""
        padding = b"x" * pad
        sent = 0
        start = time.time()
        while (elapsed := time.time() - start) < seconds:
            due = int(elapsed * rate) + 1
            while sent < due:
                self.producer.produce(topic, b"%.6f " % time.time() + padding)
                sent += 1
            self.producer.poll(0)
            time.sleep(0.002)
        self.producer.flush(10)
        return sent

    def fill(self, topic: str, count: int) -> None:
        """Produce `count` records "<n> <100 bytes>" as fast as the producer's queue allows."""
        pad = b"x" * 100
        for i in range(count):
            while True:
                try:
                    self.producer.produce(topic, b"%d " % i + pad)
                    break
                except BufferError:  # the local queue is full: let it drain
                    self.producer.poll(0.05)
            if i % 10000 == 0:
                self.producer.poll(0)
        self.producer.flush(120)

    def cpu(self) -> float:
        return self.ssekd.cpu()

    def rss(self) -> int:
        return self.ssekd.rss()

    def close(self) -> None:
        for server in self.servers:
            server.close()
        self.broker.stop()


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * q))]


def fanout(rig: Rig, clients: int, rate: float, seconds: float, procs: int | None = None,
           sample: int = 100, query: str = "", server: Server | None = None) -> dict[str, Any]:
    """`clients` streams of one topic while `rate` events/s are produced for `seconds`.

    Every stream is drained and counted (a stream that misses or repeats an event shows in
    `complete`, `lost` and `duplicated`); latency is taken on `sample` streams spread over the
    clients. `query` is added to each stream's path (e.g. `?access_token=...` for guarded
    streams, `bench/jwt_guard.py`). `server` is ssekd unless given (the baseline).
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
    ps = [ctx.Process(target=_clients, args=(server.port, f"/events/{topic}{query}", per,
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
    cpu0 = server.cpu()
    go.set()
    t0 = time.time()
    sent = rig.produce_at(topic, rate, seconds)
    produce_time = time.time() - t0
    expected.value = sent
    # what is not received by then counts as lost: room for a server that fell behind to catch
    # up (ssekd never drops an event for a slow stream; it is late, and shows here as lost)
    deadline.value = time.time() + 10.0 + clients / 500
    results = [out.get(timeout=300) for _ in ps]
    cpu = server.cpu() - cpu0
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
        "p50_ms": round(_pct(lat, 0.5) * 1000, 2), "p99_ms": round(_pct(lat, 0.99) * 1000, 2),
        "p999_ms": round(_pct(lat, 0.999) * 1000, 2),
        "max_ms": round(max(lat, default=float("nan")) * 1000, 2),
        "daemon_cpu_pct": round(100 * cpu / produce_time, 1),
        "cpu_us_per_event": round(cpu * 1e6 / max(1, delivered), 2),
        "client_cpu_pct": round(100 * sum(r[2] for r in results) / produce_time, 1),
        "rss_mib": round(rss / 2**20, 1),
        "kib_per_stream": round(max(0, rss - rss0) / len(counts) / 1024, 2),
        "load_avg": round(os.getloadavg()[0], 2),
        **({"top_costs": costs} if costs is not None else {}),
    }


#: `--profile`: sample the server with py-spy during each fan-out scenario.
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


def connection_storm(rig: Rig, server: Server, n: int, procs: int = 4) -> dict[str, Any]:
    """Connects/s: `procs` processes open `n` streams in all as fast as they can."""
    topic = rig.topic(f"storm-{server.name}-{time.monotonic_ns()}", 1)
    ctx = mp.get_context("fork")
    out: Any = ctx.Queue()
    ps = [ctx.Process(target=_storm, args=(server.port, f"/events/{topic}", n // procs, out))
          for _ in range(procs)]
    cpu0 = server.cpu()
    for p in ps:
        p.start()
    results = [out.get(timeout=300) for _ in ps]
    cpu = server.cpu() - cpu0
    for p in ps:
        p.join(30)
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
    reader = _Reader(socks, set())
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
    ctx = mp.get_context("fork")
    out: Any = ctx.Queue()
    cpu0 = server.cpu()
    ps = [ctx.Process(target=_resumers, args=(server.port, f"/events/{topic}", ids[half - 1],
                                              clients // procs, want, out))
          for _ in range(procs)]
    for p in ps:
        p.start()
    results = [out.get(timeout=300) for _ in ps]
    cpu = server.cpu() - cpu0
    for p in ps:
        p.join(30)
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
                run.update(scrapes=len(times), scrape_p50_ms=round(_pct(times, 0.5) * 1000, 2),
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
    w = ctx.Process(target=_hold_idle, args=(server.port, f"/events/{topic}", 1, warm_ready,
                                             warm_done))
    w.start()
    warm_ready.wait(30)
    time.sleep(1)
    before = server.rss()
    done = ctx.Event()
    procs = 4 if n > 2000 else 1
    ready = [ctx.Event() for _ in range(procs)]
    ps = [ctx.Process(target=_hold_idle, args=(server.port, f"/events/{topic}", n // procs,
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
            cpu0 = server.cpu()
            t0 = time.time()
            rate, reader_cpu, got = _sse_consumer(server.port, path, messages)
            cpu = server.cpu() - cpu0
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
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
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


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}" if b else "-"


def print_table(r: dict[str, Any]) -> None:
    print(f"\nfan-out benchmark, ssekd beside the baseline bridge ({r['machine']['cpus']} cpus, "
          f"one server process each, {r.get('mode', '')})\n")
    rows = r.get("fanout", [])
    pairs: dict[tuple[int, float], dict[str, Any]] = {}
    for x in rows:
        pairs.setdefault((x["clients"], x["rate"]), {})[x["server"]] = x
    if pairs:
        print("every stream counted; latency over ~100 sampled streams (recv time - produce time)")
        print("| clients x ev/s | server | delivered/s | lost | dup | p50 ms | p99 ms | p999 ms "
              "| CPU us/event | KiB/stream | reader % | delivered ratio | p99 ratio |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        for (clients, rate), by in pairs.items():
            s, b = by.get("ssekd"), by.get("baseline")
            for x in (s, b):
                if x is None:
                    continue
                ratios = ""
                if x is s and b is not None:
                    ratios = (f"{_ratio(s['delivered_per_s'], b['delivered_per_s'])} | "
                              f"{_ratio(s['p99_ms'], b['p99_ms'])}")
                else:
                    ratios = " | "
                print(f"| {clients:,} x {rate:.0f} | {x['server']} | {x['delivered_per_s']:,} | "
                      f"{x['lost']:,} | {x['duplicated']:,} | {x['p50_ms']} | {x['p99_ms']} | "
                      f"{x['p999_ms']} | {x['cpu_us_per_event']} | {x['kib_per_stream']} | "
                      f"{x['client_cpu_pct']} | {ratios} |")
    for i in r.get("idle", []):
        print(f"\nidle streams ({i['server']}): {i['streams']:,} held={i['held']}  "
              f"{i['kib_per_stream']} KiB RSS each (RSS {i['rss_before_mib']} -> "
              f"{i['rss_after_mib']} MiB), idle cpu {i['idle_cpu_pct']}%")
    if "single_client" in r:
        s = r["single_client"]
        print(f"\none client, {s['messages']:,} records: bare consumer "
              f"{s['bare_consumer_per_s']:,}/s (before {s['bare_cold_per_s']:,}, after "
              f"{s['bare_again_per_s']:,}); load {s['load_avg']}")
        for name in ("ssekd", "baseline"):
            if name in s:
                x = s[name]
                print(f"  {name:>8}: cold {x['cold_per_s']:,}/s ({x['ratio_cold']:.0%}, got "
                      f"{x['cold_got']:,}, server {x['cold_daemon_cpu_pct']}% cpu), cached "
                      f"{x['cached_per_s']:,}/s ({x['ratio_cached']:.0%}, got "
                      f"{x['cached_got']:,}, server {x['cached_daemon_cpu_pct']}% cpu)")
    for x in r.get("connection_storm", []):
        print(f"\nconnection storm ({x['server']}): {x['opened']:,}/{x['attempted']:,} streams "
              f"opened, {x['connects_per_s']:,} connects/s, {x['cpu_ms_per_connect']} ms CPU "
              f"each; first error: {x['first_error'] or 'none'}")
    for x in r.get("resume_storm", []):
        print(f"\nresume storm ({x['server']}): {x['clients']:,} streams resuming at once, "
              f"{x['events_each']:,} events each in {x['seconds']} s, complete "
              f"{x['complete']:,}, lost {x['lost']:,}, dup {x['duplicated']:,}, "
              f"{x['cpu_us_per_event']} us CPU/event")
    if "scrape_overhead" in r:
        s = r["scrape_overhead"]
        print(f"\nscraping /metrics every 100 ms, {s['clients']:,} x {s['rate']:.0f}/s: "
              f"delivered {s['delivered_per_s_without']:,}/s without, "
              f"{s['delivered_per_s_with']:,}/s with ({s['throughput_cost_pct']}% cost); "
              f"daemon CPU {s['cpu_ms_per_1000_without']} -> {s['cpu_ms_per_1000_with']} ms per "
              f"1,000 deliveries ({s['cpu_cost_pct']}%); every stream complete: {s['complete']}")


def plot(r: dict[str, Any], path: Path) -> None:
    """Delivered events/s and p99 per scenario (client count x rate), ssekd beside the
    baseline, as grouped bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = r["fanout"]
    labels = list(dict.fromkeys(f"{x['clients']:,}x{x['rate']:.0f}" for x in rows))
    names = list(dict.fromkeys(x["server"] for x in rows))
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.5))
    width = 0.8 / len(names)
    for k, (key, title) in enumerate((("delivered_per_s", "delivered events/s"),
                                      ("p99_ms", "p99 latency, ms (produce -> receive)"))):
        ax = axes[k]
        for j, name in enumerate(names):
            by = {f"{x['clients']:,}x{x['rate']:.0f}": x[key] for x in rows
                  if x["server"] == name}
            ax.bar([i + j * width for i in range(len(labels))],
                   [by.get(lab, 0) for lab in labels], width, label=name)
        ax.set_xticks([i + width * (len(names) - 1) / 2 for i in range(len(labels))], labels,
                      rotation=30)
        ax.set_xlabel("clients x events/s per client")
        ax.set_title(title)
        if key == "p99_ms":
            ax.set_yscale("log")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    print(f"plot written to {path}")


if __name__ == "__main__":
    sys.exit(main())
