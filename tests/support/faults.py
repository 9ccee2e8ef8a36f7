"""What the whole-daemon reliability tests share: sizes scaled by `RELIABILITY_SECONDS`, a
daemon config for one route, a producer whose payloads carry a sequence number, a pool of SSE
clients read by one thread that checks every event it gets, and the daemon's fds and memory.

The payload of record `n` of partition `p` is `p=<p> s=<n>`, so a client can tell per event
whether anything was lost, repeated or reordered without trusting the daemon's ids.
"""

from __future__ import annotations

import os
import re
import selectors
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import psutil
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from ssekd.dev.broker import free_port
from tests.support import zilla_config as zc
from tests.support.daemon import Daemon, start_daemon

# -- how long and how big ----------------------------------------------------------------------


def long_seconds() -> float | None:
    """`RELIABILITY_SECONDS` when set: the run is a long one at the issue's full sizes."""
    raw = os.environ.get("RELIABILITY_SECONDS", "").strip()
    return float(raw) if raw else None


def sized(default: float, full: float) -> int:
    """`default` in a `make test` run, `full` when RELIABILITY_SECONDS asks for the long run."""
    return int(full if long_seconds() is not None else default)


def seconds(default: float, full: float | None = None) -> float:
    """A duration: `default` normally; RELIABILITY_SECONDS (or `full`, when given) otherwise."""
    long = long_seconds()
    if long is None:
        return default
    return full if full is not None else long


def time_limit() -> float:
    """pytest-timeout's limit for one test: the project's 300 s, more for a long run."""
    long = long_seconds()
    return 300.0 if long is None else max(1800.0, 4 * long)


def raise_fd_limit(want: int) -> None:
    """Raise this process's open-file soft limit towards `want` (the daemon inherits it)."""
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = want if hard == resource.RLIM_INFINITY else min(want, hard)
    if soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


# -- the daemon --------------------------------------------------------------------------------

def config(bootstrap: str, port: int, idle: float = 5, header_timeout: float = 10,
           cache_messages: int = 100_000) -> zc.Node:
    """The usual chain with streams at /events/{topic}, a kafka client that reconnects fast."""
    return zc.sse_stack(port, bootstrap, name="reliability",
                        routes=[zc.sse_route("/events/{topic}")],
                        http=zc.http_server(limits={"header-timeout": header_timeout}),
                        sse=zc.sse_server(max_idle_time=idle),
                        cache={"cache": {"max-messages": cache_messages}},
                        properties=zc.FAST_RECONNECT)


def write_config(folder: Path, bootstrap: str, port: int, idle: float = 5,
                 header_timeout: float = 10, cache_messages: int = 100_000) -> Path:
    return zc.write(folder / f"zilla-{port}.yaml",
                    config(bootstrap, port, idle, header_timeout, cache_messages))


def run_daemon(started: list[Daemon], folder: Path, bootstrap: str, port: int | None = None,
               idle: float = 5, header_timeout: float = 10,
               cache_messages: int = 100_000) -> tuple[Daemon, int]:
    """Start `twistd -n ssekd` serving `/events/{topic}` from `bootstrap`; (daemon, port).
    It goes into `started` (the `daemons` fixture's list, which stops them after the test)."""
    port = port or free_port()
    config = write_config(folder, bootstrap, port, idle, header_timeout, cache_messages)
    daemon = start_daemon(config, wait_ports=[port])
    started.append(daemon)
    return daemon, port


def tracebacks(output: str) -> list[str]:
    """Lines of daemon output that show a Python traceback or an unhandled Twisted error."""
    return [line for line in output.splitlines()
            if "Traceback (most recent call last)" in line or "Unhandled Error" in line
            or "Unhandled error in Deferred" in line]


@dataclass
class Usage:
    fds: int
    rss: int


def usage(pid: int) -> Usage:
    return Usage(len(os.listdir(f"/proc/{pid}/fd")), psutil.Process(pid).memory_info().rss)


def wait_for(condition: Callable[[], bool], timeout: float, what: str,
             interval: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


# -- Kafka ---------------------------------------------------------------------------------


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        f.result(15)


class SeqProducer:
    """Writes `p=<p> s=<n>` to each partition with `n` counting up from 0 per partition."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        self.topic = topic
        self.partitions = partitions
        self.next = [0] * partitions
        self._turn = 0
        self.failed = 0
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 2,
                                  "message.timeout.ms": 60000})

    def _report(self, err: object, msg: object) -> None:
        if err is not None:
            self.failed += 1

    def produce(self, count: int) -> None:
        """`count` records spread round-robin over the partitions (not flushed)."""
        for _ in range(count):
            p = self._turn % self.partitions
            self._turn += 1
            value = b"p=%d s=%d" % (p, self.next[p])
            self.next[p] += 1
            while True:
                try:
                    self.producer.produce(self.topic, value, partition=p,
                                          on_delivery=self._report)
                    break
                except BufferError:
                    self.producer.poll(0.05)
        self.producer.poll(0)

    def produce_at(self, rate: float, duration: float,
                   stop: threading.Event | None = None) -> None:
        """About `rate` records a second for `duration` seconds, in 20 ms steps."""
        start = time.monotonic()
        done = 0
        while (elapsed := time.monotonic() - start) < duration:
            if stop is not None and stop.is_set():
                break
            due = int(rate * elapsed) - done
            if due > 0:
                self.produce(due)
                done += due
            time.sleep(0.02)

    def flush(self, timeout: float = 30) -> None:
        left = self.producer.flush(timeout)
        assert left == 0 and self.failed == 0, f"{left} unsent, {self.failed} failed"

    @property
    def total(self) -> int:
        return sum(self.next)


# -- SSE clients ---------------------------------------------------------------------------


#: The data line of an event from SeqProducer.
_DATA = re.compile(rb"^data:p=(\d+) s=(\d+)$", re.M)


@dataclass
class Stream:
    """One SSE client: what it received, checked per event against the sequence numbers."""

    path: str
    partitions: int
    reconnect: bool = True
    sock: socket.socket | None = None
    last_id: str | None = None
    #: next sequence number expected per partition
    expect: list[int] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    connects: int = 0
    status: int | None = None
    statuses: list[int] = field(default_factory=list)
    #: when the pool may (re)connect it, after its stream ended or a connect failed
    retry_at: float = 0.0
    # parser state
    _raw: bytearray = field(default_factory=bytearray)
    _head: bool = True
    _chunk_left: int = 0
    _body: bytearray = field(default_factory=bytearray)

    def __post_init__(self) -> None:
        self.expect = [0] * self.partitions

    @property
    def received(self) -> int:
        return sum(self.expect)

    def _reset_parser(self) -> None:
        self._raw = bytearray()
        self._head = True
        self._chunk_left = 0
        self._body = bytearray()

    def feed(self, data: bytes) -> bool:
        """Take bytes from the socket; False when the response ended."""
        self._raw += data
        if self._head:
            end = self._raw.find(b"\r\n\r\n")
            if end < 0:
                return True
            head = bytes(self._raw[:end]).decode("latin-1")
            del self._raw[:end + 4]
            self._head = False
            self.status = int(head.split(" ", 2)[1])
            self.statuses.append(self.status)
            if "transfer-encoding: chunked" not in head.lower():
                return False  # an error response with a body: the stream did not open
        return self._dechunk()

    def _dechunk(self) -> bool:
        raw = self._raw
        pos = 0
        ended = False
        while True:
            if self._chunk_left:
                take = min(self._chunk_left, len(raw) - pos)
                self._body += raw[pos:pos + take]
                pos += take
                self._chunk_left -= take
                if self._chunk_left:
                    break
                self._chunk_left = -2  # the chunk's CRLF
            if self._chunk_left < 0:
                if len(raw) - pos < 2:
                    break
                pos += 2
                self._chunk_left = 0
            nl = raw.find(b"\r\n", pos)
            if nl < 0:
                break
            size = int(bytes(raw[pos:nl]).split(b";")[0], 16)
            pos = nl + 2
            if size == 0:
                ended = True
                break
            self._chunk_left = size
        del raw[:pos]
        self._parse_events()
        return not ended

    def _parse_events(self) -> None:
        """Check every complete event in the body: one regex pass over what arrived, then a
        short loop per event (a thousand streams at 50 events/s must not outrun this reader)."""
        body = self._body
        end = body.rfind(b"\n\n")
        if end < 0:
            return
        block = bytes(body[:end + 2])
        del body[:end + 2]
        pairs = _DATA.findall(block)
        if len(pairs) != block.count(b"data:"):
            self._problem(f"an event not from SeqProducer in {block[:120]!r}")
        expect = self.expect
        for p_raw, s_raw in pairs:
            p = int(p_raw)
            s = int(s_raw)
            if p >= self.partitions:
                self._problem(f"partition {p} out of range")
                continue
            want = expect[p]
            if s == want:
                expect[p] = s + 1
            elif s < want:
                self._problem(f"partition {p}: seq {s} again or out of order (expected {want})")
            else:
                self._problem(f"partition {p}: seq {want}..{s - 1} lost (got {s})")
                expect[p] = s + 1
        i = block.rfind(b"id:")
        while i > 0 and block[i - 1] != 0x0A:  # an `id:` that does not start a line
            i = block.rfind(b"id:", 0, i)
        if i >= 0:
            self.last_id = block[i + 3:block.index(b"\n", i)].decode("utf-8")

    def _problem(self, text: str) -> None:
        if len(self.problems) < 20:
            self.problems.append(text)

    def request(self, host: str, port: int) -> bytes:
        lines = [f"GET {self.path} HTTP/1.1", f"Host: {host}:{port}",
                 "Accept: text/event-stream"]
        if self.last_id is not None:
            lines.append(f"Last-Event-ID: {self.last_id}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8")


class StreamPool:
    """Many SSE clients read by one thread (a selector). A stream that ends or cannot connect
    comes back like an EventSource: after `retry` seconds, with its last id."""

    def __init__(self, port: int, host: str = "127.0.0.1", retry: float = 0.2) -> None:
        self.host = host
        self.port = port
        self.retry = retry
        self.streams: list[Stream] = []
        self._sel = selectors.DefaultSelector()
        self._lock = threading.Lock()
        self._waiting: list[Stream] = []  # to (re)connect at their `retry_at`
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="stream-pool", daemon=True)

    def open(self, paths: Iterable[str], partitions: int, reconnect: bool = True,
             last_id: str | None = None, expect: list[int] | None = None) -> list[Stream]:
        """Open one stream per path now (connected before this returns); `last_id` resumes
        them, and then `expect` is the next sequence number due per partition."""
        opened = []
        for path in paths:
            s = Stream(path, partitions, reconnect)
            s.last_id = last_id
            if expect is not None:
                s.expect = list(expect)
            self._connect(s)
            opened.append(s)
        with self._lock:
            self.streams += opened
        if not self._thread.is_alive():
            self._thread.start()
        return opened

    def _connect(self, s: Stream) -> None:
        try:
            sock = socket.create_connection((self.host, self.port), timeout=5)
            sock.sendall(s.request(self.host, self.port))
            sock.setblocking(False)
        except OSError:
            s.retry_at = time.monotonic() + self.retry
            with self._lock:
                self._waiting.append(s)
            return
        s._reset_parser()
        s.sock = sock
        s.connects += 1
        with self._lock:
            self._sel.register(sock, selectors.EVENT_READ, s)

    def _drop(self, s: Stream) -> None:
        if s.sock is not None:
            self._sel.unregister(s.sock)
            s.sock.close()
            s.sock = None
        if s.reconnect and not self._stop.is_set():
            s.retry_at = time.monotonic() + self.retry
            self._waiting.append(s)

    def _run(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                due = [s for s in self._waiting if s.retry_at <= time.monotonic()]
                self._waiting = [s for s in self._waiting if s not in due]
            for s in due:
                self._connect(s)
            if not self._sel.get_map():
                time.sleep(0.02)
                continue
            for key, _ in self._sel.select(0.05):
                s = key.data
                try:
                    data = key.fileobj.recv(262144)  # type: ignore[union-attr]
                except BlockingIOError:
                    continue
                except OSError:
                    data = b""
                if not data or not s.feed(data):
                    self._drop(s)

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(10)
        for s in self.streams:
            if s.sock is not None:
                s.sock.close()
                s.sock = None

    def wait_complete(self, counts: Callable[[], list[int]], timeout: float) -> None:
        """Until every stream received exactly `counts()` per partition (or fail naming them)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            want = counts()
            if all(s.expect == want for s in self.streams):
                return
            time.sleep(0.05)
        want = counts()
        behind = [s for s in self.streams if s.expect != want]
        raise AssertionError(
            f"{len(behind)} of {len(self.streams)} streams incomplete after {timeout}s, "
            f"expected {want}; e.g. {[(s.expect, s.connects, s.statuses[-3:]) for s in behind[:3]]}"
            f"; problems: {self.problems()[:5]}")

    def problems(self) -> list[str]:
        return [f"{s.path}: {p}" for s in self.streams for p in s.problems]


# -- hostile clients -----------------------------------------------------------------------


def rst_close(sock: socket.socket) -> None:
    """Close with SO_LINGER 0: the peer gets a RST instead of a FIN."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()
