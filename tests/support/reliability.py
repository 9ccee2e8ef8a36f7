"""The reliability tests' daemon config and a raw HTTP/2 client: a real daemon on a free loopback
port (HTTP/1.1 and cleartext HTTP/2 on the same port), serving static files under `/www/` and SSE
from the test session's broker everywhere else, and an `h2` client for frames no polite client
sends."""

from __future__ import annotations

import select
import socket
import time
from collections.abc import Callable
from pathlib import Path

import h2.config
import h2.connection
import h2.events

from tests.support import zilla_config as zc
from tests.support.daemon import Daemon
from tests.support.h2client import ReceivedH2Events

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def daemon_config(folder: Path, port: int, bootstrap: str, limits: str = "{}") -> Path:
    """tcp -> http (`limits` as a YAML flow mapping) -> files under /www/, SSE elsewhere."""
    www = folder / "www"
    www.mkdir(exist_ok=True)
    (www / "hello.txt").write_text("hello\n")
    path = folder / f"reliability-{port}.yaml"
    config = zc.sse_stack(port, bootstrap, name="reliability", www="www/",
                          http=zc.http_server(limits=zc.flow(limits)),
                          telemetry=zc.stdout_telemetry("out"),
                          names={"tcp": "tcp_in", "http": "http_in"})
    return zc.write(path, config)


def tracebacks(daemon: Daemon) -> list[str]:
    """Lines of the daemon's output that tell of an exception nobody handled."""
    return [line for line in daemon.output().splitlines()
            if "Traceback" in line or "Unhandled Error" in line]


class RawH2(ReceivedH2Events):
    """A blocking cleartext HTTP/2 client on the `h2` state machine that sends what it is told,
    including what a well-behaved client never would, and records every event it receives."""

    def __init__(self, port: int, *, timeout: float = 10.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.authority = f"127.0.0.1:{port}"
        self.conn = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
        self.conn.initiate_connection()
        self.events: list[h2.events.Event] = []
        self.closed = False
        self.flush()

    def request(self, method: str, path: str, *, end_stream: bool = True,
                headers: list[tuple[str, str]] | None = None) -> int:
        stream_id: int = self.conn.get_next_available_stream_id()
        self.conn.send_headers(stream_id, [(":method", method), (":scheme", "http"),
                                           (":authority", self.authority), (":path", path),
                                           *(headers or [])], end_stream=end_stream)
        return stream_id

    def flush(self) -> None:
        data = self.conn.data_to_send()
        if data:
            self.sock.sendall(data)

    def pump(self, timeout: float = 0.05) -> None:
        """Read and handle what arrives within `timeout` seconds."""
        if self.closed or not select.select([self.sock], [], [], timeout)[0]:
            return
        try:
            data = self.sock.recv(1 << 20)
        except ConnectionResetError:
            data = b""
        if not data:
            self.closed = True
            return
        for event in self.conn.receive_data(data):
            self.events.append(event)
            if isinstance(event, h2.events.DataReceived) and event.flow_controlled_length:
                self.conn.acknowledge_received_data(event.flow_controlled_length,
                                                    event.stream_id)
        try:
            self.flush()
        except OSError:
            self.closed = True

    def wait(self, done: Callable[[], bool], timeout: float = 10.0) -> bool:
        deadline = time.monotonic() + timeout
        while not done():
            if time.monotonic() > deadline or self.closed:
                return done()
            self.pump()
        return True

    def close(self) -> None:
        self.sock.close()
