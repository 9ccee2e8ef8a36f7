"""Writing the body of a long-lived response (an event stream): framing, the eager write, the cut.

An exit that streams (the sse binding) hands the http binding its body bytes and nothing else:
`start_stream` sends the response's headers with the first bytes and returns the writer for the
rest, chosen by what the connection speaks. This module is the only one that reaches past
Twisted's `Request` into the connection for it.

* HTTP/1.1 chunked (`ChunkedWriter`): each write goes straight to the connection's transport as
  one pre-framed chunk instead of through `Request.write`, which re-checks the response state
  and hands the transport four pieces per call: at a thousand streams per batch that per-write
  cost was most of the fan-out. The chunk is framed once for all the streams a batch goes to
  (the cache hands the *same* bytes object to every stream of a group, one after the other).
  The transport is the one `Request.write` would reach, so its buffer still pauses the stream's
  producer (registered with the request) as before.
  A group's batch goes to all its HTTP/1.1 streams in one loop (`write_each`, fed by the sse
  binding's `SseStream.write_each`), each stream's bytes counted on its writer and added to
  the request's `sentLength` as the stream ends (`settle`).
* Anything else (`RequestWriter`): `Request.write`. On HTTP/2 that queues the bytes on our
  `BatchingH2Connection`, which frames them and pauses the stream's producer by flow control.

Eager writes. Twisted's `transport.write` always queues: it asks the reactor to watch the socket
for writability, sends on the next reactor turn, then stops watching - two `epoll_ctl` calls, a
`doWrite` with its logging context and the `send` for every write. Profiled at 1,000 streams x
100 events/s that bookkeeping was about a third of the reactor's time, and it delays every write
by one reactor turn. A stream at the tail has almost always sent everything, so for it the same
bytes go out with one `send` right away (`send_now`). Whatever the socket does not take, and
any write while something is still queued or the connection is closing, goes through
`transport.write` as before: ordering, Twisted's buffer and its producer pausing are unchanged.

Coalescing does not suffer: what arrives from Kafka while the reactor is busy sending is handed
over as one batch when it is free again (`ssekd.bindings.kafka.inbox`), so a busy reactor sends
fewer, larger writes, and an idle one sends each batch the moment it arrives.

A connection written this way has Nagle's algorithm off (`TCP_NODELAY`, as asyncio sets on
every TCP transport). Only plain TCP transports (`twisted.internet.tcp.Connection` without TLS
started on it) qualify; TLS and test transports keep their own `write`. The attributes read
here are those of Twisted's `FileDescriptor` buffer (listed in
tests/test_twisted_private_names.py); if a release lacked them, `eager` says no and the stream
uses `transport.write` rather than guess.

The cut (`reset`): a stream ended early (its credentials expired, or its client read nothing
for too long) must not get one more byte: HTTP/2 resets the stream (RST_STREAM), HTTP/1.1
aborts the connection, which carries only this response.
"""

from __future__ import annotations

import socket
from collections.abc import Iterable
from typing import Any, Protocol

from twisted.internet import tcp
from twisted.web.server import Request

from ssekd.bindings.proxy_protocol import socket_transport

_BUFFER_ATTRIBUTES = ("dataBuffer", "offset", "_tempDataLen", "connected", "disconnecting",
                      "_writeDisconnected", "socket")


class StreamWriter(Protocol):
    """The body of one long-lived response, after its headers (`start_stream`)."""

    def write(self, data: bytes) -> None:
        """Send `data` (never empty: an empty chunk would end an HTTP/1.1 response)."""

    def reset(self) -> None:
        """Cut the response short, dropping whatever is still queued (module docstring)."""

    def settle(self) -> None:
        """Add the body bytes written to the request's `sentLength` (the response is ending:
        `ChunkedWriter` says why the count waits until then)."""


def start_stream(request: Request, first: bytes, shared: bool = True) -> StreamWriter:
    """Send `request`'s response headers with `first` (Twisted decides on chunking at the
    first write) and return the writer for the rest of the body. `shared`: each data written
    is the same bytes object for many streams in a row, so an HTTP/1.1 chunk is framed once
    for all of them; False for a stream's own bytes (gzip), which would only evict the shared
    one."""
    req: Any = request  # twisted.web is untyped for mypy
    req.write(first)
    transport: Any = getattr(getattr(req, "channel", None), "transport", None)
    if getattr(req, "chunked", False) and transport is not None:
        # behind a PROXY protocol header the connection's transport only relabels addresses:
        # the chunks go to the socket under it
        transport = socket_transport(transport)
        return (ChunkedWriter if shared else OwnChunkedWriter)(req, transport, eager(transport))
    return RequestWriter(req)


#: The last data framed, and its chunk: at the tail the same bytes go to a whole group of streams
#: in a row, so the framing (a copy of the data) happens once per group batch. One for the
#: process: there is one reactor thread. Held by an instance, not set on a class: setting an
#: attribute of a class invalidates the interpreter's attribute caches for its instances, once
#: per batch on the hottest path there is.
class _LastFramed:
    __slots__ = ("pair",)

    def __init__(self) -> None:
        self.pair: tuple[bytes, bytes] = (b"", b"")


_FRAMED = _LastFramed()


def http_chunk(data: bytes) -> bytes:
    """`data` as one HTTP/1.1 chunk (size line, data, CRLF), one bytes object to send as is."""
    return b"%x\r\n%b\r\n" % (len(data), data)


class ChunkedWriter:
    """HTTP/1.1 chunked: chunks straight to the connection's transport (module docstring), each
    data framed once for all the streams it goes to in a row. One small slotted object per
    stream: 10,000 idle streams hold 10,000 of them."""

    __slots__ = ("direct", "eager", "request", "sent", "transport")

    def __init__(self, request: Any, transport: Any, eager: bool) -> None:
        self.request = request
        self.transport = transport
        #: Written with `send_now` (a plain TCP connection).
        self.eager = eager
        #: The connection's socket while `write_each` knows that Twisted holds nothing for it
        #: (its last send took everything, and nothing else writes to the connection while
        #: the stream is open: the headers went before, the end comes after), else None. Then
        #: a stream's send skips the look into the transport's buffer, five attributes of its
        #: dict, which at a thousand streams a batch were out of the CPU's caches every time.
        self.direct: Any = None
        #: Body bytes written and not yet added to the request's `sentLength` (what
        #: `Request.write` counts, read when the response is over: the http binding's response
        #: size). Kept here until `settle`, which the stream calls as it ends, before anything
        #: reads the request's count: the request is an object of its own with a dict, and
        #: adding to it on each write of a batch fanned out to a thousand streams found it out
        #: of the CPU's caches every time (a tenth of the reactor's samples at 1,000 x 250/s).
        self.sent = 0

    def write(self, data: bytes) -> None:
        self.sent += len(data)
        self.direct = None  # send_now may leave bytes with Twisted: look again next time
        last, chunk = _FRAMED.pair
        if data is not last:
            chunk = http_chunk(data)
            _FRAMED.pair = (data, chunk)
        if self.eager:
            send_now(self.transport, chunk)
        else:
            self.transport.write(chunk)

    def reset(self) -> None:
        reset(self.request)

    def settle(self) -> None:
        self.request.sentLength += self.sent
        self.sent = 0


def write_each(writers: Iterable[ChunkedWriter], data: bytes) -> None:
    """`writer.write(data)` for each of `writers` (shared, not `OwnChunkedWriter`s), in order,
    in one loop: the chunk framed once, `send_now` inline (`ssekd.spi.stream.write_each` says
    why; a call per stream was a good part of the Python a stream's write cost). Each writer is
    sent to as it comes: `writers` may be a generator that does the stream's own counting."""
    size = len(data)
    last, chunk = _FRAMED.pair
    if data is not last:
        chunk = http_chunk(data)
        _FRAMED.pair = (data, chunk)
    whole = len(chunk)
    for w in writers:
        w.sent += size
        sock = w.direct
        if sock is None:
            t = w.transport
            # send_now's test, in the order that fails soonest for a stream at the tail
            if (not w.eager or t._tempDataLen or t.offset != len(t.dataBuffer)
                    or not t.connected or t.disconnecting or t._writeDisconnected):
                t.write(chunk)
                continue
            sock = t.socket
        try:
            sent = sock.send(chunk)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError:
            w.direct = None
            w.transport.write(chunk)  # as send_now
            continue
        if sent < whole:
            w.direct = None
            w.transport.write(chunk[sent:])
        else:
            w.direct = sock


class OwnChunkedWriter(ChunkedWriter):
    """`ChunkedWriter` for a stream whose bytes are its own (gzip): framed for it alone, so
    they never evict the chunk the streams without gzip share."""

    __slots__ = ()

    def write(self, data: bytes) -> None:
        self.sent += len(data)
        chunk = http_chunk(data)
        if self.eager:
            send_now(self.transport, chunk)
        else:
            self.transport.write(chunk)


class RequestWriter:
    """HTTP/2, HTTP/1.0 and any other request: `Request.write` frames and queues."""

    __slots__ = ("request",)

    def __init__(self, request: Any) -> None:
        self.request = request

    def write(self, data: bytes) -> None:
        self.request.write(data)

    def reset(self) -> None:
        reset(self.request)

    def settle(self) -> None:
        pass  # Request.write counted each write


def reset(request: Any) -> None:
    """Cut `request`'s response (module docstring): HTTP/1.1 requests have the connection's
    transport; an HTTP/2 request has none, and its channel (an `H2Stream`) resets the stream."""
    transport = getattr(request, "transport", None)
    if transport is None:
        channel: Any = getattr(request, "channel", None)
        if hasattr(channel, "abortConnection"):
            channel.abortConnection()  # H2Stream: RST_STREAM for this stream only
            return
        transport = getattr(channel, "transport", None)
    if transport is not None:  # None: the connection is already gone
        transport.abortConnection()


def eager(transport: Any) -> bool:
    """Whether `send_now` may write to `transport` (a plain TCP connection); turns Nagle off on
    it if so."""
    if (not isinstance(transport, tcp.Connection) or getattr(transport, "TLS", False)
            or not all(hasattr(transport, a) for a in _BUFFER_ATTRIBUTES)):
        return False
    if transport.socket.family in (socket.AF_INET, socket.AF_INET6):
        # Nagle's algorithm would hold a small write back while the previous one is
        # unacknowledged, and a client's delayed ACK can make that tens of milliseconds; writes
        # here are whole batches already (coalesced before they reach the stream)
        transport.setTcpNoDelay(True)
    return True


def send_now(t: Any, data: bytes) -> None:
    """Write `data` to an `eager` transport: at once when nothing is queued for it."""
    if (t._tempDataLen or t.offset != len(t.dataBuffer) or not t.connected
            or t.disconnecting or t._writeDisconnected):
        t.write(data)
        return
    try:
        sent = t.socket.send(data)
    except (BlockingIOError, InterruptedError):
        sent = 0
    except OSError:
        # let Twisted meet the same error on its own write and close the connection
        t.write(data)
        return
    if sent < len(data):
        t.write(data[sent:])
