"""Clients that ask for big answers and never take them, against the real daemon (issue 36,
item 5): an http-kafka `fetch` route with `merge` over a topic of about a megabyte of values,
so each answer is a ~900 KB JSON array written whole (`Exchange.answer`).

* HTTP/2: connections of a hundred such streams whose window never opens (SETTINGS
  INITIAL_WINDOW_SIZE 0). Before, every answer was queued whole: the daemon grew by 171 MiB for
  two connections. Now a connection holds at most `limits.h2-unsent-bytes` and the rest are
  `503` before they start.
* HTTP/2: such a connection that pings now and then. Before, any frame kept it alive past the
  `idle-timeout`; now it is closed once nothing could be sent for `idle-timeout` seconds.
* HTTP/1.1: connections that send a GET and never read. Each holds one answer, but there were
  as many answers as connections (+88 MiB for a hundred); now the process holds at most
  `limits.process-unsent-bytes` of them.
* HTTP/1.1: one connection that sends many GETs and never reads. Twisted answered them all,
  whatever the socket held (+331 MiB for two hundred); now the next request waits until the
  socket has taken the answer before it, so the connection holds one.

The daemon's memory is sampled while each runs (`PeakRss`); the bound is the configured figure
plus `MARGIN` (the answers are built, then refused, one at a time; the allocator keeps some).
"""

from __future__ import annotations

import http.client
import select
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings
import pytest

from bench.common import PeakRss
from ssekd.dev.broker import Broker, free_port
from tests.support import zilla_config as zc
from tests.support.broker import Kafka
from tests.support.daemon import Daemon, start_daemon
from tests.support.reliability import tracebacks
from tests.support.wait import wait_until

pytestmark = [pytest.mark.daemon, pytest.mark.broker]

#: Records of the topic and the size of each value: a ~900 KB answer.
RECORDS = 900
VALUE = 1000
#: The daemon's limits: small enough to tell from what the answers would take.
IDLE_TIMEOUT = 3.0
H2_UNSENT = 2 << 20
PROCESS_UNSENT = 8 << 20
MARGIN = 16 << 20
STREAMS = 100


@dataclass
class Served:
    daemon: Daemon
    port: int
    answer: int  # bytes of one answer


def fetch_config(folder: Path, port: int, bootstrap: str, topic: str,
                 limits: dict[str, float] | None = None) -> Path:
    """tcp -> http (the limits above, or `limits`) -> http-kafka (GET /items: the topic merged)
    -> kafka."""
    fetch = {"capability": "fetch", "topic": topic,
             "merge": {"content-type": "application/json"}}
    if limits is None:
        limits = {"idle-timeout": IDLE_TIMEOUT, "h2-unsent-bytes": H2_UNSENT,
                  "process-unsent-bytes": PROCESS_UNSENT}
    bindings = {"tcp0": zc.tcp_server(port, "http0"),
                "http0": zc.http_server("hk0", limits=limits),
                # a request may wait less than the idle timeout (`ssekd check` says so)
                "hk0": {"type": "http-kafka", "kind": "proxy",
                        "options": {"max-wait": 1, "ack-timeout": 1},
                        "routes": [{"when": [{"method": "GET", "path": "/items"}], "exit": "cc",
                                    "with": fetch}]},
                **zc.kafka(bootstrap, cache={"bootstrap": [topic]}, cache_client="cc",
                           cache_server="cs", client="kc")}
    return zc.write(folder / f"unread-{port}.yaml",
                    zc.zilla("unread", bindings, telemetry=zc.stdout_telemetry()))


@pytest.fixture(scope="module")
def topic(kafka: Kafka) -> str:
    name = kafka.topic(1, compact=True, prefix="unread")
    for n in range(RECORDS):
        kafka.produce(name, b'{"n": %d, "pad": "%s"}' % (n, b"x" * (VALUE - 30)),
                      key=b"k%d" % n)
    kafka.flush()
    return name


@pytest.fixture()
def served(request: pytest.FixtureRequest, kafka_broker: Broker, topic: str,
           tmp_path: Path) -> Iterator[Served]:
    """A daemon of its own for each test: memory one test made the allocator keep would hide
    what the next one costs. Its http limits: the module's, or the test's (`indirect`)."""
    port = free_port()
    config = fetch_config(tmp_path, port, kafka_broker.bootstrap, topic,
                          getattr(request, "param", None))
    daemon = start_daemon(config, wait_ports=[port])
    try:
        # one answer taken whole: the topic is loaded, and its first answer's memory counted
        # before any test measures
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
        conn.request("GET", "/items")
        response = conn.getresponse()
        body = response.read()
        conn.close()
        assert response.status == 200 and len(body) > 800_000, (response.status, len(body))
        yield Served(daemon, port, len(body))
    finally:
        daemon.stop()
    assert not tracebacks(daemon)


class ShutWindow:
    """A cleartext HTTP/2 client whose streams' windows never open (INITIAL_WINDOW_SIZE 0): it
    reads what comes (headers, PING acknowledgements) and never sends a WINDOW_UPDATE."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.conn = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
        self.conn.local_settings = h2.settings.Settings(
            client=True, initial_values={h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 0})
        self.conn.initiate_connection()
        self.events: list[h2.events.Event] = []
        self.closed_at: float | None = None
        self.ids: list[int] = []
        self._send()

    def get(self, n: int) -> None:
        for _ in range(n):
            stream_id = self.conn.get_next_available_stream_id()
            self.conn.send_headers(stream_id, [(":method", "GET"), (":scheme", "http"),
                                               (":authority", "x"), (":path", "/items")],
                                   end_stream=True)
            self.ids.append(stream_id)
        self._send()

    def ping(self) -> None:
        self.conn.ping(b"12345678")
        self._send()

    def read(self, seconds: float) -> None:
        """Read what arrives for `seconds`, or until the daemon closes the connection."""
        deadline = time.monotonic() + seconds
        while self.closed_at is None and time.monotonic() < deadline:
            if not select.select([self.sock], [], [], 0.05)[0]:
                continue
            try:
                data = self.sock.recv(1 << 20)
            except OSError:
                data = b""
            if not data:
                self.closed_at = time.monotonic()
                return
            try:
                self.events += self.conn.receive_data(data)
            except h2.exceptions.ProtocolError:
                pass  # frames after the GOAWAY
            self._send()

    def statuses(self) -> list[str]:
        return [str(dict(e.headers)[":status"]) for e in self.events
                if isinstance(e, h2.events.ResponseReceived)]

    def goaway(self) -> bool:
        return any(isinstance(e, h2.events.ConnectionTerminated) for e in self.events)

    def close(self) -> None:
        self.sock.close()

    def _send(self) -> None:
        data = self.conn.data_to_send()
        if data and self.closed_at is None:
            try:
                self.sock.sendall(data)
            except OSError:
                self.closed_at = time.monotonic()


def test_h2_streams_whose_window_never_opens_cost_at_most_the_connection_bound(
        served: Served) -> None:
    """Two connections of a hundred fetches each, never a window: each holds the answers that
    fit in `h2-unsent-bytes`; the others are `503` with `Retry-After`."""
    clients: list[ShutWindow] = []
    with PeakRss(served.daemon.process.pid) as rss:
        for _ in range(2):
            client = ShutWindow(served.port)
            client.get(STREAMS)
            clients.append(client)
        for client in clients:
            end = time.monotonic() + 10
            while len(client.statuses()) < STREAMS and client.closed_at is None \
                    and time.monotonic() < end:
                client.read(0.1)
    for client in clients:
        client.close()
    fits = H2_UNSENT // served.answer
    print(f"two connections of {STREAMS} streams, a {served.answer:,} B answer each: RSS "
          f"+{rss.growth / 2**20:.1f} MiB (bound {2 * H2_UNSENT / 2**20:.0f} MiB + margin); "
          f"statuses {[sorted(set(c.statuses())) for c in clients]}")
    assert rss.growth <= 2 * H2_UNSENT + MARGIN
    for client in clients:
        statuses = client.statuses()
        assert len(statuses) == STREAMS, len(statuses)
        assert statuses.count("200") == fits and statuses.count("503") == STREAMS - fits


def test_h2_connection_that_only_pings_is_closed_at_the_idle_timeout(served: Served) -> None:
    """An answer waits behind a window that never opens; the client pings every half second
    (every frame used to keep a connection alive). It is closed `idle-timeout` after the
    answer was queued."""
    client = ShutWindow(served.port)
    began = time.monotonic()
    client.get(1)
    client.read(0.5)
    assert client.statuses() == ["200"]
    while client.closed_at is None and time.monotonic() - began < 4 * IDLE_TIMEOUT:
        client.ping()
        client.read(0.5)
    client.close()
    assert client.closed_at is not None, f"still open after {4 * IDLE_TIMEOUT:g} s of PINGs"
    took = client.closed_at - began
    print(f"closed {took:.1f} s after the answer, idle-timeout {IDLE_TIMEOUT:g} s")
    assert IDLE_TIMEOUT - 0.5 <= took <= IDLE_TIMEOUT + 1.5 and client.goaway()


def test_http11_clients_that_never_read_cost_at_most_the_process_bound(served: Served) -> None:
    """A hundred connections, each a GET and no read (a small receive buffer, so the kernel
    takes little of it): the answers that waited in full sockets stay within
    `process-unsent-bytes`; the others are `503`."""
    socks = []
    with PeakRss(served.daemon.process.pid) as rss:
        for _ in range(STREAMS):
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.connect(("127.0.0.1", served.port))
            sock.sendall(b"GET /items HTTP/1.1\r\nHost: x\r\n\r\n")
            socks.append(sock)
        wait_until(lambda: all(select.select([s], [], [], 0)[0] for s in socks), 10,
                   what="an answer on every connection")
    heads = [sock.recv(12) for sock in socks]
    for sock in socks:
        sock.close()
    refused = heads.count(b"HTTP/1.1 503")
    print(f"{STREAMS} HTTP/1.1 connections that do not read: RSS +{rss.growth / 2**20:.1f} MiB "
          f"(bound {PROCESS_UNSENT / 2**20:.0f} MiB + margin), {refused} answers 503")
    assert rss.growth <= PROCESS_UNSENT + MARGIN
    assert refused >= STREAMS // 2 and heads.count(b"HTTP/1.1 200") >= 1


@pytest.mark.parametrize("served", [{"idle-timeout": 30}], indirect=True)  # default bounds
def test_http11_one_connection_that_never_reads_holds_one_answer(served: Served) -> None:
    """One connection, two hundred GETs in one send, and no read for a while. Twisted answered
    them one after another all the same, each written whole into its buffer (+331 MiB; +236 MiB
    once the process's bound refused what passed its 128 MiB, Twisted joining its buffer into
    one copy). Now the next request waits until the socket has taken the answer before it:
    the connection holds one answer, and its client gets every answer once it reads."""
    n = 200
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", served.port))
    with PeakRss(served.daemon.process.pid) as rss:
        sock.sendall(b"GET /items HTTP/1.1\r\nHost: x\r\n\r\n" * n)
        time.sleep(3)  # what the daemon answers meanwhile (all of it, before)
    print(f"one HTTP/1.1 connection, {n} GETs in one send and no read: RSS "
          f"+{rss.growth / 2**20:.1f} MiB (one answer: {served.answer / 2**20:.1f} MiB)")
    assert rss.growth <= served.answer + MARGIN
    sock.settimeout(20)
    answers = sock.makefile("rb")
    for _ in range(n):
        status = answers.readline()
        assert status.startswith(b"HTTP/1.1 200 "), status
        length = 0
        while (line := answers.readline()) not in (b"\r\n", b""):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
        assert length == served.answer and len(answers.read(length)) == length
    answers.close()
    sock.close()
