"""An HTTP/3 client that holds many SSE streams on one QUIC connection, and can move it.

Built on aioquic's sans-I/O objects (`QuicConnection` for QUIC, `H3Connection` for HTTP/3) with
its own UDP socket, read by one background thread: no event loop, no Twisted. Owning the socket
is the point: `migrate()` swaps it for a new one on another local port mid-stream, which is what
a phone moving from Wi-Fi to mobile data does to a connection, and what no ready-made client
lets a test do on demand. The tests (`tests/e2e/test_h3_*.py`) use it for migration and lossy
links; the benchmarks use it for load, so it keeps per-stream work small (`keep_events=False`
keeps counts and the last id only; `observe=False` skips the packet watch).

Usage::

    with H3SseClient(port, ca=pki.ca_pem) as client:          # handshake done on entry
        ids = client.open_many([f"/{topic}"] * 12)             # 12 GETs, one write
        client.wait(lambda: all(client.streams[i].status for i in ids))
        old, new = client.migrate()                            # new local port, same connection
        client.wait(lambda: all(len(client.streams[i].events) >= 50 for i in ids), 30)
        assert client.same_connection and client.stats.handshakes == 1

Threading: the I/O thread reads, feeds aioquic, handles timers and writes; every public method
takes the same lock, so a caller sees a consistent state. `wait(done)` calls `done()` under that
lock each time something arrives. `on_event(stream, event)` is called on the I/O thread, under
the lock: keep it short and do not call back into the client from it.

What QUIC does on its own: Retry (the client answers with the token), loss recovery and
retransmission, flow-control window updates as data is read, path validation (the client answers
the server's PATH_CHALLENGE on whichever socket it arrived). Streams beyond the server's
`initial_max_streams_bidi` (the quic binding's `limits.streams`) wait in aioquic until the
server raises the limit (`cancel()` one and the server hands its credit back): for more
long-lived streams than the server allows per connection, open more clients.
"""

from __future__ import annotations

import itertools
import os
import select
import socket
import ssl
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

from aioquic.h3.connection import ErrorCode as H3ErrorCode
from aioquic.h3.connection import H3Connection
from aioquic.h3.events import DataReceived, H3Event, HeadersReceived
from aioquic.quic import events as quic_events
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.connection import QuicConnection
from aioquic.quic.logger import QuicLogger, QuicLoggerTrace

from ssekd.dev.broker import free_port

Address = tuple[str, int]

#: Datagrams read from one socket before the connection handles them and answers: enough to
#: batch a burst, few enough that ACKs are not held back for long.
READ_BATCH = 64
#: Receive buffer asked of the kernel: a burst of a thousand streams' events must not overflow it
#: while the I/O thread is busy in aioquic (the kernel may cap it at net.core.rmem_max).
RECEIVE_BUFFER = 4 << 20


@dataclass(frozen=True, slots=True)
class SseEvent:
    """One dispatched SSE event: `id` is the last event id in force when it was dispatched (as
    `EventSource.lastEventId` would be), `event` its type, `at` when its last line arrived."""

    id: str
    event: str
    data: str
    at: float


class SseParser:
    """The event-stream format (HTML's "server-sent events" parsing rules), fed in chunks.

    Lines end in CR, LF or CRLF; a chunk ending in CR holds it back, since the next may start
    with its LF. Fields are split at the first colon and one leading space is dropped; `id` with
    a NUL is ignored; an event is dispatched on a blank line if it had a `data` field.
    """

    __slots__ = ("_pending", "_data", "_type", "_started", "last_event_id", "retry", "comments")

    def __init__(self) -> None:
        self._pending = b""
        self._data: list[str] = []
        self._type = ""
        self._started = False
        self.last_event_id = ""
        self.retry: int | None = None
        self.comments = 0

    def feed(self, chunk: bytes, now: float) -> list[SseEvent]:
        text = self._pending + chunk
        if not self._started and text:
            if len(text) < 3 and b"\xef\xbb\xbf".startswith(text):
                self._pending = text
                return []
            self._started = True
            text = text.removeprefix(b"\xef\xbb\xbf")
        hold = b""
        if text.endswith(b"\r"):
            text, hold = text[:-1], b"\r"
        if b"\r" in text:
            text = text.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        lines = text.split(b"\n")
        self._pending = lines.pop() + hold
        dispatched: list[SseEvent] = []
        for raw in lines:
            if not raw:
                if self._data:
                    dispatched.append(SseEvent(self.last_event_id, self._type or "message",
                                               "\n".join(self._data), now))
                self._data, self._type = [], ""
                continue
            line = raw.decode("utf-8", "replace")
            name, colon, value = line.partition(":")
            if not name and colon:
                self.comments += 1
                continue
            if value.startswith(" "):
                value = value[1:]
            if name == "data":
                self._data.append(value)
            elif name == "id":
                if "\0" not in value:
                    self.last_event_id = value
            elif name == "event":
                self._type = value
            elif name == "retry" and value.isascii() and value.isdigit():
                self.retry = int(value)
        return dispatched


@dataclass
class H3Stream:
    """One request stream: the response head, the events parsed so far and how it ended.

    `events` is kept only with `keep_events` (the default); `count` and `last_id` always are.
    `reset` is the error code of a RESET_STREAM from the server, `ended` a clean FIN.
    """

    stream_id: int
    path: str
    opened_at: float
    status: int | None = None
    headers: dict[str, str] = field(default_factory=dict)
    events: list[SseEvent] = field(default_factory=list)
    count: int = 0
    last_id: str = ""
    body_bytes: int = 0
    ended: bool = False
    reset: int | None = None
    headers_at: float | None = None
    first_event_at: float | None = None
    last_event_at: float | None = None
    parser: SseParser = field(default_factory=SseParser, repr=False)

    @property
    def ids(self) -> list[str]:
        return [e.id for e in self.events]

    @property
    def data(self) -> list[str]:
        return [e.data for e in self.events]

    @property
    def comments(self) -> int:
        return self.parser.comments

    @property
    def done(self) -> bool:
        return self.ended or self.reset is not None


@dataclass
class H3Stats:
    """What the client saw of its connection; the tests' evidence for "same connection".

    `handshakes` counts HandshakeCompleted events (one per connection: a second would be a new
    connection); `local_addresses` every local address the connection sent from, in order;
    `sent_from`/`received_on` datagrams per local address. With `observe` (the default):
    `retries` Retry packets acted on, `path_challenges` PATH_CHALLENGE frames received per
    local address (the server validating that path), `path_responses` those answered, and
    `peer_cids` every destination connection id used, in order (a migration with
    `change_connection_id` adds one).
    """

    datagrams_sent: int = 0
    datagrams_received: int = 0
    bytes_sent: int = 0
    bytes_received: int = 0
    send_dropped: int = 0  # the socket's buffer was full: QUIC recovers it as a loss
    send_errors: int = 0
    handshakes: int = 0
    migrations: int = 0
    local_addresses: list[Address] = field(default_factory=list)
    sent_from: Counter[Address] = field(default_factory=Counter)
    received_on: Counter[Address] = field(default_factory=Counter)
    retries: int = 0
    path_challenges: Counter[Address] = field(default_factory=Counter)
    path_responses: int = 0
    peer_cids: list[str] = field(default_factory=list)
    connection_ids_issued: int = 0  # NEW_CONNECTION_ID for the server to use, from aioquic
    pings_acked: int = 0


class _PacketWatch(QuicLoggerTrace):
    """A qlog trace that keeps nothing but what `H3Stats` reports.

    aioquic fills a received packet's frame list after it logs the packet, so the lists are held
    until `settle()` runs after `receive_datagram`, which knows the socket they came in on.
    """

    def __init__(self, stats: H3Stats) -> None:
        super().__init__(is_client=True, odcid=b"")
        self._stats = stats
        self._received: list[dict[str, Any]] = []

    def log_event(self, *, category: str, event: str, data: dict[str, Any]) -> None:
        if event == "packet_received":
            self._received.append(data)
        elif event == "packet_sent":
            cid = data["header"].get("dcid", "")
            if cid and (not self._stats.peer_cids or self._stats.peer_cids[-1] != cid):
                self._stats.peer_cids.append(cid)
            for frame in data.get("frames") or ():
                if frame.get("frame_type") == "path_response":
                    self._stats.path_responses += 1

    def settle(self, local: Address) -> None:
        for data in self._received:
            if data["header"].get("packet_type") == "retry":
                self._stats.retries += 1
            for frame in data.get("frames") or ():
                if frame.get("frame_type") == "path_challenge":
                    self._stats.path_challenges[local] += 1
        self._received.clear()


class _WatchLogger(QuicLogger):
    def __init__(self, watch: _PacketWatch) -> None:
        super().__init__()
        self._watch = watch

    def start_trace(self, is_client: bool, odcid: bytes) -> QuicLoggerTrace:
        return self._watch

    def end_trace(self, trace: QuicLoggerTrace) -> None:
        """The connection ended: the watch keeps what it saw (QuicLogger's own would raise, as
        the watch is not among its traces, and kill the I/O thread before `terminated` is set)."""


class H3SseClient:
    """One QUIC connection to `host:port` speaking HTTP/3, for SSE streams.

    `ca` is a PEM file that must verify the server's certificate for `server_name` (SNI);
    `verify=False` skips verification. `authority` defaults to `server_name:port`.
    `local_host` is where the client's UDP sockets bind (127.0.0.1: nothing listens publicly).
    `max_data`/`max_stream_data` are the receive windows the client offers (aioquic widens them
    again as data is read). `idle_timeout` is the client's QUIC idle timeout.
    """

    def __init__(self, port: int, *, host: str = "127.0.0.1", server_name: str = "localhost",
                 ca: Path | str | None = None, verify: bool = True, authority: str | None = None,
                 local_host: str = "127.0.0.1", alpn: Iterable[str] = ("h3",),
                 idle_timeout: float = 60.0, max_data: int = 16 << 20,
                 max_stream_data: int = 1 << 20, keep_events: bool = True, observe: bool = True,
                 on_event: Callable[[H3Stream, SseEvent], None] | None = None) -> None:
        self.server: Address = (host, port)
        self.server_name = server_name
        self.authority = authority or f"{server_name}:{port}"
        self.local_host = local_host
        self.keep_events = keep_events
        self.on_event = on_event
        self.stats = H3Stats()
        self.streams: dict[int, H3Stream] = {}
        self.terminated: quic_events.ConnectionTerminated | None = None
        self.alpn: str | None = None
        self.session_resumed = False

        configuration = QuicConfiguration(
            is_client=True, alpn_protocols=list(alpn), server_name=server_name,
            idle_timeout=idle_timeout, max_data=max_data, max_stream_data=max_stream_data)
        if not verify:
            configuration.verify_mode = ssl.CERT_NONE
        elif ca is not None:
            configuration.load_verify_locations(cafile=str(ca))
        self._watch: _PacketWatch | None = None
        if observe:
            self._watch = _PacketWatch(self.stats)
            configuration.quic_logger = _WatchLogger(self._watch)
        self._quic = QuicConnection(configuration=configuration)
        self._h3 = H3Connection(self._quic)

        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._sock = self._new_socket(0)
        self._old: list[socket.socket] = []  # earlier sockets still read (migrate(close_old=False))
        self._retiring: list[socket.socket] = []  # closed by the I/O thread, outside select()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._ping_ids = itertools.count(1)
        self._acked_pings: set[int] = set()

    # -- the connection ------------------------------------------------------------------------

    def connect(self, timeout: float = 10.0) -> Self:
        """Handshake (and Retry, if the server asks); raises if it does not complete with h3."""
        if self._thread is not None:
            return self
        with self._lock:
            self._quic.connect(self.server, now=time.monotonic())
            self._transmit()
        self._thread = threading.Thread(target=self._run, name="h3client-io", daemon=True)
        self._thread.start()
        if not self.wait(lambda: self.stats.handshakes > 0 or self.terminated is not None,
                         timeout):
            self.close()
            raise ConnectionError(f"no QUIC handshake with {self.server} in {timeout:g} s")
        if self.terminated is not None:
            reason = self.terminated
            self.close()
            raise ConnectionError(f"QUIC handshake failed: {reason}")
        return self

    @property
    def local_address(self) -> Address:
        """Where the connection sends from now."""
        return self.stats.local_addresses[-1]

    @property
    def same_connection(self) -> bool:
        """True while it is still the one connection the client made: one handshake, never
        terminated. (A reconnect would need a new client and a new handshake.)"""
        with self._lock:
            return self.stats.handshakes == 1 and self.terminated is None

    def migrate(self, *, change_connection_id: bool = True, close_old: bool = True,
                local_port: int = 0, ping: bool = True) -> tuple[Address, Address]:
        """Move the connection to a new UDP socket (a new local port), mid-stream.

        The QuicConnection stays: the server sees packets from a new address, validates it
        (PATH_CHALLENGE, answered from the new socket) and moves its side over. With
        `change_connection_id`, the client also switches to a fresh connection id the server
        issued (as RFC 9000 asks of a client that migrates, so the paths cannot be linked);
        `close_old` drops the old socket at once, as a phone losing Wi-Fi does, so whatever the
        server sends there meanwhile is lost and must be retransmitted; `ping` sends a PING
        from the new address right away rather than waiting for the next ACK.
        Returns (old local address, new local address).
        """
        new = self._new_socket(local_port)
        with self._lock:
            old_address = self.local_address
            old = self._sock
            self._sock = new
            (self._retiring if close_old else self._old).append(old)
            if change_connection_id:
                self._quic.change_connection_id()
            if ping:
                self._quic.send_ping(next(self._ping_ids))
            self.stats.migrations += 1
            self._transmit()
            new_address = self.local_address
        self._wake()
        return old_address, new_address

    def ping(self, timeout: float = 5.0) -> float:
        """Send a PING and wait for its ACK: the round-trip time in seconds (raises if none)."""
        started = time.monotonic()
        with self._lock:
            uid = next(self._ping_ids)
            self._quic.send_ping(uid)
            self._transmit()
        self._wake()
        if not self.wait(lambda: uid in self._acked_pings, timeout):
            raise TimeoutError(f"PING {uid} not acknowledged in {timeout:g} s")
        return time.monotonic() - started

    def close(self, timeout: float = 2.0) -> None:
        """CONNECTION_CLOSE (H3_NO_ERROR), then stop the I/O thread and close the sockets."""
        with self._lock:
            if self.terminated is None and not self._stopping:
                self._quic.close(error_code=H3ErrorCode.H3_NO_ERROR)
                self._transmit()
            self._stopping = True
        self._wake()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)
        for sock in [self._sock, *self._old, *self._retiring]:
            sock.close()
        self._old.clear()
        self._retiring.clear()
        for fd in (self._wake_r, self._wake_w):
            try:
                os.close(fd)
            except OSError:
                pass
        self._wake_r = self._wake_w = -1

    def __enter__(self) -> Self:
        return self.connect()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- streams -------------------------------------------------------------------------------

    def open(self, path: str, headers: Mapping[str, str] | None = None, *,
             accept: str | None = "text/event-stream", last_event_id: str | None = None,
             flush: bool = True) -> int:
        """Start a GET on a new request stream; returns its stream id (a key of `streams`).

        `headers` are sent as given (names lower-cased, as HTTP/3 requires); `flush=False`
        leaves the request for the next `flush()` or I/O, to put many in few datagrams.
        """
        request = [(b":method", b"GET"), (b":scheme", b"https"),
                   (b":authority", self.authority.encode()), (b":path", path.encode())]
        if accept is not None:
            request.append((b"accept", accept.encode()))
        if last_event_id is not None:
            request.append((b"last-event-id", last_event_id.encode()))
        request += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
        with self._lock:
            stream_id = self._quic.get_next_available_stream_id()
            self._h3.send_headers(stream_id, request, end_stream=True)
            self.streams[stream_id] = H3Stream(stream_id, path, time.monotonic())
            if flush:
                self._transmit()
        if flush:
            self._wake()
        return stream_id

    def open_many(self, paths: Iterable[str], headers: Mapping[str, str] | None = None,
                  **options: Any) -> list[int]:
        """`open` each path (the same one many times, for fan-out), all sent together."""
        with self._lock:
            ids = [self.open(path, headers, flush=False, **options) for path in paths]
            self._transmit()
        self._wake()
        return ids

    def cancel(self, stream_id: int) -> None:
        """Stop reading a stream (STOP_SENDING, H3_REQUEST_CANCELLED), as a closed EventSource
        does; the server is expected to reset its side."""
        with self._lock:
            self._quic.stop_stream(stream_id, H3ErrorCode.H3_REQUEST_CANCELLED)
            self._transmit()
        self._wake()

    def flush(self) -> None:
        """Send what is waiting (requests opened with `flush=False`)."""
        with self._lock:
            self._transmit()
        self._wake()

    def wait(self, done: Callable[[], bool], timeout: float = 10.0) -> bool:
        """Wait until `done()` (called under the client's lock) is true; False at the timeout."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not done():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(min(left, 0.2))
        return True

    def snapshot(self) -> dict[int, list[SseEvent]]:
        """A copy of every stream's events, taken under the lock."""
        with self._lock:
            return {sid: list(s.events) for sid, s in self.streams.items()}

    # -- I/O -----------------------------------------------------------------------------------

    def _new_socket(self, port: int) -> socket.socket:
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECEIVE_BUFFER)
            sock.bind((self.local_host, port))
        except OSError:
            sock.close()
            raise
        sock.setblocking(False)
        return sock

    def _wake(self) -> None:
        try:
            os.write(self._wake_w, b"x")
        except (BlockingIOError, OSError):
            pass  # already awake (pipe full) or closed

    def _run(self) -> None:
        """The I/O thread: wait for a datagram, a timer or a wake-up; handle; answer."""
        while True:
            with self._lock:
                if self._stopping:
                    return
                for sock in self._retiring:
                    sock.close()
                self._retiring.clear()
                sockets = [self._sock, *self._old]
                timer = self._quic.get_timer()
            timeout = 1.0 if timer is None else min(1.0, max(0.0, timer - time.monotonic()))
            try:
                readable = set(select.select([self._wake_r, *(s.fileno() for s in sockets)],
                                             [], [], timeout)[0])
            except (OSError, ValueError):
                continue  # a socket closed meanwhile (close()); the loop checks _stopping
            if self._wake_r in readable:
                try:
                    while os.read(self._wake_r, 4096):
                        pass
                except (BlockingIOError, OSError):
                    pass
            received: list[tuple[Address, bytes, Address]] = []
            for sock in sockets:
                try:
                    if sock.fileno() not in readable:
                        continue
                    local = sock.getsockname()
                    for _ in range(READ_BATCH):
                        data, addr = sock.recvfrom(65536)
                        received.append((local, data, addr))
                except (BlockingIOError, InterruptedError):
                    pass
                except OSError:
                    pass  # e.g. an ICMP error reported on the socket, or closed by close()
            with self._lock:
                if self._stopping:
                    return
                now = time.monotonic()
                for local, data, addr in received:
                    self.stats.datagrams_received += 1
                    self.stats.bytes_received += len(data)
                    self.stats.received_on[local] += 1
                    self._quic.receive_datagram(data, addr, now)
                    if self._watch is not None:
                        self._watch.settle(local)
                timer = self._quic.get_timer()
                if timer is not None and now >= timer:
                    self._quic.handle_timer(now)
                self._handle_events()
                self._transmit()
                self._changed.notify_all()

    def _transmit(self) -> None:
        """Send what the connection has to send, from the current socket (lock held)."""
        sock = self._sock
        local: Address = sock.getsockname()
        if not self.stats.local_addresses or self.stats.local_addresses[-1] != local:
            self.stats.local_addresses.append(local)
        for data, addr in self._quic.datagrams_to_send(now=time.monotonic()):
            try:
                sock.sendto(data, addr)
            except BlockingIOError:
                self.stats.send_dropped += 1
                continue
            except OSError:
                self.stats.send_errors += 1
                continue
            self.stats.datagrams_sent += 1
            self.stats.bytes_sent += len(data)
            self.stats.sent_from[local] += 1

    def _handle_events(self) -> None:
        now = time.monotonic()
        while (event := self._quic.next_event()) is not None:
            if isinstance(event, quic_events.HandshakeCompleted):
                self.stats.handshakes += 1
                self.alpn = event.alpn_protocol
                self.session_resumed = event.session_resumed
            elif isinstance(event, quic_events.ConnectionTerminated):
                self.terminated = event
            elif isinstance(event, quic_events.StreamReset):
                stream = self.streams.get(event.stream_id)
                if stream is not None:
                    stream.reset = event.error_code
            elif isinstance(event, quic_events.ConnectionIdIssued):
                self.stats.connection_ids_issued += 1
            elif isinstance(event, quic_events.PingAcknowledged):
                self.stats.pings_acked += 1
                self._acked_pings.add(event.uid)
            for h3_event in self._h3.handle_event(event):
                self._handle_h3(h3_event, now)

    def _handle_h3(self, event: H3Event, now: float) -> None:
        if isinstance(event, HeadersReceived):
            stream = self.streams.get(event.stream_id)
            if stream is None:
                return
            headers: dict[str, str] = {}
            for name, value in event.headers:
                key, text = name.decode(), value.decode("utf-8", "replace")
                headers[key] = f"{headers[key]}, {text}" if key in headers else text
            if stream.status is None:  # the response head (a later HEADERS is trailers)
                stream.status = int(headers.get(":status", "0"))
                stream.headers = headers
                stream.headers_at = now
            stream.ended = stream.ended or event.stream_ended
        elif isinstance(event, DataReceived):
            stream = self.streams.get(event.stream_id)
            if stream is None:
                return
            stream.body_bytes += len(event.data)
            for sse in stream.parser.feed(event.data, now):
                stream.count += 1
                stream.last_id = sse.id
                if self.keep_events:
                    stream.events.append(sse)
                if stream.first_event_at is None:
                    stream.first_event_at = now
                stream.last_event_at = now
                if self.on_event is not None:
                    self.on_event(stream, sse)
            stream.ended = stream.ended or event.stream_ended


def free_udp_port(host: str = "127.0.0.1") -> int:
    """A port free for both TCP and UDP now (the project's `free_port` checks TCP only; a QUIC
    listener needs the UDP one)."""
    for _ in range(50):
        port = free_port(host)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            return port
    raise OSError("no free UDP port found")
