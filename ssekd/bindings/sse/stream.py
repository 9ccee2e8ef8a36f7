"""One open text/event-stream response: writes, keepalive, backpressure, ending.

`SseStream` sits between a Twisted request and whatever produces events for it (an
`StreamHandle`, e.g. a kafka subscription). It registers itself as the request's streaming
producer, so when the client's transport buffer fills (HTTP/1.1 TCP, or an HTTP/2 flow-control
window) Twisted pauses it and it pauses its source: nothing more is buffered for that client.

It writes event bytes only: the http binding's `StreamWriter` (`start_stream`) frames them for
the connection - one pre-framed HTTP/1.1 chunk straight to the transport, sent at once when
nothing is queued for it, or HTTP/2 DATA - and cuts the response when it must end early.

A stream opened with credentials holds their `Lease` (docs/protocol.md): `challenge` seconds before it
expires the stream gets `event:challenge`; a renewal moves both deadlines; at the expiry itself
the stream is cut - HTTP/2 resets the stream (RST_STREAM), HTTP/1.1 aborts the connection - and
nothing more is written to it, not even what was still queued.

A stream paused for `max_lag` seconds (its client reads nothing) is ended by resetting it - the
HTTP/2 stream, or the HTTP/1.1 connection, which carries only this response: what is buffered
for a client that does not read would otherwise stay for as long as it keeps the socket open.
EventSource treats the reset like any dropped connection and reconnects with its last id.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

from twisted.internet.error import ConnectionDone, ConnectionLost
from twisted.internet.interfaces import IPushProducer
from twisted.python.failure import Failure
from twisted.web.http_headers import Headers
from twisted.web.server import Request
from zope.interface import implementer

from ssekd.bindings.http.request_end import when_over
from ssekd.bindings.http.stream_writer import (
    ChunkedWriter,
    RequestWriter,
    StreamWriter,
    start_stream,
    write_each,
)
from ssekd.bindings.sse.compression import GzipWriter
from ssekd.bindings.sse.keepalive import Entry, KeepaliveTimers
from ssekd.bindings.sse.stats import SseStats
from ssekd.bindings.sse.wire import CHALLENGE, KEEPALIVE
from ssekd.spi.guard import Lease
from ssekd.spi.stream import EventBlock, StreamHandle
from ssekd.telemetry.delivery import Deliveries
from ssekd.telemetry.metrics import Counter


class StreamOwner(Protocol):
    """What a stream needs of its sse server (`server.SseServer`)."""

    clock: Any  # an IReactorTime
    max_idle: float
    #: every stream's keepalive, on one reactor timer
    keepalives: KeepaliveTimers
    stats: SseStats
    deliveries: Deliveries
    #: seconds a stream may stay paused before it is ended
    max_lag: float
    #: open streams, insertion-ordered; a stream removes itself when it ends
    streams: dict[SseStream, None]

    def stalled(self, stream: SseStream, paused: float) -> None:
        """`stream` is being ended for staying paused `paused` seconds (for its events)."""

    #: The last data counted by `events_in`, and its count.
    counted: tuple[bytes, int]
    #: Bytes written to gzip streams before compression.
    gzip_input: Counter

    def events_in(self, data: bytes) -> int:
        """The events `data` holds (counted once per batch for every stream it goes to)."""

    def ended(self, stream: SseStream, why: str) -> None:
        """`stream` ended, for `why` (`client`, `drain`, `expired`, `limit`, `error`,
        `upstream`): the stream-end event."""


@implementer(IPushProducer)
class SseStream:
    """The `EventSink` a stream source writes SSE bytes to."""

    __slots__ = (
        "__weakref__",
        "_challenge_call",
        "_delivered",
        "_expiry_call",
        "_gzip",
        "_lease",
        "_stall",
        "_keepalive",
        "_writer",
        "done",
        "events",
        "handle",
        "last_write",
        "opened",
        "request",
        "route",
        "server",
        "why",
        "written",
    )

    def __init__(self, server: StreamOwner, request: Request, lease: Lease | None = None) -> None:
        self.server = server
        # Twisted's Request and IReactorTime are untyped for mypy: keep them as Any here
        self.request: Any = request
        self.handle: StreamHandle | None = None
        self.done = False
        self.opened = self.last_write = server.clock.seconds()
        self.written = 0
        #: Events written (what the stream-end event reports).
        self.events = 0
        #: The source's route, for the stream-end event and the per-route count of deliveries.
        self.route: str | None = None
        self._delivered: Counter | None = None
        #: Why the stream ended, once it has (see `StreamOwner.ended`).
        self.why: str | None = None
        #: This stream's entry in the binding's keepalive timers (`keepalive.py`), once armed.
        self._keepalive: Entry | None = None
        #: Ends the stream if it stays paused for max-lag (armed while paused).
        self._stall: Any = None
        #: Where the body goes: `Request.write` until the headers are sent, then the writer
        #: the http binding chose for the connection (`start_stream`).
        self._writer: StreamWriter = RequestWriter(request)
        self._lease = lease
        self._challenge_call: Any = None
        self._expiry_call: Any = None
        #: The stream's compressor, when its response is gzip (`compression`).
        self._gzip: GzipWriter | None = None

    def start(self, handle: StreamHandle, first: bytes, gzip: GzipWriter | None = None) -> None:
        """Send the headers (and `retry:`), become the request's producer, arm the keepalive.
        With `gzip`, every write from here on is compressed and flushed (the response says
        `Content-Encoding: gzip`)."""
        self.handle = handle
        self.route = getattr(handle, "route", None)
        self._delivered = getattr(handle, "delivered", None)
        self._gzip = gzip
        self.request.registerProducer(self, True)
        when_over(self.request, self)
        if gzip is not None:  # the gzip header goes with the response's headers
            first = gzip.write(first)
        self._writer = start_stream(self.request, first, shared=gzip is None)
        _forget_headers(self.request)
        self.last_write = self.server.clock.seconds()
        self._arm(self.server.max_idle)
        if self._lease is not None:
            self._lease.hold(self._renewed)
            self._arm_lease()

    # -- EventSink ---------------------------------------------------------------------------

    def write(self, data: bytes) -> None:
        if self.done or not data:  # an empty chunk would end the response
            return
        server = self.server
        if type(data) is EventBlock:  # counted by its maker
            events = data.events
        else:
            last, events = server.counted  # the same data goes to a whole group in a row
            if data is not last:
                events = server.events_in(data)
        if events:
            self.events += events
            if self._delivered is not None:
                self._delivered.value += events
            deliveries = server.deliveries
            if deliveries.active:
                deliveries.wrote(data, events, server.stats.latency)
        self.last_write = server.clock.seconds()
        gzip = self._gzip
        if gzip is not None:
            server.gzip_input.value += len(data)
            data = gzip.write(data)  # this stream's own bytes: framed for it alone below
        self.written += len(data)
        server.stats.data_sent.value += len(data)
        self._writer.write(data)

    @staticmethod
    def write_each(sinks: list[Any], data: bytes) -> None:
        """`write(data)` to each of `sinks` in turn (`ssekd.spi.stream.write_each`, which says
        why). The streams of one server, not ended, without gzip and framed by a shared
        `ChunkedWriter` (HTTP/1.1) are counted as they come (`_counted_writers`) and sent to at
        once in one loop (`stream_writer.write_each`); any other sink (HTTP/2, gzip, another
        server's stream) gets its own `write` in its turn. What every such stream counts alike
        (the server's bytes sent, the delivery latency) is counted once for them all."""
        if not data:
            return
        server = sinks[0].server
        if type(data) is EventBlock:
            events = data.events
        else:
            last, events = server.counted
            if data is not last:
                events = server.events_in(data)
        tally = [0]
        write_each(_counted_writers(sinks, data, server, events, tally), data)
        counted = tally[0]
        if counted:
            if events:
                deliveries = server.deliveries
                if deliveries.active:
                    deliveries.wrote(data, events, server.stats.latency, counted)
            server.stats.data_sent.value += len(data) * counted

    def end(self, why: str = "upstream") -> None:
        """Finish the response with a 200 that ends: the browser reconnects with its last id.
        `why`: the source ended it (`upstream`), or the server stops (`drain`)."""
        if self.done:
            return
        gzip = self._gzip
        self._close(why)
        try:
            if gzip is not None:  # the gzip trailer: the client can tell the stream is whole
                self.request.write(gzip.finish())
            self.request.unregisterProducer()
            self.request.finish()
        except RuntimeError:  # the connection went away in the meantime
            pass

    # -- IPushProducer (called by Twisted) --------------------------------------------------

    def pauseProducing(self) -> None:
        if self.handle is not None and not self.done:
            self.server.stats.pauses.value += 1
            self.handle.pause()
            if self._stall is None:
                self._stall = self.server.clock.callLater(self.server.max_lag, self._stalled)

    def resumeProducing(self) -> None:
        if self.handle is not None and not self.done:
            self._cancel_stall()
            self.handle.resume()

    def stopProducing(self) -> None:
        self._close("client")

    # -- internals ---------------------------------------------------------------------------

    def describe(self) -> str:
        """The request, for events: method and path."""
        return f"{self.request.method.decode('latin-1')} {self.request.path.decode('latin-1')}"

    def request_over(self, request: Any, result: Any) -> None:
        """The response is over: finished by `end` (already closed), or the connection went
        away - the client's doing, unless it failed for another reason than a lost
        connection."""
        lost = not isinstance(result, Failure) or \
            result.check(ConnectionDone, ConnectionLost, ConnectionError)
        self._close("client" if lost else "error")

    def _cancel_stall(self) -> None:
        if self._stall is not None and self._stall.active():
            self._stall.cancel()
        self._stall = None

    def _stalled(self) -> None:
        """Paused for max-lag: close the source and reset the stream (module docstring)."""
        self._stall = None
        if self.done:
            return
        self.server.stalled(self, self.server.max_lag)
        self.server.stats.ended_by_limit("max-lag")
        self._close("limit")
        self._writer.reset()

    def _close(self, why: str) -> None:
        if self.done:
            return
        # before the request's end is told (finish, or the connection's loss: Twisted stops
        # the transport's producers, this stream among them, before the request hears of it)
        self._writer.settle()
        self.done = True
        self.why = why
        self.server.stats.closed(why in ("client", "error"))  # the connection went away
        if self._keepalive is not None:
            self.server.keepalives.disarm(self._keepalive)
            self._keepalive = None
        self._cancel_lease_timers()
        if self._lease is not None:
            self._lease.release()
        self._cancel_stall()
        if self.handle is not None:
            self.handle.close()
        self.server.streams.pop(self, None)
        self.server.ended(self, why)

    def _arm(self, delay: float) -> None:
        self._keepalive = self.server.keepalives.arm(self, delay)

    def keepalive_due(self) -> None:
        """Write `:` when idle for max-idle-time; writes in between just move the deadline
        (called by the binding's `KeepaliveTimers`)."""
        self._keepalive = None
        if self.done:
            return
        idle = self.server.clock.seconds() - self.last_write
        if idle >= self.server.max_idle:
            self.write(KEEPALIVE)
            idle = 0.0
        self._arm(self.server.max_idle - idle)

    # -- continuous authorization -----------------------------------------------------------

    def _arm_lease(self) -> None:
        """(Re)schedule the challenge and the end from the lease's expiry."""
        self._cancel_lease_timers()
        lease = self._lease
        expires_at = lease.expires_at if lease is not None else None
        if lease is None or expires_at is None:
            return
        clock = self.server.clock
        left = expires_at - clock.seconds()
        if lease.challenge > 0:
            self._challenge_call = clock.callLater(max(0.0, left - lease.challenge),
                                                   self._challenge)
        self._expiry_call = clock.callLater(max(0.0, left), self._expire)

    def _cancel_lease_timers(self) -> None:
        for call in (self._challenge_call, self._expiry_call):
            if call is not None and call.active():
                call.cancel()
        self._challenge_call = self._expiry_call = None

    def _renewed(self) -> None:
        if not self.done:
            self._arm_lease()

    def _challenge(self) -> None:
        self._challenge_call = None
        self.write(CHALLENGE)

    def _expire(self) -> None:
        """The credentials expired unrenewed: cut the stream, so not one more byte reaches the
        client (a finished 200 would first flush what is queued, and invite a reconnect)."""
        self._expiry_call = None
        if self.done:
            return
        self._close("expired")
        request = self.request
        try:
            request.unregisterProducer()
        except RuntimeError:
            pass
        self._writer.reset()


def _counted_writers(sinks: list[Any], data: bytes, server: StreamOwner, events: int,
                     tally: list[int]) -> Iterator[ChunkedWriter]:
    """For `SseStream.write_each`: the writer of each stream that takes the one loop, counted
    as `SseStream.write` counts (`tally[0]`: how many); any other sink written on its own. A
    generator, so that each stream is counted and sent to in a row: at a thousand streams
    a second loop over them found every stream's objects out of the CPU's caches again (the
    kernel's send had been through its own meanwhile), and that showed in the profile more
    than the loop itself."""
    size = len(data)
    now = server.clock.seconds()
    for s in sinks:
        writer = getattr(s, "_writer", None)
        if type(writer) is not ChunkedWriter or s.server is not server or s._gzip is not None:
            s.write(data)
            continue
        if s.done:
            continue
        if events:
            s.events += events
            delivered = s._delivered
            if delivered is not None:
                delivered.value += events
        s.last_write = now
        s.written += size
        tally[0] += 1
        yield writer


def _forget_headers(request: Any) -> None:
    """Drop the request's and the response's header tables, and the request's body, once the
    response has started.

    Everything that reads a stream's request headers (routing, CORS, credentials, the last
    event id, metrics) has read them by now, and the response's went out with the first write,
    but Twisted keeps both for the life of the request: about 1 KB per stream for the benchmark's
    bare client, more for a browser's dozen headers and cookies - an eighth of what an idle stream
    costs. They are public attributes of the request; empty tables take their place. So is
    `content`, the request's body (empty for a GET): a BytesIO Twisted would close at the end."""
    if getattr(request, "startedWriting", False):
        request.requestHeaders = Headers()
        request.responseHeaders = Headers()
        # the (empty) body a GET came with: Twisted keeps its BytesIO to the end of the request
        # and closes it only if it is still there, so None is what it expects of one gone
        content = getattr(request, "content", None)
        if content is not None:
            content.close()
            request.content = None
