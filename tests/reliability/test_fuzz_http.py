"""Hostile HTTP/1.1 request heads - routes with random path parameters, `Last-Event-ID` and
`lastEventId`, `since`, odd methods, versions, line endings, header names and values - against
the daemon's real connection stack: thousands of cases in-process (the tcp binding's protocol on
a `StringTransport`, the clock a `MemoryReactorClock`), then a sample over real sockets to a
running daemon. Every case gets a well-formed answer or a clean close; nothing logs an error or
a traceback, and no case holds the reactor thread for more than 100 ms (of its CPU, the
collector paused; a case over it is run again, twice at most, and the least counts).
"""

from __future__ import annotations

import re
import socket
import statistics
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from twisted.internet.address import IPv4Address
from twisted.internet.error import ConnectionDone
from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.logger import globalLogPublisher
from twisted.python.failure import Failure

from ssekd.dev.broker import Broker, free_port
from ssekd.engine import Engine
from ssekd.telemetry.events import EventLog
from tests.support import fuzzing
from tests.support.daemon import start_daemon
from tests.support.faults import time_limit, tracebacks

pytestmark = pytest.mark.timeout(time_limit())

STALL = 0.100
STATUS = re.compile(rb"^HTTP/1\.[01] (\d{3}) ")
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def answer_kind(sent: bytes, out: bytes) -> str:
    """What the daemon answered: a status code, "waiting" (nothing yet), or "h2"; fails on
    anything else (a malformed answer, or a 500 that means an exception was caught)."""
    if not out:
        return "waiting"
    if sent.startswith(PREFACE):
        return "h2"
    m = STATUS.match(out)
    assert m is not None, f"malformed answer {out[:80]!r} to {sent[:200]!r}"
    code = m.group(1).decode()
    assert code != "500", f"500 to {sent[:200]!r}"
    return code


class ErrorLog:
    """Collects Twisted log events at error level or carrying a failure (a traceback)."""

    def __init__(self) -> None:
        self.errors: list[str] = []

    def __call__(self, event: dict[str, Any]) -> None:
        level = event.get("log_level")
        if "log_failure" in event or (level is not None and level.name in ("error", "critical")):
            failure = event.get("log_failure")
            text = failure.getTraceback() if failure is not None else str(event)
            self.errors.append(text)


def test_request_heads_in_process(tmp_path: Path) -> None:
    port = free_port()
    # the broker is never reached: the engine is built, not started, so no consumer runs
    config = fuzzing.write_config(tmp_path, f"127.0.0.1:{free_port()}", port)
    clock = MemoryReactorClock()
    engine = Engine(config, reactor=clock, environ={}, events=EventLog("fuzz"),
                    print_events=False)
    tcp = engine._pending.runtimes["tcp"]  # type: ignore[union-attr]  # built, not started
    errors = ErrorLog()
    globalLogPublisher.addObserver(errors)
    answers: Counter[str] = Counter()
    slowest: list[Any] = [0.0, b""]

    @fuzzing.examples(2000, 20000)
    @given(fuzzing.request_heads())
    def case(data: bytes) -> None:
        opened: list[tuple[Any, StringTransport]] = []

        def attempt() -> float:
            """One fresh connection reads `data`; the CPU that took."""
            peer = IPv4Address("TCP", "127.0.0.1", 40000)
            proto = tcp.build_protocol(port, peer)
            transport = StringTransport(hostAddress=IPv4Address("TCP", "127.0.0.1", port),
                                        peerAddress=peer)
            proto.makeConnection(transport)
            opened.append((proto, transport))
            return fuzzing.thread_cpu(lambda: proto.dataReceived(data))

        cpu = fuzzing.least_cpu(attempt, STALL)
        if cpu > slowest[0]:
            slowest[:] = [cpu, data]
        assert cpu < STALL, f"{cpu * 1000:.0f} ms of reactor time for {data[:200]!r}"
        clock.advance(3)  # past the 2 s head deadline: an unfinished head gets its 408
        for _, transport in opened:
            answers[answer_kind(data, transport.value())] += 1
        for proto, _ in opened:
            proto.connectionLost(Failure(ConnectionDone()))
        clock.advance(60)  # whatever timers the request left behind run now
        assert not errors.errors, errors.errors[0]

    try:
        case()
    finally:
        globalLogPublisher.removeObserver(errors)
    total = sum(answers.values())
    print(f"\nHTTP/1.1 heads in-process: {total} cases, answers {dict(answers.most_common())}, "
          f"slowest {slowest[0] * 1000:.1f} ms of CPU ({slowest[1][:60]!r})")
    assert total >= 100


def exchange(port: int, data: bytes, wait: float = 1.0) -> bytes:
    """Send `data` on a new connection; whatever comes back within `wait` s (or until close)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        try:
            sock.sendall(data)
        except OSError:
            pass  # the daemon may refuse and close before reading everything
        out = b""
        deadline = time.monotonic() + wait
        while b"\r\n\r\n" not in out and (left := deadline - time.monotonic()) > 0:
            sock.settimeout(left)
            try:
                got = sock.recv(65536)
            except TimeoutError:
                break
            except OSError:
                break
            if not got:
                break
            out += got
        return out


class Pinger:
    """Times a tiny request on a kept-alive connection every 20 ms: the reactor's latency."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.times: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=5)
        request = b"GET /not-a-route HTTP/1.1\r\nHost: x\r\n\r\n"
        while not self._stop.wait(0.02):
            started = time.perf_counter()
            sock.sendall(request)
            out = b""
            while b"\r\n\r\n" not in out:
                out += sock.recv(4096)
            self.times.append(time.perf_counter() - started)
        sock.close()

    def __enter__(self) -> Pinger:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def summary(self) -> tuple[float, float, float]:
        ordered = sorted(self.times)
        p99 = ordered[int(len(ordered) * 0.99)]
        return statistics.median(ordered), p99, ordered[-1]


@pytest.mark.broker
def test_request_heads_over_sockets(tmp_path: Path, kafka_broker: Broker) -> None:
    """A sample of the same cases against a running daemon, many at once, while a client times
    a request every 20 ms to see the reactor stay responsive."""
    port = free_port()
    daemon = start_daemon(fuzzing.write_config(tmp_path, kafka_broker.bootstrap, port),
                          wait_ports=[port])
    cases: list[bytes] = []

    @fuzzing.examples(300, 3000)
    @given(fuzzing.request_heads())
    def collect(data: bytes) -> None:
        cases.append(data)

    collect()
    answers: Counter[str] = Counter()
    try:
        with Pinger(port) as pinger, ThreadPoolExecutor(16) as pool:
            for data, out in zip(cases, pool.map(lambda d: exchange(port, d), cases),
                                 strict=True):
                answers[answer_kind(data, out)] += 1
        median, p99, worst = pinger.summary()
        assert daemon.alive()
        output = daemon.output()
    finally:
        daemon.stop()
    print(f"\nHTTP/1.1 heads over sockets: {len(cases)} cases, answers "
          f"{dict(answers.most_common())}; a request every 20 ms meanwhile: median "
          f"{median * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms, max {worst * 1000:.1f} ms "
          f"({len(pinger.times)} requests)")
    assert not tracebacks(output), "\n".join(tracebacks(output)[:5]) + output[-5000:]
    assert p99 < STALL, f"p99 {p99 * 1000:.0f} ms"
