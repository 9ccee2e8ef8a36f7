"""HTTP/2 toward the upstream (the http client's `h2`): one connection carries many requests,
on the `h2` package's state machine (Twisted has HTTP/2 for servers only).

Flow control is how a slow downstream holds the upstream back: a stream's received data is
acknowledged (a `WINDOW_UPDATE`) only once the relay has taken it, so a paused stream holds at
most its window (64 KiB, `INITIAL_WINDOW`) here, a connection at most 4 MiB
(`CONNECTION_WINDOW`), and the upstream waits for the rest. A request
body goes up as the upstream's windows allow.

A connection that the upstream closes, resets or sends `GOAWAY` on fails the streams it had
not answered (`ResponseSink.failed`); the pool (`H2Pool`) opens a new one for later requests.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IHandshakeListener
from twisted.internet.protocol import Factory, Protocol
from twisted.python.failure import Failure
from zope.interface import implementer

from ssekd.bindings.http.exchange import ResponseSink, UpstreamRequest

#: The receive window of each stream and of the connection: what one paused response may
#: leave waiting in the daemon.
INITIAL_WINDOW = 65_535
#: The receive window of the connection: what all its paused responses together may leave
#: waiting (the default `limits.h2-unsent-bytes` of the http server is of the same order).
CONNECTION_WINDOW = 4 * 1024 * 1024


class H2Call:
    """One stream of an `H2Upstream` (an `UpstreamCall`)."""

    def __init__(self, connection: H2Upstream, stream_id: int, sink: ResponseSink,
                 body: bytes) -> None:
        self.connection = connection
        self.stream_id = stream_id
        self.sink: ResponseSink | None = sink
        self.unsent = body
        self.paused = False
        #: Data received while paused, with its flow-controlled length (bounded by the window).
        self.held: deque[tuple[bytes, int]] = deque()
        self.ended = False

    def pause(self) -> None:
        self.paused = True

    def resume(self) -> None:
        self.paused = False
        while self.held and not self.paused and self.sink is not None:
            chunk, length = self.held.popleft()
            self._deliver(chunk, length)
        if not self.held and not self.paused and self.ended and self.sink is not None:
            sink, self.sink = self.sink, None
            sink.end()

    def cancel(self) -> None:
        self.sink = None
        self.connection.reset(self.stream_id)

    def received(self, chunk: bytes, length: int) -> None:
        if self.paused or self.held:
            self.held.append((chunk, length))
        else:
            self._deliver(chunk, length)

    def _deliver(self, chunk: bytes, length: int) -> None:
        if self.sink is not None and chunk:
            self.sink.data(chunk)
        self.connection.acknowledge(self.stream_id, length)

    def finished(self) -> None:
        self.ended = True
        if not self.held and not self.paused and self.sink is not None:
            sink, self.sink = self.sink, None
            sink.end()

    def fail(self, why: str) -> None:
        sink, self.sink = self.sink, None
        if sink is not None:
            sink.failed(why)


@implementer(IHandshakeListener)
class H2Upstream(Protocol):
    """One HTTP/2 connection to the upstream. Over TLS it is usable once the handshake
    negotiated `h2` (or, with `prior_knowledge`, at once); `ready` fires with True, or False
    when ALPN chose otherwise (the connection is then closed)."""

    def __init__(self, authority_scheme: bytes, prior_knowledge: bool,
                 on_lost: Callable[[H2Upstream], None],
                 on_released: Callable[[], None] = lambda: None) -> None:
        self.on_released = on_released
        self.scheme = authority_scheme
        self.prior_knowledge = prior_knowledge
        self.on_lost = on_lost
        config = h2.config.H2Configuration(client_side=True, header_encoding=None,
                                           validate_inbound_headers=False)
        self.conn = h2.connection.H2Connection(config=config)
        self.calls: dict[int, H2Call] = {}
        self.ready: Deferred[bool] = Deferred(lambda _: self.abort())
        self.usable = False
        self.closing = False
        self.transport: Any = None

    # -- connection life ---------------------------------------------------------------

    def connectionMade(self) -> None:
        if self.prior_knowledge:
            self._start()

    def handshakeCompleted(self) -> None:
        if self.prior_knowledge:
            return
        if getattr(self.transport, "negotiatedProtocol", None) == b"h2":
            self._start()
        else:
            self.closing = True
            self.transport.loseConnection()
            if not self.ready.called:
                self.ready.callback(False)

    def _widen(self) -> None:
        """The connection's window: room for every stream's (`CONNECTION_WINDOW`), so streams
        paused by slow clients do not hold back the others."""
        self.conn.increment_flow_control_window(CONNECTION_WINDOW - 65_535)

    def _settings(self) -> None:
        self.conn.local_settings.update({
            h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: INITIAL_WINDOW,
            h2.settings.SettingCodes.ENABLE_PUSH: 0,
        })

    def _start(self) -> None:
        self._settings()
        self.conn.initiate_connection()
        self._widen()
        self._flush()
        self.usable = True
        if not self.ready.called:
            self.ready.callback(True)

    def upgrade_settings(self) -> bytes:
        """The `HTTP2-Settings` of a request offering `Upgrade: h2c` (`upstream_h2c`); the
        connection's preface waits until `upgraded`."""
        self._settings()
        header = self.conn.initiate_upgrade_connection()
        assert header is not None  # a client's
        self._widen()
        return header

    def upgraded(self, transport: Any, sink: ResponseSink) -> H2Call:
        """The upstream answered `101`: this connection is HTTP/2 from now on, and the response
        to the request that offered the upgrade comes on stream 1."""
        self.transport = transport
        call = H2Call(self, 1, sink, b"")
        self.calls[1] = call
        self._flush()
        self.usable = True
        if not self.ready.called:
            self.ready.callback(True)
        return call

    def connectionLost(self, reason: Failure = Failure(ConnectionError())) -> None:
        self.usable = False
        self.closing = True
        calls, self.calls = self.calls, {}
        for call in calls.values():
            call.fail("reset")
        if not self.ready.called:
            self.ready.errback(reason)
        self.on_lost(self)

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abortConnection()

    # -- capacity ------------------------------------------------------------------------

    def has_room(self) -> bool:
        """Whether another request may start here now (the upstream's concurrent stream
        limit, and no `GOAWAY`)."""
        limit = self.conn.remote_settings.max_concurrent_streams
        return self.usable and not self.closing and len(self.calls) < limit

    # -- requests ------------------------------------------------------------------------

    def start(self, request: UpstreamRequest, sink: ResponseSink) -> H2Call:
        stream_id = self.conn.get_next_available_stream_id()
        headers = [(b":method", request.method), (b":scheme", self.scheme),
                   (b":authority", request.authority), (b":path", request.path),
                   *request.headers]
        if request.body or request.method in (b"POST", b"PUT", b"PATCH"):
            headers.append((b"content-length", str(len(request.body)).encode("ascii")))
        call = H2Call(self, stream_id, sink, request.body)
        self.calls[stream_id] = call
        self.conn.send_headers(stream_id, headers, end_stream=not request.body)
        self._send_body(call)
        self._flush()
        return call

    def _send_body(self, call: H2Call) -> None:
        while call.unsent:
            window = min(self.conn.local_flow_control_window(call.stream_id),
                         self.conn.max_outbound_frame_size)
            if window <= 0:
                return
            chunk, call.unsent = call.unsent[:window], call.unsent[window:]
            self.conn.send_data(call.stream_id, chunk, end_stream=not call.unsent)

    def acknowledge(self, stream_id: int, length: int) -> None:
        if length and self.transport is not None:
            try:
                self.conn.acknowledge_received_data(length, stream_id)
            except (h2.exceptions.StreamClosedError, h2.exceptions.ProtocolError):
                return  # the stream is gone: the connection window was settled by h2
            self._flush()

    def reset(self, stream_id: int) -> None:
        call = self.calls.pop(stream_id, None)
        if call is None:
            return
        try:
            self.conn.reset_stream(stream_id, h2.errors.ErrorCodes.CANCEL)
        except h2.exceptions.StreamClosedError:
            pass
        self._flush()
        self.on_released()

    # -- frames in -----------------------------------------------------------------------

    def dataReceived(self, data: bytes) -> None:
        try:
            events = self.conn.receive_data(data)
        except h2.exceptions.ProtocolError:
            self.closing = True
            self.abort()
            return
        for event in events:
            self._event(event)
        self._flush()

    def _event(self, event: Any) -> None:
        if isinstance(event, h2.events.ResponseReceived):
            call = self.calls.get(event.stream_id)
            if call is not None and call.sink is not None:
                status, headers = _split(event.headers)
                if 100 <= status < 200:
                    return  # an interim answer: the final one follows
                call.sink.head(status, headers)
        elif isinstance(event, h2.events.DataReceived):
            call = self.calls.get(event.stream_id)
            if call is None:
                self.acknowledge(event.stream_id, event.flow_controlled_length)
            else:
                call.received(event.data, event.flow_controlled_length)
        elif isinstance(event, h2.events.StreamEnded):
            call = self.calls.pop(event.stream_id, None)
            if call is not None:
                call.finished()
                self.on_released()
        elif isinstance(event, h2.events.StreamReset):
            call = self.calls.pop(event.stream_id, None)
            if call is not None:
                call.fail("reset")
                self.on_released()
        elif isinstance(event, h2.events.WindowUpdated):
            for call in list(self.calls.values()):
                if call.unsent:
                    self._send_body(call)
        elif isinstance(event, h2.events.ConnectionTerminated):
            self.closing = True
            last = event.last_stream_id if event.last_stream_id is not None else 0
            for stream_id in [s for s in self.calls if s > last]:
                self.calls.pop(stream_id).fail("reset")
            if not self.calls:
                self.transport.loseConnection()

    def _flush(self) -> None:
        data = self.conn.data_to_send()
        if data and self.transport is not None:
            self.transport.write(data)


def _split(headers: list[tuple[bytes, bytes]]) -> tuple[int, list[tuple[bytes, bytes]]]:
    status = 502
    rest = []
    for name, value in headers:
        if name == b":status":
            status = int(value)
        elif not name.startswith(b":"):
            rest.append((name, value))
    return status, rest


class H2Pool:
    """The HTTP/2 connections to one upstream: requests share the first with room; another
    opens only when the upstream's stream limit is reached, up to `max_connections`; beyond
    that, requests wait for a stream to end."""

    def __init__(self, connect: Callable[[Factory[Any]], Deferred[Any]], scheme: bytes,
                 prior_knowledge: bool, max_connections: int = 4) -> None:
        self._connect = connect
        self.scheme = scheme
        self.prior_knowledge = prior_knowledge
        self.max_connections = max_connections
        self.connections: list[H2Upstream] = []
        self._opening: Deferred[H2Upstream | None] | None = None
        self._waiting: deque[Deferred[H2Upstream | None]] = deque()

    def acquire(self) -> Deferred[H2Upstream | None]:
        """A connection with room; None when ALPN did not choose h2 (the caller then goes
        over HTTP/1.1)."""
        for connection in self.connections:
            if connection.has_room():
                d: Deferred[H2Upstream | None] = Deferred()
                d.callback(connection)
                return d
        waiter: Deferred[H2Upstream | None] = Deferred(self._give_up)
        self._waiting.append(waiter)
        if self._opening is None and len(self.connections) < self.max_connections:
            self._open()
        return waiter

    def _give_up(self, waiter: Deferred[H2Upstream | None]) -> None:
        """A request no longer waits (its client left): the connection being opened for it
        alone is given up too."""
        if waiter in self._waiting:
            self._waiting.remove(waiter)
        if not self._waiting and self._opening is not None:
            opening, self._opening = self._opening, None
            opening.cancel()

    def _open(self) -> None:
        upstream = H2Upstream(self.scheme, self.prior_knowledge, self._lost, self.released)
        factory: Factory[Any] = Factory.forProtocol(lambda: upstream)
        factory.noisy = False
        opening: Deferred[H2Upstream | None] = self._connect(factory).addCallback(
            lambda _: upstream.ready).addCallback(lambda ok: upstream if ok else None)
        self._opening = opening

        def opened(result: H2Upstream | None) -> None:
            if self._opening is opening:
                self._opening = None
            if result is not None:
                self.connections.append(result)
            self._serve(result)

        def failed(reason: Failure) -> None:
            if self._opening is opening:
                self._opening = None
            waiting, self._waiting = self._waiting, deque()
            for waiter in waiting:
                waiter.errback(reason)

        opening.addCallbacks(opened, failed)

    def _serve(self, result: H2Upstream | None) -> None:
        while self._waiting:
            if result is not None and not result.has_room():
                if len(self.connections) < self.max_connections:
                    self._open()
                return  # the rest wait for a stream to end (`released`)
            self._waiting.popleft().callback(result)

    def released(self) -> None:
        """A stream ended: a waiting request may take its place."""
        for connection in self.connections:
            if connection.has_room():
                self._serve(connection)
                return

    def _lost(self, upstream: H2Upstream) -> None:
        if upstream in self.connections:
            self.connections.remove(upstream)
        if self._waiting and self._opening is None:
            self._open()

    def close(self) -> None:
        for connection in list(self.connections):
            connection.abort()
        if self._opening is not None:
            self._opening.cancel()

