"""HTTP/1.1 connection limits: header size and count, a deadline for the request head, a cap and a
deadline for the body, so a slowloris client, a giant header or an endless upload cannot tie up
the daemon (or its disk). `Limits` also carries the HTTP/2 limits that `h2_limits.py` applies."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from twisted.internet.interfaces import IDelayedCall
from twisted.internet.protocol import connectionDone
from twisted.python.failure import Failure
from twisted.web.http import HTTPChannel
from twisted.web.http_headers import Headers
from twisted.web.server import Request

from ssekd.bindings.http.unsent import (
    DEFAULT_H2_UNSENT_BYTES,
    DEFAULT_PROCESS_UNSENT_BYTES,
    PROCESS,
    REFUSAL_REASON,
    SMALL,
    UnsentBytes,
    announced_length,
    refusal_headers,
    replaced_by_refusal,
)

DEFAULT_HEADER_BYTES = 16384
DEFAULT_HEADER_COUNT = 100
DEFAULT_HEADER_TIMEOUT = 10.0
DEFAULT_IDLE_TIMEOUT = 60.0
DEFAULT_BODY_BYTES = 1 << 20
DEFAULT_BODY_TIMEOUT = 30.0
DEFAULT_H2_STREAMS = 100
DEFAULT_H2_RESETS = 100
#: The window `limits.h2-resets` counts client stream resets in, in seconds.
H2_RESET_WINDOW = 10.0
DEFAULT_H2_CONTROL_FRAMES = 1000
#: The window `limits.h2-control-frames` counts frames the server must answer in, in seconds.
H2_CONTROL_WINDOW = 10.0
#: A MiB, for the descriptions.
_MIB = 1 << 20


@dataclass(frozen=True)
class Limits:
    """`options.limits` of the http binding (an ssekd extension; Zilla has no such block)."""

    header_bytes: int = DEFAULT_HEADER_BYTES
    header_count: int = DEFAULT_HEADER_COUNT
    header_timeout: float = DEFAULT_HEADER_TIMEOUT
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT
    body_bytes: int = DEFAULT_BODY_BYTES
    body_timeout: float = DEFAULT_BODY_TIMEOUT
    h2_streams: int = DEFAULT_H2_STREAMS
    h2_resets: int = DEFAULT_H2_RESETS
    h2_control_frames: int = DEFAULT_H2_CONTROL_FRAMES
    h2_unsent_bytes: int = DEFAULT_H2_UNSENT_BYTES
    h3_unsent_bytes: int = DEFAULT_H2_UNSENT_BYTES
    process_unsent_bytes: int = DEFAULT_PROCESS_UNSENT_BYTES

    @classmethod
    def from_options(cls, options: Mapping[str, Any] | None) -> Limits:
        o = options or {}
        return cls(
            header_bytes=int(o.get("header-bytes", DEFAULT_HEADER_BYTES)),
            header_count=int(o.get("header-count", DEFAULT_HEADER_COUNT)),
            header_timeout=float(o.get("header-timeout", DEFAULT_HEADER_TIMEOUT)),
            idle_timeout=float(o.get("idle-timeout", DEFAULT_IDLE_TIMEOUT)),
            body_bytes=int(o.get("body-bytes", DEFAULT_BODY_BYTES)),
            body_timeout=float(o.get("body-timeout", DEFAULT_BODY_TIMEOUT)),
            h2_streams=int(o.get("h2-streams", DEFAULT_H2_STREAMS)),
            h2_resets=int(o.get("h2-resets", DEFAULT_H2_RESETS)),
            h2_control_frames=int(o.get("h2-control-frames", DEFAULT_H2_CONTROL_FRAMES)),
            h2_unsent_bytes=int(o.get("h2-unsent-bytes", DEFAULT_H2_UNSENT_BYTES)),
            h3_unsent_bytes=int(o.get("h3-unsent-bytes", DEFAULT_H2_UNSENT_BYTES)),
            process_unsent_bytes=int(o.get("process-unsent-bytes",
                                           DEFAULT_PROCESS_UNSENT_BYTES)),
        )


LIMITS_SCHEMA: Mapping[str, Any] = {
    "type": "object", "additionalProperties": False, "x-ssekd-addition": True,
    "description": "Bounds on what one client may cost; Zilla has no such block.",
    "properties": {
        "header-bytes": {"type": "integer", "minimum": 256, "default": DEFAULT_HEADER_BYTES,
                         "x-ssekd-addition": True,
                         "description": "Largest request head (request line and headers); more "
                                        "is `400`. HTTP/2: advertised as "
                                        "SETTINGS_MAX_HEADER_LIST_SIZE; a bigger header "
                                        "block, or one whose HPACK bytes pass 4 times "
                                        "this, ends the connection."},
        "header-count": {"type": "integer", "minimum": 1, "default": DEFAULT_HEADER_COUNT,
                         "x-ssekd-addition": True,
                         "description": "Most headers in one request; more is `400` "
                                        "(HTTP/2: `431`)."},
        "header-timeout": {"type": "number", "exclusiveMinimum": 0,
                           "default": DEFAULT_HEADER_TIMEOUT, "x-ssekd-addition": True,
                           "description": "Seconds from the first byte of a request to the end of "
                                          "its head (against slowloris); then `408` and close. "
                                          "HTTP/2: for each header block, then GOAWAY."},
        "idle-timeout": {"type": "number", "exclusiveMinimum": 0,
                         "default": DEFAULT_IDLE_TIMEOUT, "x-ssekd-addition": True,
                         "description": "Seconds a connection may stay silent before it is closed "
                                        "(HTTP/2 too). An sse exit's `max-idle-time` must be "
                                        "shorter. HTTP/2: also a connection with response "
                                        "bytes waiting that could send none of them that long "
                                        "(its window shut, its socket full), whatever frames "
                                        "its client sends meanwhile (PINGs)."},
        "body-bytes": {"type": "integer", "minimum": 0, "default": DEFAULT_BODY_BYTES,
                       "x-ssekd-addition": True,
                       "description": "Largest request body; `413` the moment a body "
                                      "crosses it, chunked and HTTP/2 included. Routes "
                                      "that take no body (sse, filesystem) answer "
                                      "without reading one."},
        "body-timeout": {
            "type": "number", "exclusiveMinimum": 0, "default": DEFAULT_BODY_TIMEOUT,
            "x-ssekd-addition": True,
            "description": "Seconds a client may take to send a whole HTTP/1.1 request body; "
                           "slower gets 408 and the connection is closed."},
        "h2-streams": {
            # Twisted's per-connection priority tree holds at most 1000 streams.
            "type": "integer", "minimum": 1, "maximum": 1000, "default": DEFAULT_H2_STREAMS,
            "x-ssekd-addition": True,
            "description": "Streams an HTTP/2 client may have open at once "
                           "(SETTINGS_MAX_CONCURRENT_STREAMS); a stream over it is refused "
                           "with RST_STREAM REFUSED_STREAM, the connection goes on."},
        "h2-resets": {
            "type": "integer", "minimum": 1, "default": DEFAULT_H2_RESETS,
            "x-ssekd-addition": True,
            "description": f"Stream resets (RST_STREAM) an HTTP/2 client may send in any "
                           f"{H2_RESET_WINDOW:g} seconds; one more and the connection ends with "
                           f"GOAWAY ENHANCE_YOUR_CALM (the rapid reset attack)."},
        "h2-control-frames": {
            "type": "integer", "minimum": 1, "default": DEFAULT_H2_CONTROL_FRAMES,
            "x-ssekd-addition": True,
            "description": f"Frames an HTTP/2 client may send in any {H2_CONTROL_WINDOW:g} "
                           f"seconds that the daemon must answer (SETTINGS and PING, each "
                           f"acknowledged, and streams refused over `h2-streams`); one more and "
                           f"the connection ends with GOAWAY ENHANCE_YOUR_CALM (SETTINGS and "
                           f"PING floods)."},
        "h2-unsent-bytes": {
            "type": "integer", "minimum": 65536, "default": DEFAULT_H2_UNSENT_BYTES,
            "x-ssekd-addition": True,
            "description": f"Response bytes one HTTP/2 connection may hold that its client has "
                           f"not taken (its flow-control window shut, or its socket full); "
                           f"{DEFAULT_H2_UNSENT_BYTES // _MIB} MiB by default. Past it the "
                           f"connection's streaming responses (SSE, files) are paused until half "
                           f"has gone, and a response written whole (an http-kafka answer) "
                           f"that would pass it is refused before it starts: `503` with "
                           f"`Retry-After`, unless the connection holds nothing else."},
        "h3-unsent-bytes": {
            "type": "integer", "minimum": 65536, "default": DEFAULT_H2_UNSENT_BYTES,
            "x-ssekd-addition": True,
            "description": f"As `h2-unsent-bytes`, for an HTTP/3 connection (a quic binding's): "
                           f"response bytes its client has not acknowledged yet, "
                           f"{DEFAULT_H2_UNSENT_BYTES // _MIB} MiB by default."},
        "process-unsent-bytes": {
            "type": "integer", "minimum": 65536, "default": DEFAULT_PROCESS_UNSENT_BYTES,
            "x-ssekd-addition": True,
            "description": f"Bytes of responses written whole (not streamed) that the whole "
                           f"process (each worker) may hold for clients that have not taken "
                           f"them, over HTTP/2 and HTTP/1.1 (what waits behind a full socket); "
                           f"{DEFAULT_PROCESS_UNSENT_BYTES // _MIB} MiB by default. A response "
                           f"over 64 KiB that would pass it is refused before it starts: `503` "
                           f"with `Retry-After`."},
    },
}


class BodyRoutes(Protocol):
    """Whether a request may carry a body, decided from its head by routing it (the http
    binding's `HttpRoot`, which carries the route on the request so that it routes each request
    once): a route that takes none is answered without its body being read."""

    def takes_body(self, request: Request, method: bytes, uri: bytes) -> bool: ...

    def refused(self, request: Request, status: int, method: bytes, uri: bytes,
                version: bytes) -> None:
        """The connection answered `status` itself, before the request reached the routes (a
        body over `limits.body-bytes`): the method, target and version are as it read them."""


class LimitedHTTPChannel(HTTPChannel):
    """HTTPChannel with an overall deadline for each request head, and bounded bodies.

    Twisted's own timeout is an *idle* timeout: a client that sends one header byte every few
    seconds resets it forever. The deadline here starts at the first byte of a request and is
    cancelled only when the whole head has arrived. It is armed from `dataReceived`, never from
    `connectionMade`, because after an ALPN switch to HTTP/2 this channel object stays alive but
    receives nothing, and its timer must not close the connection under the HTTP/2 protocol.

    Bodies: Twisted reads a whole body (spooling it to a temporary file) before anything looks
    at the request. Here, once the head is in, `routes` says whether the request's route takes a
    body at all. If not, the request is handed on at once as if it had none, the body is never
    read (Twisted stops reading the socket while a request is handled) and the connection closes
    after the answer. If it does, the body must arrive within `body_timeout` seconds and may
    not grow past `body_bytes`, counted as the decoded bytes arrive (`BodyCountingRequest`), so a
    chunked upload gets its `413` the moment it crosses the limit. Without `routes` every
    request may carry a body, within those limits.

    Answers: a client that does not read makes a response written whole wait in Twisted's
    buffer for the socket. Twisted answered the connection's next requests all the same (those
    pipelined behind it, and those sent later: it stops reading only while a request is being
    handled), each answer added to that buffer, so one connection held as many answers as it
    asked for. So once an answer leaves the socket full, the next request is neither parsed nor
    read until the socket has taken it (`requestDone`, `resumeProducing`): a connection holds
    one such answer, until the idle timeout closes it. Many connections still held as many
    answers, so what a response without a producer writes while the socket is full counts for
    the process (`unsent.PROCESS`) until the socket has taken it, and a response that would take
    the count past `process_unsent_bytes` is refused before it starts (unsent.py).
    """

    #: Where the process counts the bytes of answers written whole that wait (unsent.py).
    whole: UnsentBytes = PROCESS

    def __init__(self, limits: Limits, routes: BodyRoutes | None = None) -> None:
        super().__init__()
        self.state = _ChannelState(limits, routes)

    # CPython shares one key table among the instances of a class while, over all of them, at
    # most 30 attribute names are set; HTTPChannel sets 28 over a request that streams. Seven
    # names of ours (and Twisted's limits copied onto each channel) made every channel's
    # attribute dict a private table: 1.3 KB more per connection, measured with tracemalloc, a
    # sixth of an idle SSE stream. So our per-connection state is one slotted object, and
    # Twisted's limits are read from it: add fields to `_ChannelState`, not names to the channel.
    @property
    def maxHeaders(self) -> int:  # type: ignore[override]
        return self.state.limits.header_count

    @property
    def totalHeadersSize(self) -> int:  # type: ignore[override]
        return self.state.limits.header_bytes

    @property
    def MAX_LENGTH(self) -> int:  # type: ignore[override]
        return self.state.limits.header_bytes

    def dataReceived(self, data: bytes) -> None:
        b = self.state
        if b.answered:
            return  # refused with a status of our own: ignore whatever arrives before the close
        if b.awaiting_head and b.head_deadline is None:
            b.head_deadline = self.callLater(b.limits.header_timeout, self._head_too_slow)
        super().dataReceived(data)

    def allHeadersReceived(self) -> None:
        b = self.state
        self._disarm()
        b.awaiting_head = False
        request = self.requests[-1]
        unread = (self.length != 0 and b.routes is not None
                  and not b.routes.takes_body(request, self._command, self._path))
        if not unread and self.length is not None and self.length > b.limits.body_bytes:
            self._respond_and_close(b"413 Content Too Large")
            return
        if unread:
            # Twisted hands the request on at the end of the head when the length is 0; no
            # `100 Continue` asks for the body either.
            self.length = 0
            request.requestHeaders.removeHeader(b"expect")
        super().allHeadersReceived()
        if unread:
            # The unread body would be taken for the next request: close after this one.
            self.persistent = False
            request.responseHeaders.setRawHeaders(b"connection", [b"close"])
        elif self.length != 0:
            b.body_left = b.limits.body_bytes
            b.body_deadline = self.callLater(b.limits.body_timeout, self._body_too_slow)

    def admit_body(self, size: int) -> bool:
        """Count `size` more body bytes; False (after answering `413`) once over the limit."""
        b = self.state
        if b.answered:
            return False
        b.body_left -= size
        if b.body_left >= 0:
            return True
        self._respond_and_close(b"413 Content Too Large")
        return False

    def allContentReceived(self) -> None:
        if self.state.answered:
            return  # the decoder finished a body we refused while it was still parsing
        self._disarm_body()
        super().allContentReceived()

    def requestDone(self, request: Any) -> None:
        """An answer the socket could not take yet holds the next request back (the class
        docstring): it is neither parsed (LineReceiver's `paused`) nor read until
        `resumeProducing`."""
        hold = self._waitingForTransport and self.persistent
        if hold:
            self.paused = True
        super().requestDone(request)
        if hold:
            self._networkProducer.pauseProducing()  # what Twisted's resumeProducing resumes
        self.state.awaiting_head = True
        self.state.refused = False

    # -- answers written whole (the class docstring) -----------------------------------------

    def writeHeaders(self, version: bytes, code: bytes, reason: bytes, headers: Any) -> None:
        """A response without a producer announcing more than `SMALL` bytes, that would take
        the process past `process_unsent_bytes`, goes out as a `503` instead, body dropped."""
        b = self.state
        request = self.requests[0] if self.requests else None  # the one being answered
        if self._requestProducer is None and request is not None \
                and request.method != b"HEAD":
            pairs = [(name, value) for name, values in headers.getAllRawHeaders()
                     for value in values]
            size = announced_length(pairs)
            if size > SMALL and not self.whole.fits(size, b.limits.process_unsent_bytes):
                b.refused = True
                code, reason, headers = b"503", REFUSAL_REASON, Headers()
                replaced_by_refusal(request)
                for name, value in refusal_headers(pairs):
                    headers.addRawHeader(name, value)
        super().writeHeaders(version, code, reason, headers)

    def write(self, data: bytes) -> None:
        if self.state.refused:
            return
        super().write(data)
        self._count(len(data))

    def writeSequence(self, iovec: list[bytes]) -> None:
        if self.state.refused:
            return
        super().writeSequence(iovec)
        self._count(sum(len(part) for part in iovec))

    def _count(self, size: int) -> None:
        """Bytes of a response without a producer that the socket could not take now: counted
        for the process until it has (`resumeProducing`: Twisted's buffer is empty)."""
        if self._waitingForTransport and self._requestProducer is None:
            self.state.held += size
            self.whole.held += size

    def _release(self) -> None:
        b = self.state
        if b.held:
            self.whole.held -= b.held
            b.held = 0

    def resumeProducing(self) -> None:
        """The socket has taken what was written: the count is given back, and a request held
        back meanwhile (`requestDone`) is read on."""
        self._release()
        super().resumeProducing()
        if self.paused:
            self.paused = False
            if not self.state.answered and not getattr(self.transport, "disconnecting", True):
                HTTPChannel.dataReceived(self, b"")  # what is buffered; no head deadline for it

    def headerReceived(self, line: bytes) -> bool:
        """A field value holding NUL, CR or LF is refused (RFC 9110 §5.5), as newer Twisted does
        itself; Twisted 24.7 passed it on to the request.

        So is any `Transfer-Encoding` but one `chunked`: Twisted ignores `identity` (which RFC
        9112 no longer has), so `chunked` and then `identity` in two fields read as chunked here,
        where the RFC makes the last coding, `identity`, the one that counts (a `400`). A proxy in
        front reading the body the other way would let a request hide in it (smuggling)."""
        if len(line.translate(None, b"\x00\r\n")) != len(line):
            self._respond_and_close(b"400 Bad Request")
            return False
        name, colon, value = line.partition(b":")
        if colon and name.lower() == b"transfer-encoding":
            seen = self.requests[-1].requestHeaders.hasHeader(b"transfer-encoding") \
                if self.requests else False
            if seen or value.strip(b" \t").lower() != b"chunked":
                self._respond_and_close(b"400 Bad Request")
                return False
        ok: bool = super().headerReceived(line)
        return ok

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        self._disarm()
        self._disarm_body()
        self._release()
        super().connectionLost(reason)

    def _disarm(self) -> None:
        b = self.state
        if b.head_deadline is not None:
            if b.head_deadline.active():
                b.head_deadline.cancel()
            b.head_deadline = None

    def _disarm_body(self) -> None:
        b = self.state
        if b.body_deadline is not None:
            if b.body_deadline.active():
                b.body_deadline.cancel()
            b.body_deadline = None

    def _head_too_slow(self) -> None:
        self.state.head_deadline = None
        if self.transport is not None and self.state.awaiting_head:
            self._respond_and_close(b"408 Request Timeout")

    def _body_too_slow(self) -> None:
        self.state.body_deadline = None
        if self.transport is not None and not self.state.answered:
            self._respond_and_close(b"408 Request Timeout")

    def _respond_and_close(self, status: bytes) -> None:
        assert self.transport is not None
        self.state.answered = True
        if self.state.routes is not None and self.requests:
            self.state.routes.refused(self.requests[-1], int(status[:3]),
                                      getattr(self, "_command", b"") or b"",
                                      getattr(self, "_path", b"") or b"",
                                      getattr(self, "_version", b"") or b"")
        self._disarm_body()
        self.transport.write(b"HTTP/1.1 " + status +
                             b"\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
        self.transport.loseConnection()
        self.setRawMode()  # the rest of this read goes nowhere (`dataReceived` ignores later ones)


class _ChannelState:
    """A `LimitedHTTPChannel`'s own state, in one slotted object (see the note on key tables
    in the channel)."""

    __slots__ = ("answered", "awaiting_head", "body_deadline", "body_left", "head_deadline",
                 "held", "limits", "refused", "routes")

    def __init__(self, limits: Limits, routes: BodyRoutes | None) -> None:
        self.limits = limits
        self.routes = routes
        self.awaiting_head = True
        self.head_deadline: IDelayedCall | None = None
        self.body_deadline: IDelayedCall | None = None
        #: bytes the body being received may still bring
        self.body_left = 0
        #: refused with a status of our own: the connection is closing
        self.answered = False
        #: bytes of answers written whole that wait in a full socket's buffer (`PROCESS`)
        self.held = 0
        #: the response being written was refused (a `503` went instead): its body is dropped
        self.refused = False


class BodyCountingRequest(Request):
    """A Request whose body bytes are counted by its `LimitedHTTPChannel` before Twisted stores
    them: the channel's decoders hand each decoded piece here, and nothing past the limit is
    kept. (HTTP/2 streams count theirs in the connection, before they get here.)"""

    def handleContentChunk(self, data: bytes) -> None:
        channel = self.channel
        if isinstance(channel, LimitedHTTPChannel) and not channel.admit_body(len(data)):
            return
        super().handleContentChunk(data)
