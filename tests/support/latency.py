"""Other clients' latency while a test attacks the daemon: well-behaved SSE streams in a process
of their own, fed by a producer in that process that puts its clock in every event.

The probe runs apart from the test (`python -m tests.support.latency`), so that an attacker
busy in the test process (and its GIL) cannot delay the readers and pass its own slowness off as
the daemon's. The child opens `streams` HTTP/1.1 SSE streams, produces `rate` events a second,
each `<seq> <time.time()>`, and appends a line per delivered event to `out`:
`<received> <stream> <seq> <latency>` (seconds), or `END <stream>` when a stream ends. The test
reads the file and compares windows of time (`LatencyProbe.latencies`).
"""

from __future__ import annotations

import selectors
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from tests.support.wait import wait_until

ROOT = Path(__file__).resolve().parents[2]


def p99(values: list[float]) -> float:
    """The 99th percentile (nearest rank); 0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


class LatencyProbe:
    """The test's side: starts the child, reads what it recorded, stops it."""

    def __init__(self, port: int, path: str, bootstrap: str, topic: str, out: Path,
                 streams: int = 20, rate: int = 50) -> None:
        self.out = out
        self.streams = streams
        out.write_text("")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.support.latency", str(port), path, bootstrap, topic,
             str(streams), str(rate), str(out)],
            cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def records(self) -> list[tuple[float, int, int, float]]:
        rows = []
        for line in self.out.read_text().splitlines():
            parts = line.split()
            if len(parts) == 4:
                rows.append((float(parts[0]), int(parts[1]), int(parts[2]), float(parts[3])))
        return rows

    def ended(self) -> list[int]:
        return [int(line.split()[1]) for line in self.out.read_text().splitlines()
                if line.startswith("END")]

    def latencies(self, start: float, end: float = float("inf")) -> list[float]:
        """Latencies of events received between `start` and `end` (`time.time()` values)."""
        return [lat for at, _, _, lat in self.records() if start <= at < end]

    def wait_ready(self, timeout: float = 20.0) -> None:
        """Until every stream has received an event."""
        wait_until(lambda: len({s for _, s, _, _ in self.records()}) == self.streams, timeout,
                   what=lambda: f"latency probe not ready: {self.out.read_text()[-500:]!r} "
                                f"{self._stderr()}")

    def wait_samples(self, since: float, n: int, timeout: float = 20.0) -> None:
        wait_until(lambda: len(self.latencies(since)) >= n, timeout,
                   what=lambda: f"{len(self.latencies(since))} of {n} events since {since}"
                                f" {self._stderr()}")

    def _stderr(self) -> str:
        if self.process.poll() is None:
            return "(probe running)"
        assert self.process.stderr is not None
        return self.process.stderr.read().decode(errors="replace")

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()  # the child's signal to stop
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if self.process.stderr is not None:
            self.process.stderr.close()


# -- the child ----------------------------------------------------------------------------------


class _Stream:
    """One HTTP/1.1 SSE response read from a non-blocking socket: head, chunks, events."""

    def __init__(self, index: int, sock: socket.socket) -> None:
        self.index = index
        self.sock = sock
        self.raw = b""
        self.body = b""
        self.head_done = False

    def feed(self, data: bytes) -> list[bytes]:
        """The data lines of the events complete after `data`."""
        self.raw += data
        if not self.head_done:
            head, sep, rest = self.raw.partition(b"\r\n\r\n")
            if not sep:
                return []
            if b"chunked" not in head.lower():
                raise RuntimeError(f"stream {self.index}: {head!r}")
            self.head_done, self.raw = True, rest
        while True:
            size_line, sep, rest = self.raw.partition(b"\r\n")
            if not sep:
                break
            size = int(size_line.split(b";")[0], 16)
            if len(rest) < size + 2:
                break
            self.body += rest[:size]
            self.raw = rest[size + 2:]
        *blocks, self.body = self.body.split(b"\n\n")
        return [line[5:].strip() for block in blocks for line in block.split(b"\n")
                if line.startswith(b"data:")]


def _produce(bootstrap: str, topic: str, rate: int, stop: threading.Event) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    seq = 0
    next_at = time.monotonic()
    while not stop.is_set():
        producer.produce(topic, value=b"%d %.6f" % (seq, time.time()))
        producer.poll(0)
        seq += 1
        next_at += 1 / rate
        stop.wait(max(0.0, next_at - time.monotonic()))
    producer.flush(5)


def main(argv: list[str]) -> None:
    port, path, bootstrap, topic = int(argv[0]), argv[1], argv[2], argv[3]
    streams, rate, out_path = int(argv[4]), int(argv[5]), argv[6]
    selector = selectors.DefaultSelector()
    for index in range(streams):
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                     "Accept: text/event-stream\r\n\r\n".encode())
        sock.setblocking(False)
        selector.register(sock, selectors.EVENT_READ, _Stream(index, sock))
    selector.register(sys.stdin, selectors.EVENT_READ, None)
    stop = threading.Event()
    producer = threading.Thread(target=_produce, args=(bootstrap, topic, rate, stop))
    producer.start()
    with open(out_path, "a") as out:
        flushed = time.monotonic()
        running = True
        while running:
            for key, _ in selector.select(0.05):
                stream = key.data
                if stream is None:  # stdin: closed by the test
                    running = False
                    break
                try:
                    data = stream.sock.recv(65536)
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:
                    data = b""
                now = time.time()
                if not data:
                    out.write(f"END {stream.index}\n")
                    selector.unregister(stream.sock)
                    continue
                for line in stream.feed(data):
                    seq, sent = line.split()
                    out.write(f"{now:.6f} {stream.index} {int(seq)} {now - float(sent):.6f}\n")
            if time.monotonic() - flushed > 0.1:
                out.flush()
                flushed = time.monotonic()
    stop.set()
    producer.join()


if __name__ == "__main__":
    main(sys.argv[1:])
