"""HTTP/2 over cleartext by upgrade (the http client's `versions: [http/1.1, h2]` without TLS),
as Zilla's http client does: the first request of a new connection goes as HTTP/1.1 offering
`Upgrade: h2c` (with `HTTP2-Settings`). An upstream that answers `101 Switching Protocols`
speaks HTTP/2 on that connection from then on, the answer to that request coming on stream 1,
and later requests share it (`H2cUpgrades`). One that answers anything else has declined:
that answer is read as HTTP/1.1 and relayed like any other, the connection closes after it,
and the http client speaks HTTP/1.1 to this upstream from then on (most servers, nginx among
them, decline).

The HTTP/1.1 answer is read here, not by Twisted's `Agent` (which cannot take a connection it
did not open): a status line, headers, and a body framed by `Content-Length`, chunks or the end
of the connection. The connection is paused with the relay, as Agent's are.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.protocol import Factory, Protocol
from twisted.python.failure import Failure

from ssekd.bindings.http.exchange import ResponseSink, UpstreamRequest
from ssekd.bindings.http.upstream_h2 import H2Call, H2Upstream

#: The most bytes of an answer's head (status line and headers) read before it is a failure.
MAX_HEAD = 64 * 1024


class H2cAttempt(Protocol):
    """One new cleartext connection whose first request offers the upgrade (an `UpstreamCall`
    for that request)."""

    def __init__(self, request: UpstreamRequest, sink: ResponseSink,
                 upgraded: Callable[[H2Upstream], None], declined: Callable[[], None],
                 lost: Callable[[H2Upstream], None], gone: Callable[[], None]) -> None:
        self._gone = gone
        self.request = request
        self.sink: ResponseSink | None = sink
        self._upgraded = upgraded
        self._declined = declined
        self.h2 = H2Upstream(b"http", False, lost)
        self.h2_call: H2Call | None = None
        self.transport: Any = None
        self.connecting: Deferred[Any] | None = None
        self._buffer = b""
        self._reader: _Http11Body | None = None
        self._paused = False

    # -- the connection ------------------------------------------------------------------

    def connectionMade(self) -> None:
        self.connecting = None
        request = self.request
        lines = [b"%s %s HTTP/1.1" % (request.method, request.path),
                 b"host: " + request.authority]
        lines += [n + b": " + v for n, v in request.headers]
        if request.body or request.method in (b"POST", b"PUT", b"PATCH"):
            lines.append(b"content-length: %d" % len(request.body))
        lines += [b"connection: Upgrade, HTTP2-Settings", b"upgrade: h2c",
                  b"http2-settings: " + self.h2.upgrade_settings()]
        self.transport.write(b"\r\n".join(lines) + b"\r\n\r\n" + request.body)

    def dataReceived(self, data: bytes) -> None:
        if self.h2_call is not None or self.h2.usable:
            self.h2.dataReceived(data)
            return
        if self._reader is not None:
            self._reader.feed(data)
            return
        self._buffer += data
        end = self._buffer.find(b"\r\n\r\n")
        if end < 0:
            if len(self._buffer) > MAX_HEAD:
                self._fail("reset")
            return
        head, rest = self._buffer[:end], self._buffer[end + 4:]
        self._buffer = b""
        try:
            status, headers = _parse_head(head)
        except ValueError:
            self._fail("reset")
            return
        if status == 101:
            sink, self.sink = self.sink, None
            assert sink is not None
            self.h2_call = self.h2.upgraded(self.transport, sink)
            if self._paused:
                self.h2_call.pause()
            self._upgraded(self.h2)
            if rest:
                self.h2.dataReceived(rest)
            return
        if 100 <= status < 200:  # an interim answer: the final one follows
            self._buffer = rest
            if rest:
                self.dataReceived(b"")
            return
        self._declined()
        if self.sink is None:
            self.transport.loseConnection()
            return
        bodiless = self.request.method == b"HEAD" or status in (204, 304)
        self.sink.head(status, headers)
        self._reader = _Http11Body(self.sink, headers, bodiless, self._ended)
        if not self._reader.done:
            self._reader.feed(rest)

    def _ended(self) -> None:
        self.sink = None
        self.transport.loseConnection()

    def _fail(self, why: str) -> None:
        sink, self.sink = self.sink, None
        if sink is not None:
            sink.failed(why)
        if self.transport is not None:
            self.transport.abortConnection()

    def connectionLost(self, reason: Failure = Failure(ConnectionError())) -> None:
        if self.h2_call is not None or self.h2.usable:
            self.h2.connectionLost(reason)
            return
        self._gone()
        reader, self._reader = self._reader, None
        if reader is not None and not reader.done:
            reader.closed()
            return
        sink, self.sink = self.sink, None
        if sink is not None:
            sink.failed("reset")

    # -- UpstreamCall --------------------------------------------------------------------

    def pause(self) -> None:
        self._paused = True
        if self.h2_call is not None:
            self.h2_call.pause()
        elif self.transport is not None:
            self.transport.pauseProducing()

    def resume(self) -> None:
        self._paused = False
        if self.h2_call is not None:
            self.h2_call.resume()
        elif self.transport is not None:
            self.transport.resumeProducing()

    def cancel(self) -> None:
        self.sink = None
        if self.h2_call is not None:
            self.h2_call.cancel()
            return
        if self.connecting is not None:
            connecting, self.connecting = self.connecting, None
            connecting.cancel()
        elif self.transport is not None:
            self.transport.abortConnection()


class _Http11Body:
    """The body of an HTTP/1.1 answer, framed as its headers say, into a sink."""

    def __init__(self, sink: ResponseSink, headers: list[tuple[bytes, bytes]], bodiless: bool,
                 ended: Callable[[], None]) -> None:
        self.sink = sink
        self.ended = ended
        self.done = False
        names = {n.lower(): v for n, v in headers}
        self.chunked = b"chunked" in names.get(b"transfer-encoding", b"").lower()
        length = names.get(b"content-length")
        self.left: int | None = None if self.chunked or length is None else int(length)
        self._buffer = b""
        self._chunk_left = 0
        if bodiless or self.left == 0:
            self._end()

    def feed(self, data: bytes) -> None:
        if self.done or not data:
            return
        if self.chunked:
            self._buffer += data
            self._chunks()
        elif self.left is None:
            self.sink.data(data)
        else:
            piece = data[:self.left]
            self.left -= len(piece)
            if piece:
                self.sink.data(piece)
            if self.left == 0:
                self._end()

    def _chunks(self) -> None:
        while not self.done:
            if self._chunk_left:
                piece = self._buffer[:self._chunk_left]
                if not piece:
                    return
                self._buffer = self._buffer[len(piece):]
                self._chunk_left -= len(piece)
                self.sink.data(piece)
                continue
            line_end = self._buffer.find(b"\r\n")
            if line_end < 0:
                return
            line = self._buffer[:line_end].split(b";")[0].strip()
            if not line:  # the CRLF after a chunk's data
                self._buffer = self._buffer[line_end + 2:]
                continue
            size = int(line, 16)
            if size == 0:
                self._end()  # trailers, if any, are not relayed
                return
            self._buffer = self._buffer[line_end + 2:]
            self._chunk_left = size

    def closed(self) -> None:
        """The connection ended: the end of a body framed by it, else a cut-off answer."""
        if self.done:
            return
        if self.left is None and not self.chunked:
            self._end()
        else:
            self.done = True
            self.sink.failed("reset")

    def _end(self) -> None:
        self.done = True
        self.sink.end()
        self.ended()


def _parse_head(head: bytes) -> tuple[int, list[tuple[bytes, bytes]]]:
    lines = head.split(b"\r\n")
    parts = lines[0].split(b" ", 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1."):
        raise ValueError("not an HTTP/1.x status line")
    status = int(parts[1])
    headers = []
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if not sep:
            raise ValueError("a header line without a colon")
        headers.append((name.strip().lower(), value.strip()))
    return status, headers


class H2cUpgrades:
    """The upgraded connections to one cleartext upstream: a request takes one with room, else
    opens a new connection offering the upgrade (one at a time; meanwhile requests go over
    HTTP/1.1)."""

    def __init__(self, connect: Callable[[Factory[Any]], Deferred[Any]],
                 declined: Callable[[], None], max_connections: int = 4) -> None:
        self._connect = connect
        self._declined = declined
        self.max_connections = max_connections
        self.connections: list[H2Upstream] = []
        self.attempting = False

    def with_room(self) -> H2Upstream | None:
        return next((c for c in self.connections if c.has_room()), None)

    def can_attempt(self) -> bool:
        return not self.attempting and len(self.connections) < self.max_connections

    def attempt(self, request: UpstreamRequest, sink: ResponseSink,
                failed: Callable[[Failure], None]) -> H2cAttempt:
        """A new connection carrying `request` with the upgrade offer."""
        self.attempting = True
        attempt = H2cAttempt(request, sink, self._upgraded, self._declined_here, self._lost,
                             self._gone)
        factory: Factory[Any] = Factory.forProtocol(lambda: attempt)
        factory.noisy = False
        connecting = self._connect(factory)
        attempt.connecting = connecting

        def not_connected(reason: Failure) -> None:
            self.attempting = False
            attempt.connecting = None
            if attempt.sink is not None:
                failed(reason)

        connecting.addErrback(not_connected)
        return attempt

    def _upgraded(self, upstream: H2Upstream) -> None:
        self.attempting = False
        self.connections.append(upstream)

    def _declined_here(self) -> None:
        self.attempting = False
        self._declined()

    def _gone(self) -> None:
        """The attempt's connection closed before any upgrade."""
        self.attempting = False

    def _lost(self, upstream: H2Upstream) -> None:
        if upstream in self.connections:
            self.connections.remove(upstream)

    def close(self) -> None:
        for connection in list(self.connections):
            connection.abort()
