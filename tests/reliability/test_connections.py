"""Connection limits on the tcp server, and file descriptors running out, with the real daemon
on loopback and real sockets.

A connection over a limit is closed at once, before any byte of it is read: at the TCP layer the
daemon cannot know yet whether it carries an SSE request, and a browser's EventSource retries a
connection that closes, while a `503` would make it give up for good (docs/protocol.md). By default the
total limit stays below the process's file descriptor limit, so the daemon refuses connections
itself, with room left for Kafka sockets and files, instead of meeting EMFILE."""

from __future__ import annotations

import resource
import socket
import threading
import time
from pathlib import Path

import psutil
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from twisted.internet.address import IPv4Address
from twisted.internet.error import ConnectionDone
from twisted.internet.protocol import Protocol
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure

from ssekd.bindings.connection_limits import (
    ConnectionLimits,
    CountedConnection,
    OpenConnections,
    fd_budget,
)
from ssekd.bindings.tcp import TcpServer
from ssekd.dev.broker import Broker, free_port
from ssekd.spi.connection import ConnectionInfo
from ssekd.telemetry.events import EventLog
from tests.support import zilla_config as zc
from tests.support.daemon import Daemon, start_daemon


def daemon_config(port: int, bootstrap: str, limits: str = "") -> zc.Node:
    """Files under /www/, streams at /events/{topic}; `limits` adds to the tcp server's options
    (`, limits: {connections: 1}`)."""
    return zc.sse_stack(port, bootstrap, name="rel", www="www",
                        routes=[zc.sse_route("/events/{topic}")],
                        tcp_options=zc.flow("{" + limits.lstrip(", ") + "}") if limits else None,
                        names={"tcp": "tcp0", "http": "http0", "sse": "sse0"})

INDEX = b"<!doctype html><title>ok</title>\n"


#: The limits and the file descriptor budget are counted per process (docs/operations.md,
#: Workers): with workers each has its own, and the kernel chooses which worker a connection
#: reaches, so these tests run one process.
ONE_PROCESS = ["--workers", "1"]


def start(tmp: Path, bootstrap: str, limits: str = "", nofile: int | None = None) -> Daemon:
    """`twistd -n ssekd` on a config of its own; with `nofile`, under `ulimit -n nofile`. Waits
    for the start event rather than probing the port: a probe would be a connection of its own,
    counted until the daemon notices it closed."""
    port = free_port()
    (tmp / "www").mkdir(exist_ok=True)
    (tmp / "www" / "index.html").write_bytes(INDEX)
    config = tmp / "zilla.yaml"
    zc.write(config, daemon_config(port, bootstrap, limits))
    daemon = start_daemon(config, nofile=nofile, wait_output="ENGINE_STARTED",
                          extra_args=ONE_PROCESS)
    daemon.ports.append(port)
    return daemon


def connect(port: int, source: str = "127.0.0.1") -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=5, source_address=(source, 0))
    return s


def get(s: socket.socket, path: str = "/www/index.html") -> int | None:
    """One keep-alive GET on `s`; the status, or None when the daemon closed the connection
    without a byte."""
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
    data = b""
    while b"\r\n\r\n" not in data:
        try:
            chunk = s.recv(65536)
        except ConnectionResetError:
            chunk = b""
        if not chunk:
            assert data == b"", data
            return None
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                   if line.lower().startswith(b"content-length:")), 0)
    while len(body) < length:
        body += s.recv(65536)
    return int(head.split()[1])


def closed_at_once(s: socket.socket, within: float = 2.0) -> bool:
    """True when the daemon closes `s` without sending a byte (nothing was sent to it)."""
    s.settimeout(within)
    try:
        return s.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


class Stream:
    """A text/event-stream reader on a raw socket: enough to see `data:` lines arrive."""

    def __init__(self, port: int, path: str) -> None:
        self.sock = connect(port)
        self.sock.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                          f"Accept: text/event-stream\r\n\r\n".encode())
        self.buffer = b""

    def data(self, n: int, timeout: float = 10.0) -> list[str]:
        deadline = time.monotonic() + timeout
        while self.buffer.count(b"\ndata:") < n:
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            chunk = self.sock.recv(65536)
            assert chunk and time.monotonic() < deadline, self.buffer
            self.buffer += chunk
        return [line[5:].decode() for line in self.buffer.split(b"\n")
                if line.startswith(b"data:")]


def topic_with_producer(bootstrap: str) -> tuple[str, Producer]:
    name = f"rel-{time.monotonic_ns()}"
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept until the topic exists
    for f in admin.create_topics([NewTopic(name, 1, 1)]).values():
        f.result(10)
    return name, Producer({"bootstrap.servers": bootstrap, "linger.ms": 1})


# -- configured limits -------------------------------------------------------------------------

@pytest.mark.broker
@pytest.mark.daemon
def test_connections_over_the_limits_are_closed_at_once(kafka_broker: Broker, tmp_path: Path,
                                                        daemons: list[Daemon]) -> None:
    d = start(tmp_path, kafka_broker.bootstrap,
              limits=", limits: {connections: 6, connections-per-ip: 4}")
    daemons.append(d)
    held = [connect(d.ports[0]) for _ in range(4)]
    assert [get(s) for s in held] == [200] * 4
    assert closed_at_once(connect(d.ports[0])), "a fifth connection from 127.0.0.1"
    # another address still has room, until the total is reached
    other = [connect(d.ports[0], "127.0.0.2") for _ in range(2)]
    assert [get(s) for s in other] == [200] * 2
    assert closed_at_once(connect(d.ports[0], "127.0.0.3")), "a seventh connection in all"
    # a closed connection gives its place back
    held.pop().close()
    deadline = time.monotonic() + 5
    while (status := get(fresh := connect(d.ports[0]))) is None:
        fresh.close()
        assert time.monotonic() < deadline, "the closed connection's place never came back"
    assert status == 200
    d.wait_output("BINDING_TCP_CONNECTION_REFUSED 127.0.0.1: connections-per-ip limit 4 reached")
    d.wait_output("BINDING_TCP_CONNECTION_REFUSED 127.0.0.3: connections limit 6 reached")
    for s in held + other + [fresh]:
        s.close()


@pytest.mark.broker
@pytest.mark.daemon
def test_a_flood_of_refusals_prints_bounded_lines_that_add_up_after_sigterm(
        kafka_broker: Broker, tmp_path: Path, daemons: list[Daemon]) -> None:
    """Every refused connection is accounted for, printed or in a summary line, and the
    summaries still pending when SIGTERM arrives are written before the daemon exits."""
    d = start(tmp_path, kafka_broker.bootstrap, limits=", limits: {connections: 1}")
    daemons.append(d)
    held = connect(d.ports[0])
    assert get(held) == 200
    knocks = 300
    for _ in range(knocks):
        s = connect(d.ports[0])
        assert closed_at_once(s)
        s.close()
    assert d.stop() == 0
    lines = d.output().splitlines()
    printed = sum("BINDING_TCP_CONNECTION_REFUSED" in line for line in lines)
    suppressed = [int(line.split("EVENTS_SUPPRESSED ")[1].split()[0]) for line in lines
                  if "EVENTS_SUPPRESSED" in line and "BINDING_TCP_CONNECTION_REFUSED" in line]
    assert suppressed, "300 refusals in a few seconds are more than 100 lines a second"
    assert printed - len(suppressed) + sum(suppressed) == knocks
    assert any(line.endswith("ENGINE_STOPPED -") for line in lines)
    held.close()


# -- file descriptors running out --------------------------------------------------------------

NOFILE = 256


@pytest.mark.broker
@pytest.mark.daemon
def test_running_out_of_file_descriptors(kafka_broker: Broker, tmp_path: Path,
                                         daemons: list[Daemon]) -> None:
    """Under `ulimit -n 256` with default limits: clients keep connecting until the daemon
    refuses; it refuses cleanly (no busy loop), open streams keep flowing, a connection it holds
    can still open files, and accepting resumes when connections close."""
    topic, producer = topic_with_producer(kafka_broker.bootstrap)
    d = start(tmp_path, kafka_broker.bootstrap, nofile=NOFILE)
    daemons.append(d)
    stream = Stream(d.ports[0], f"/events/{topic}")
    producer.produce(topic, b"before")
    producer.flush(10)
    assert stream.data(1) == ["before"]
    files = connect(d.ports[0])
    assert get(files) == 200

    held: list[socket.socket] = []
    for _ in range(NOFILE + 50):
        s = connect(d.ports[0])
        if get(s) is None:
            s.close()
            break
        held.append(s)
    else:
        pytest.fail(f"the daemon never refused a connection under ulimit -n {NOFILE}")
    assert 0 < len(held) < NOFILE

    # clients keep knocking: each is closed at once, and the daemon does not spin
    daemon = psutil.Process(d.process.pid)
    stop = threading.Event()
    refused = [0]

    def knock() -> None:
        while not stop.is_set():
            s = connect(d.ports[0])
            refused[0] += closed_at_once(s)
            s.close()
            time.sleep(0.01)

    before = sum(daemon.cpu_times()[:2])
    knocker = threading.Thread(target=knock, daemon=True)
    knocker.start()
    started = time.monotonic()
    time.sleep(2.0)  # a measuring window, not a wait for a condition
    stop.set()
    knocker.join(5)
    used = sum(daemon.cpu_times()[:2]) - before
    elapsed = time.monotonic() - started
    assert refused[0] >= 20
    assert used < 0.5 * elapsed, f"daemon used {used:.2f} s of CPU in {elapsed:.2f} s"

    # what is already open goes on: the stream gets new events, the held connection a file
    producer.produce(topic, b"during")
    producer.flush(10)
    assert stream.data(2) == ["before", "during"]
    assert get(files) == 200, "no file descriptor left to open a file with"

    for s in held:
        s.close()
    deadline = time.monotonic() + 5
    while (status := get(fresh := connect(d.ports[0]))) is None:
        fresh.close()
        assert time.monotonic() < deadline, "accepting never resumed"
    assert status == 200
    d.wait_output("BINDING_TCP_CONNECTION_REFUSED 127.0.0.1: connections limit")
    assert "EMFILE" not in d.output()
    fresh.close()
    files.close()
    stream.sock.close()


# -- the count itself ----------------------------------------------------------------------------

class _Recorder(Protocol):
    def __init__(self) -> None:
        self.lost: list[Failure] = []

    def connectionLost(self, reason: Failure = Failure(ConnectionDone())) -> None:
        self.lost.append(reason)


class _Exit:
    """A stream binding that records what it was handed."""

    versions = None

    def __init__(self, refuse: bool = False) -> None:
        self.refuse = refuse
        self.built: list[_Recorder] = []

    def build_protocol(self, conn: ConnectionInfo) -> Protocol | None:
        if self.refuse:
            return None
        p = _Recorder()
        self.built.append(p)
        return p


def _accept(server: TcpServer, host: str) -> CountedConnection | None:
    p = server.build_protocol(7114, IPv4Address("TCP", host, 40000))
    if p is not None:
        p.makeConnection(StringTransport())
    assert p is None or isinstance(p, CountedConnection)
    return p


def test_the_count_outlives_a_rebuilt_binding_and_each_close_gives_one_place_back() -> None:
    table = OpenConnections(budget=3)
    events = EventLog("t")
    exit_ = _Exit()

    def server() -> TcpServer:
        return TcpServer("tcp0", "127.0.0.1", [7114], [], exit_, ConnectionLimits(10, per_ip=2),
                         events, table)

    first, second = _accept(server(), "10.0.0.1"), _accept(server(), "10.0.0.1")
    assert first is not None and second is not None
    assert first.transport is exit_.built[0].transport, "the exit's protocol has the real transport"
    rebuilt = server()  # a reload that rebuilds the binding keeps counting its open connections
    assert _accept(rebuilt, "10.0.0.1") is None
    assert events.recent[-1].endswith(
        "BINDING_TCP_CONNECTION_REFUSED 10.0.0.1: connections-per-ip limit 2 reached")
    assert _accept(rebuilt, "10.0.0.2") is not None
    assert _accept(rebuilt, "10.0.0.3") is None, "the process budget holds across bindings"
    assert "file descriptor budget of 3 connections reached" in events.recent[-1]

    first.connectionLost(Failure(ConnectionDone()))
    first.connectionLost(Failure(ConnectionDone()))  # said twice, given back once
    assert (table.total, table.count("tcp0"), table.count("tcp0", "10.0.0.1")) == (2, 2, 1)
    assert len(exit_.built[0].lost) == 2, "the exit's protocol hears of the close"
    assert _accept(rebuilt, "10.0.0.1") is not None


def test_a_connection_the_exit_refuses_is_not_counted() -> None:
    table = OpenConnections(budget=10)
    server = TcpServer("tcp0", "127.0.0.1", [7114], [], _Exit(refuse=True),
                       ConnectionLimits(10), EventLog("t"), table)
    assert _accept(server, "10.0.0.1") is None
    assert table.total == 0 and table.count("tcp0", "10.0.0.1") == 0


def test_the_default_total_stays_below_the_file_descriptor_limit(
        monkeypatch: pytest.MonkeyPatch) -> None:
    for soft, budget in [(256, 128), (1024, 896), (65536, 58983)]:
        monkeypatch.setattr(resource, "getrlimit", lambda _, s=soft: (s, s))
        assert fd_budget() == budget
