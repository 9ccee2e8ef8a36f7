"""A small blocking HTTP/2 client on the `h2` package that holds many SSE streams on one connection.

Used by the tests (every stream must see every event, no connection-specific headers) and by
`bench/tls.py` (fan-out over HTTP/2). It speaks h2 over TLS (ALPN) or cleartext prior knowledge.
"""

from __future__ import annotations

import select
import socket
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

import h2.config
import h2.connection
import h2.events
import h2.settings

#: Big windows, so that flow control never throttles what the test measures.
WINDOW = 2**30 - 1


class ReceivedH2Events:
    """What an `h2` client received (`events`, in order), looked up by kind and stream: shared
    by the tests' raw clients, which differ in how they send, not in what they read back."""

    events: list[h2.events.Event]

    def of(self, kind: type[Any], stream_id: int | None = None) -> list[Any]:
        return [e for e in self.events if isinstance(e, kind)
                and (stream_id is None or getattr(e, "stream_id", None) == stream_id)]

    def status(self, stream_id: int) -> str | None:
        """The `:status` of the response on `stream_id`, once its headers arrived."""
        for event in self.of(h2.events.ResponseReceived, stream_id):
            return str(dict(event.headers)[":status"])
        return None


@dataclass
class Stream:
    """One SSE response: its headers, the events parsed so far, and how it ended."""

    headers: dict[str, str] = field(default_factory=dict)
    ids: list[str] = field(default_factory=list)
    data: list[str] = field(default_factory=list)
    comments: int = 0
    ended: bool = False
    reset: bool = False
    first_event_at: float | None = None
    last_event_at: float | None = None
    _buffer: bytes = b""

    def feed(self, chunk: bytes, now: float) -> None:
        blocks = (self._buffer + chunk).split(b"\n\n")
        self._buffer = blocks.pop()  # an incomplete event, or b""
        for block in blocks:
            lines = block.decode("utf-8", "replace").split("\n")
            if all(line.startswith(":") for line in lines):
                self.comments += 1
                continue
            event_id = next((line[3:] for line in lines if line.startswith("id:")), None)
            data = "\n".join(line[5:] for line in lines if line.startswith("data:"))
            if event_id is None and not data:
                continue  # e.g. a lone `retry:`
            self.ids.append(event_id or "")
            self.data.append(data)
            self.first_event_at = self.first_event_at or now
            self.last_event_at = now


class H2SseClient:
    """One HTTP/2 connection; `open(path)` starts a GET stream, `pump()` reads what arrived."""

    def __init__(self, port: int, *, ca: Path | None = None, server_name: str = "localhost",
                 host: str = "127.0.0.1", timeout: float = 10.0) -> None:
        raw = socket.create_connection((host, port), timeout=timeout)
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.scheme = "https" if ca else "http"
        self.authority = f"{server_name}:{port}"
        if ca is not None:
            context = ssl.create_default_context(cafile=str(ca))
            context.set_alpn_protocols(["h2"])
            self.sock: socket.socket = context.wrap_socket(raw, server_hostname=server_name)
            assert self.sock.selected_alpn_protocol() == "h2"  # type: ignore[attr-defined]
        else:
            self.sock = raw
        self.sock.setblocking(False)
        config = h2.config.H2Configuration(client_side=True, header_encoding="utf-8")
        self.conn = h2.connection.H2Connection(config=config)
        self.conn.initiate_connection()
        self.conn.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: WINDOW})
        self.conn.increment_flow_control_window(WINDOW - 65535)
        self.streams: dict[int, Stream] = {}
        self.terminated: h2.events.ConnectionTerminated | None = None
        self.max_concurrent = 100
        self._flush()

    def open(self, path: str, headers: dict[str, str] | None = None, *,
             flush: bool = True) -> int:
        """Start a GET stream; with `flush=False` its HEADERS wait for `flush()`."""
        stream_id = self.conn.get_next_available_stream_id()
        request = [(":method", "GET"), (":scheme", self.scheme),
                   (":authority", self.authority), (":path", path),
                   ("accept", "text/event-stream"), *(headers or {}).items()]
        self.conn.send_headers(stream_id, request, end_stream=True)
        self.streams[stream_id] = Stream()
        if flush:
            self._flush()
        return stream_id

    def flush(self) -> None:
        """Write what the connection has to send."""
        self._flush()

    def pump(self, timeout: float = 0.1) -> None:
        """Read and handle whatever arrives within `timeout` seconds (at least one select)."""
        deadline = time.monotonic() + timeout
        while True:
            wait = max(0.0, deadline - time.monotonic())
            pending = isinstance(self.sock, ssl.SSLSocket) and self.sock.pending()
            if pending or select.select([self.sock], [], [], wait)[0]:
                try:
                    data = self.sock.recv(1 << 20)
                except (ssl.SSLWantReadError, BlockingIOError):
                    data = None
                if data == b"":
                    raise ConnectionError("server closed the connection")
                if data:
                    self._handle(self.conn.receive_data(data))
                    self._flush()
            if time.monotonic() >= deadline:
                return

    def wait(self, done: Callable[[], bool], timeout: float = 10.0) -> bool:
        deadline = time.monotonic() + timeout
        while not done():
            if time.monotonic() > deadline:
                return False
            self.pump(0.05)
        return True

    def close(self) -> None:
        try:
            self.conn.close_connection()
            self._flush()
        except (OSError, h2.exceptions.ProtocolError):
            pass
        self.sock.close()

    def _handle(self, events: list[h2.events.Event]) -> None:
        now = time.monotonic()
        for event in events:
            if isinstance(event, h2.events.ResponseReceived):
                self.streams[event.stream_id].headers = {
                    str(k): str(v) for k, v in event.headers or []}
            elif isinstance(event, h2.events.DataReceived):
                self.streams[event.stream_id].feed(event.data or b"", now)
                if event.flow_controlled_length:
                    self.conn.acknowledge_received_data(event.flow_controlled_length,
                                                        event.stream_id)
            elif isinstance(event, h2.events.StreamEnded):
                self.streams[event.stream_id].ended = True
            elif isinstance(event, h2.events.StreamReset):
                self.streams[event.stream_id].reset = True
            elif isinstance(event, h2.events.RemoteSettingsChanged):
                setting = event.changed_settings.get(
                    h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS)
                if setting is not None:
                    self.max_concurrent = setting.new_value
            elif isinstance(event, h2.events.ConnectionTerminated):
                self.terminated = event

    def _flush(self) -> None:
        out = self.conn.data_to_send()
        while out:
            try:
                sent = self.sock.send(out)
            except (ssl.SSLWantWriteError, BlockingIOError):
                select.select([], [self.sock], [], 1.0)
                continue
            out = out[sent:]

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
