"""The fan-out benchmark's rig: a broker, ssekd on it (and the baseline bridge beside it), a
producer, and the client processes that count every event of many streams cheaply."""

from __future__ import annotations

import select
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from bench.common import sent_ages
from ssekd.dev.broker import free_port, port_open, start_broker
from tests.support import zilla_config as zc

ROOT = Path(__file__).resolve().parents[2]
TWISTD = str(Path(sys.executable).with_name("twistd"))
BASELINE = ROOT / "bench" / "baseline" / "app.py"
#: Records ssekd's cache and the baseline's ring keep per topic: the whole single-client topic.
CACHE_MESSAGES = 1_100_000


def config(port: int, bootstrap: str, metrics_port: int) -> zc.Node:
    """The benchmark's daemon: streams at /events/{topic}, a cache that holds the whole
    single-client topic, a prometheus exporter (which the scrape scenario reads)."""
    # every benchmark client comes from 127.0.0.1: 10,000 streams and the storms need room
    return zc.sse_stack(
        port, bootstrap, name="bench", routes=[zc.sse_route("/events/{topic}")],
        tcp_options={"limits": {"connections-per-ip": 19000}},
        cache={"cache": {"max-messages": CACHE_MESSAGES, "max-bytes": 536870912}},
        telemetry={"exporters": {"prom": {"type": "prometheus",
                                          "options": {"endpoints": [{"port": metrics_port}]}}}})


#: What `Rig` takes for its daemon's config: a function of (port, bootstrap, metrics port), or
#: a `str.format` template with those three fields.
Config = Callable[[int, str, int], zc.Node] | str

# -- client processes -----------------------------------------------------------------------

class Reader:
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
        #: Bytes read over all the streams (bytes per send syscall, bench/send_floor.py).
        self.bytes = 0
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
                self.bytes += n
                head = bytes(view[:2])
                counts[i] += buf.count(b"id:", 0, n) + (tails[i] + head).count(b"id:")
                tails[i] = bytes(view[max(0, n - 2):n])
                if i in self.sampled:
                    self._times(i, bytes(view[:n]))

    def _times(self, i: int, data: bytes) -> None:
        self._text[i] = sent_ages(self._text[i], data, time.time(), self.latencies)


def run_clients(port: int, path: str, n: int, sample: int, ready: Any, go: Any, expected: Any,
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
    reader = Reader(socks, set(range(0, n, step)))
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
             on_time[0] if on_time else sum(reader.counts), reader.bytes))
    for s in socks:
        s.close()


def hold_idle(port: int, path: str, n: int, ready: Any, done: Any, wait: float = 30) -> None:
    """`n` idle streams held until `done`; `ready` once every response's headers came, each
    within `wait` seconds (longer for a daemon slowed down on purpose, bench/idle_memory.py)."""
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=wait)
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: b\r\n\r\n".encode())
        socks.append(s)
    for s in socks:  # wait for every response's headers
        s.settimeout(wait)
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
        return sum(self.cpu_split())

    def cpu_split(self) -> tuple[float, float]:
        """User and system CPU seconds: Python's own work apart from the kernel's (sends)."""
        times = [p.cpu_times() for p in self.processes()]
        return sum(t.user for t in times), sum(t.system for t in times)

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

    def __init__(self, template: Config = config, baseline: bool = False,
                 workers: int = 1) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="ssekd-bench-"))
        self.broker = start_broker(log_path=self.tmp / "tansu.log")
        self.admin = AdminClient({"bootstrap.servers": self.broker.bootstrap})
        self.port = free_port()
        self.metrics_port = free_port()
        config = self.tmp / "zilla.yaml"
        if isinstance(template, str):
            config.write_text(template.format(port=self.port, bootstrap=self.broker.bootstrap,
                                              metrics_port=self.metrics_port))
        else:
            zc.write(config, template(self.port, self.broker.bootstrap, self.metrics_port))
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


def percentile(values: list[float], q: float) -> float:
    """The `q` quantile of `values` (nearest rank); NaN for none."""
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * q))]
