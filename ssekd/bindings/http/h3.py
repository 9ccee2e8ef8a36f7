"""HTTP/3: requests that arrive as streams of a QUIC connection a quic server accepted.

Everything above the http binding sees a request as it sees one from HTTP/1.1 or HTTP/2: a
Twisted `Request` of our `HttpSite`, routed, guarded and answered by the same code. What this
module adds is the channel under each request (`H3Stream`, the part of an HTTP/2 `H2Stream`
that a request uses: headers, body writes, the end, a reset, producers) and the session of one
connection (`H3Session`), which turns aioquic's HTTP/3 events into requests and holds the
connection to the http binding's `limits` as HTTP/2 is held to them:

* at most as many requests at once as the quic binding's `limits.streams`: QUIC's own stream
  credit (MAX_STREAMS), which a client cannot pass without breaking the protocol;
* a request head of more than `header-count` headers is `431`, of more than `header-bytes`
  bytes `431` too; a body past `body-bytes` is `413`; a route that takes no body answers at
  once without reading one (the rest of it is refused with STOP_SENDING); a malformed request
  (RFC 9114 §4.1.2: a bad content-length, a header name in capitals) is `400`, an error of its
  stream alone (`_Http3`);
* response bytes the client has not acknowledged: past `h3-unsent-bytes` on the connection
  every producer of it (SSE streams, files) is paused until half have gone; a response written
  whole that would pass that bound, or the process's `process-unsent-bytes`, becomes a `503`
  with `Retry-After` (`ssekd.bindings.http.unsent` says why a status rather than a reset);
* draining (SIGTERM with `engine.drain`): GOAWAY, so the client opens new requests elsewhere
  while the ones it has go on until the daemon stops.

QUIC itself (flow control, loss recovery, migration, address validation, idle timeouts) is
the quic binding's, which owns the socket and hands each connection's events here.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from aioquic.buffer import encode_uint_var
from aioquic.h3.connection import (
    ErrorCode,
    FrameType,
    H3Connection,
    HeadersState,
    MessageError,
    encode_frame,
)
from aioquic.h3.events import DataReceived, H3Event, HeadersReceived
from aioquic.h3.exceptions import H3Error
from aioquic.quic.events import StopSendingReceived, StreamReset
from twisted.internet.address import IPv4Address, IPv6Address
from twisted.internet.error import ConnectionLost
from twisted.python.failure import Failure
from twisted.web.server import Site

from ssekd.bindings.http.channel import Limits
from ssekd.bindings.http.unsent import (
    PROCESS,
    SMALL,
    UnsentBytes,
    announced_length,
    refusal_headers,
    replaced_by_refusal,
)
from ssekd.spi.connection import ConnectionInfo, QuicTransport

#: Response headers HTTP/3 forbids (RFC 9114 §4.2): connection-specific ones.
_HOP_BY_HOP = frozenset({b"connection", b"keep-alive", b"proxy-connection",
                         b"transfer-encoding", b"upgrade"})
#: The version a request over HTTP/3 carries (`Request.clientproto`): not `HTTP/1.1`, so Twisted
#: never frames a body in chunks, which HTTP/3 does not have.
VERSION = b"HTTP/3"


class H3Stream:
    """The channel under one HTTP/3 request (module docstring), as `H2Stream` is for HTTP/2."""

    #: A request has no transport of its own: `stream_writer.reset` then calls
    #: `abortConnection`, which resets this stream only.
    transport = None

    def __init__(self, session: H3Session, stream_id: int) -> None:
        self.session = session
        self.stream_id = stream_id
        self.site = session.site
        self.factory = session.site
        self.producer: Any = None
        self.streaming = True
        self.paused = False
        #: The response went out as a `503` instead (module docstring): writes are dropped.
        self.refused = False
        #: Bytes of an announced length `writeHeaders` let through: no bound cuts them
        #: (`room_for` would count the response's own headers, queued just before).
        self.admitted = 0
        self.ended = False
        #: Body bytes may still come, and are read (a route that takes a body).
        self.body_left: int | None = None
        #: Handed on before its body: what else comes for it is dropped.
        self.unread = False
        self.received = False
        self.request: Any = session.site.requestFactory(self, queued=False)

    # -- what the request calls ------------------------------------------------------------

    def getPeer(self) -> Any:  # noqa: N802 - Twisted's names from here on
        return self.session.conn.peer

    def getHost(self) -> Any:  # noqa: N802
        return self.session.conn.local

    def isSecure(self) -> bool:  # noqa: N802
        return True

    def writeHeaders(self, version: bytes, code: bytes, reason: bytes,  # noqa: N802
                     headers: Any) -> None:
        pairs = [(k.lower(), v) for k, values in headers.getAllRawHeaders() for v in values
                 if k.lower() not in _HOP_BY_HOP]
        if self.producer is None and self.request.method != b"HEAD":
            size = announced_length(pairs)
            if size and not self.session.room_for(size):
                self.refused = True
                code, pairs = b"503", refusal_headers(pairs)
                replaced_by_refusal(self.request)
            else:
                self.admitted = size
        self.session.send_headers(self.stream_id, [(b":status", code[:3]), *pairs])

    def write(self, data: bytes) -> None:
        if self.refused or self.ended or not data:
            return
        session = self.session
        if self.producer is None:
            if len(data) <= self.admitted:
                self.admitted -= len(data)
            elif not session.room_for(len(data)):
                # a response written whole, of no announced length, past a bound: cut it.
                # Its writer is mid-write and finishes it as usual, so the request is not
                # told its connection was lost (`finish` would raise): the rest is dropped.
                self.ended = True
                session.reset_stream(self, ErrorCode.H3_REQUEST_CANCELLED)
                return
        session.send_data(self.stream_id, data, whole=self.producer is None)

    def writeSequence(self, data: Iterable[bytes]) -> None:  # noqa: N802
        for chunk in data:
            self.write(chunk)

    def requestDone(self, request: Any) -> None:  # noqa: N802
        self.loseConnection()

    def loseConnection(self) -> None:  # noqa: N802
        """The response is complete: end the stream (after what is queued)."""
        if self.ended:
            return
        self.ended = True
        self.session.end_stream(self)

    def abortConnection(self) -> None:  # noqa: N802
        """Cut the response short: reset this stream only (what `stream_writer.reset` asks)."""
        if self.ended:
            return
        self.ended = True
        self.session.reset_stream(self, ErrorCode.H3_REQUEST_CANCELLED)
        self.request.connectionLost(Failure(ConnectionLost("stream reset by the server")))

    def registerProducer(self, producer: Any, streaming: bool) -> None:  # noqa: N802
        if self.producer is not None:
            raise ValueError(f"registering producer {producer} before previous one "
                             f"({self.producer}) was unregistered")
        self.producer = producer
        self.streaming = bool(streaming)
        self.paused = False
        if streaming:
            if self.session.over_bound():
                self.pause()
        else:
            self.session.pull(self)

    def unregisterProducer(self) -> None:  # noqa: N802
        self.producer = None
        self.paused = False

    def _respondToBadRequestAndDisconnect(self) -> None:  # noqa: N802 - Twisted's name
        """What Twisted calls for a request it cannot make sense of (a bad Content-Length)."""
        self.session.refuse(self.stream_id, b"400")
        self.ended = True
        self.session.forget(self)

    def _send100Continue(self) -> None:  # noqa: N802 - Twisted's name
        """No interim answer: HTTP/3 clients send the body without waiting for one."""

    # -- what the session calls ------------------------------------------------------------

    def pause(self) -> None:
        if self.producer is not None and self.streaming and not self.paused:
            self.paused = True
            self.producer.pauseProducing()

    def resume(self) -> None:
        if self.producer is not None and self.paused:
            self.paused = False
            self.producer.resumeProducing()

    def lost(self, why: str) -> None:
        """The client reset the stream, or the connection is over."""
        if self.ended:
            return
        self.ended = True
        self.request.connectionLost(Failure(ConnectionLost(why)))


@dataclass
class Malformed(H3Event):
    """A request stream `_Http3` found malformed, and why; `status` is the answer."""

    stream_id: int
    reason: str
    status: bytes = b"400"


class _Http3(H3Connection):
    """aioquic's HTTP/3 connection, with a malformed request an error of its stream only.

    RFC 9114 §4.1.2 makes a malformed request (a content-length that is no number, or is not
    the size of the body; a header name in capitals; pseudo-headers missing) a stream error;
    aioquic closes the whole connection for it, and with it every other request of the client
    (a browser's SSE streams all share it). Here the stream is marked, what else comes on it
    is dropped, and the session answers `400` (`Malformed`). Only these message errors: their
    header block was decoded (or there was none), so QPACK's state is whole."""

    #: Bytes a request's head may hold before it is whole: set by the session
    #: (`limits.header-bytes`, times 4, as HTTP/2's HPACK bound).
    head_bytes = 4 * 16384

    def _receive_request_or_push_data(self, stream: Any, data: bytes,
                                      stream_ended: bool) -> list[H3Event]:
        if getattr(stream, "malformed", False):
            if stream_ended:
                stream.receiving_ended = True  # aioquic then forgets the stream
            return []
        if stream.headers_recv_state == HeadersState.INITIAL \
                and len(stream.buffer) + len(data) > self.head_bytes:
            # aioquic keeps a frame's bytes until the whole frame is there: a HEADERS frame
            # that announces a megabyte and comes a byte at a time (or never ends) would be
            # held, stream after stream, with the windows QUIC widens as data comes
            stream.malformed = True
            stream.buffer = b""
            stream.frame_size = stream.frame_type = None
            return [Malformed(stream.stream_id, "request head too large", b"431")]
        try:
            events: list[H3Event] = super()._receive_request_or_push_data(stream, data,
                                                                          stream_ended)
        except MessageError as e:
            stream.malformed = True
            stream.buffer = b""
            stream.frame_size = stream.frame_type = None
            return [Malformed(stream.stream_id, e.reason_phrase)]
        return events


class H3Session:
    """HTTP/3 over one QUIC connection (module docstring)."""

    def __init__(self, site: Site, limits: Limits, conn: ConnectionInfo,
                 transport: QuicTransport, routes: Any = None,
                 whole: UnsentBytes = PROCESS) -> None:
        self.site = site
        self.limits = limits
        self.conn = conn
        self.transport = transport
        #: Says which requests may carry a body (`HttpRoot.takes_body`); None: all may.
        self.routes = routes
        self.whole = whole
        self.h3 = _Http3(transport.quic)
        self.h3.head_bytes = 4 * limits.header_bytes
        self.streams: dict[int, H3Stream] = {}
        #: Bytes queued since `unsent` was last counted exactly (counting walks every stream).
        self._queued = 0
        self._unsent = 0
        #: Of `_unsent`, what responses written whole hold (counted in `whole` too).
        self._whole_held = 0
        self._over = False
        self._going = False
        self._highest = -4
        self._pulling: set[H3Stream] = set()
        self._pull_call: Any = None

    # -- events in ---------------------------------------------------------------------------

    def quic_event_received(self, event: Any) -> None:
        if isinstance(event, StreamReset | StopSendingReceived):
            stream = self.streams.get(event.stream_id)
            if stream is not None:
                # the client gave up on the request (a closed EventSource): our side of the
                # stream is reset too, so the stream ends and its credit goes back to the client
                self.forget(stream)
                if not stream.ended:
                    try:
                        self.transport.quic.reset_stream(event.stream_id,
                                                         ErrorCode.H3_REQUEST_CANCELLED)
                    except (ValueError, AssertionError):
                        pass  # already reset
                    self.transport.transmit()
                stream.lost("stream reset by the client")
        try:
            h3_events = self.h3.handle_event(event)
        except H3Error as e:
            self.transport.close(getattr(e, "error_code", ErrorCode.H3_GENERAL_PROTOCOL_ERROR),
                                 str(e) or type(e).__name__)
            return
        for h3_event in h3_events:
            if isinstance(h3_event, HeadersReceived):
                self._headers(h3_event)
            elif isinstance(h3_event, DataReceived):
                self._data(h3_event)
            elif isinstance(h3_event, Malformed):
                self._malformed(h3_event)

    def _headers(self, event: HeadersReceived) -> None:
        stream_id = event.stream_id
        stream = self.streams.get(stream_id)
        if stream is not None:
            if event.stream_ended:
                self._complete(stream)  # trailers: ignored, but they end the request
            return
        if stream_id % 4 != 0:
            return  # not a client's request stream
        quic = self.transport.quic
        if self._going:
            quic.reset_stream(stream_id, ErrorCode.H3_REQUEST_REJECTED)
            self.transport.transmit()
            return
        self._highest = max(self._highest, stream_id)
        pseudo: dict[bytes, bytes] = {}
        fields: list[tuple[bytes, bytes]] = []
        size = 0
        for name, value in event.headers:
            size += len(name) + len(value) + 32
            if name.startswith(b":"):
                pseudo[name] = value
            else:
                fields.append((name, value))
        if len(fields) > self.limits.header_count or size > self.limits.header_bytes:
            self.refuse(stream_id, b"431")
            return
        method, path = pseudo.get(b":method"), pseudo.get(b":path")
        if not method or not path or not path.startswith(b"/") and path != b"*":
            self.refuse(stream_id, b"400")
            return
        lengths = [v for n, v in fields if n == b"content-length"]
        if lengths and (len(set(lengths)) > 1 or not lengths[0].isdigit()):
            self.refuse(stream_id, b"400")
            return
        stream = H3Stream(self, stream_id)
        self.streams[stream_id] = stream
        request = stream.request
        headers = request.requestHeaders
        for name, value in fields:
            values = headers.getRawHeaders(name)
            if values is None:
                headers.setRawHeaders(name, [value])
            else:
                values.append(value)
        authority = pseudo.get(b":authority")
        if authority is not None and not headers.hasHeader(b"host"):
            headers.setRawHeaders(b"host", [authority])
        stream.method, stream.path = method, path  # type: ignore[attr-defined]
        if lengths:
            request.gotLength(int(lengths[0]))
        else:
            request.gotLength(0 if event.stream_ended or method in (b"GET", b"HEAD") else None)
        request.parseCookies()
        if event.stream_ended:
            self._complete(stream)
            return
        length = request.requestHeaders.getRawHeaders(b"content-length", [b"0"])[0]
        announced = int(length) if length.isdigit() else 0
        if self.routes is not None and not self.routes.takes_body(request, method, path):
            stream.unread = True
            quic.stop_stream(stream_id, ErrorCode.H3_NO_ERROR)
            self.transport.transmit()
            self._complete(stream)
        elif announced > self.limits.body_bytes:
            self._refuse_request(stream, b"413")
        else:
            stream.body_left = self.limits.body_bytes

    def _data(self, event: DataReceived) -> None:
        stream = self.streams.get(event.stream_id)
        if stream is None or stream.unread or stream.received:
            return
        data = event.data
        if data:
            left = (stream.body_left or 0) - len(data)
            if left < 0:
                self._refuse_request(stream, b"413")
                return
            stream.body_left = left
            stream.request.handleContentChunk(data)
        if event.stream_ended:
            self._complete(stream)

    def _malformed(self, event: Malformed) -> None:
        """`400` for a malformed request not handed on yet; one handed on (its route reads
        no body) is being answered, and what else came on it is dropped."""
        stream = self.streams.get(event.stream_id)
        if stream is None:
            if event.stream_id % 4 == 0:
                self.refuse(event.stream_id, event.status, ErrorCode.H3_MESSAGE_ERROR)
        elif not stream.received:
            self._refuse_request(stream, event.status, ErrorCode.H3_MESSAGE_ERROR)

    def _complete(self, stream: H3Stream) -> None:
        if stream.received:
            return
        stream.received = True
        stream.request.requestReceived(stream.method, stream.path,  # type: ignore[attr-defined]
                                       VERSION)

    def _refuse_request(self, stream: H3Stream, status: bytes,
                        stop: int = ErrorCode.H3_NO_ERROR) -> None:
        """`refuse` for a request made but not handed on (its answered event too)."""
        self.refuse(stream.stream_id, status, stop)
        if self.routes is not None:
            self.routes.refused(stream.request, int(status[:3]),
                                stream.method, stream.path, VERSION)  # type: ignore[attr-defined]
        stream.ended = True
        self.forget(stream)
        stream.request.connectionLost(Failure(ConnectionLost("request refused")))

    # -- answers out -------------------------------------------------------------------------

    def refuse(self, stream_id: int, status: bytes, stop: int = ErrorCode.H3_NO_ERROR) -> None:
        """Answer `status` with no body on a stream no request answers, and ask the client to
        stop sending on it (with `stop`, the error code)."""
        try:
            self.h3.send_headers(stream_id, [(b":status", status), (b"content-length", b"0")],
                                 end_stream=True)
        except H3Error:
            pass  # the stream is in no state for it: the reset says enough
        quic = self.transport.quic
        try:
            quic.stop_stream(stream_id, stop)
        except ValueError:
            pass  # already ended by the client
        self.transport.transmit()

    def send_headers(self, stream_id: int, headers: list[tuple[bytes, bytes]]) -> None:
        try:
            self.h3.send_headers(stream_id, headers)
        except (H3Error, ValueError, AssertionError):
            return  # the stream is gone (reset): nobody reads it
        self.transport.transmit()

    def send_data(self, stream_id: int, data: bytes, whole: bool) -> None:
        quic = self.transport.quic
        try:
            quic.send_stream_data(stream_id, encode_frame(FrameType.DATA, data), False)
        except (ValueError, AssertionError):
            return  # reset meanwhile
        size = len(data)
        self._queued += size
        if whole:
            self._whole_held += size
            self.whole.held += size
        self.transport.transmit()
        if self._queued > self.limits.h3_unsent_bytes // 4:
            self._count_unsent()

    def end_stream(self, stream: H3Stream) -> None:
        self.forget(stream)
        try:
            self.transport.quic.send_stream_data(stream.stream_id, b"", True)
        except (ValueError, AssertionError):
            return  # reset meanwhile
        self.transport.transmit()

    def reset_stream(self, stream: H3Stream, code: int) -> None:
        self.forget(stream)
        try:
            self.transport.quic.reset_stream(stream.stream_id, code)
        except (ValueError, AssertionError):
            return
        self.transport.transmit()

    def forget(self, stream: H3Stream) -> None:
        self.streams.pop(stream.stream_id, None)
        self._pulling.discard(stream)

    # -- what the client has not taken ------------------------------------------------------

    def room_for(self, size: int) -> bool:
        """Whether a response written whole may queue `size` more bytes: within the
        connection's bound (or the only thing it holds) and, unless `SMALL`, the process's."""
        self._count_unsent()
        if self._unsent and self._unsent + size > self.limits.h3_unsent_bytes:
            return False
        return size <= SMALL or self.whole.fits(size, self.limits.process_unsent_bytes)

    def over_bound(self) -> bool:
        return self._over

    def _count_unsent(self) -> None:
        unsent = self.transport.unsent()
        self._unsent = unsent
        self._queued = 0
        held = min(self._whole_held, unsent)
        self.whole.held -= self._whole_held - held
        self._whole_held = held
        limit = self.limits.h3_unsent_bytes
        if not self._over and unsent > limit:
            self._over = True
            for stream in list(self.streams.values()):
                stream.pause()
        elif self._over and unsent <= limit // 2:
            self._over = False
            for stream in list(self.streams.values()):
                stream.resume()
            if self._pulling:
                self._schedule_pull()

    def sent(self) -> None:
        """Acknowledgements came: recount when something waits on the count (paused
        producers, answers written whole held in the process's count); else the next count
        comes with the writes (`send_data`), not with every packet the client sends."""
        if self._over or self._whole_held:
            self._count_unsent()

    def pull(self, stream: H3Stream) -> None:
        """A pull producer (a file): asked for more each turn while the connection has room."""
        self._pulling.add(stream)
        self._schedule_pull()

    def _schedule_pull(self) -> None:
        if self._pull_call is None:
            reactor: Any = self.site.reactor
            self._pull_call = reactor.callLater(0, self._pull)

    def _pull(self) -> None:
        self._pull_call = None
        if self._over:
            return  # `_count_unsent` schedules again once there is room
        for stream in list(self._pulling):
            if stream.producer is None or stream.streaming or stream.ended:
                self._pulling.discard(stream)
                continue
            stream.producer.resumeProducing()
        self._count_unsent()
        if self._pulling and not self._over:
            self._schedule_pull()

    # -- the connection ------------------------------------------------------------------------

    def going_away(self) -> None:
        """GOAWAY naming the first request stream not served: the client sends new requests
        on another connection, the ones it has go on."""
        if self._going:
            return
        self._going = True
        control = getattr(self.h3, "_local_control_stream_id", None)
        if control is None:
            return
        self.transport.quic.send_stream_data(
            control, encode_frame(FrameType.GOAWAY, encode_uint_var(self._highest + 4)))
        self.transport.transmit()

    def connection_lost(self, reason: str) -> None:
        if self._pull_call is not None and self._pull_call.active():
            self._pull_call.cancel()
        self._pull_call = None
        self.whole.held -= self._whole_held
        self._whole_held = 0
        streams, self.streams = list(self.streams.values()), {}
        self._pulling.clear()
        for stream in streams:
            stream.lost(reason)


def peer_address(peer: tuple[str, int]) -> IPv4Address | IPv6Address:
    """A UDP peer as Twisted addresses it (a request's `getClientAddress`)."""
    host, port = peer[0], peer[1]
    return (IPv6Address if ":" in host else IPv4Address)("UDP", host, port)
