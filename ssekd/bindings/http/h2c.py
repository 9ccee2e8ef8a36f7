"""Which HTTP a connection speaks: ALPN over TLS, the HTTP/2 preface in cleartext (docs/config-reference.md).

Twisted's `Site` already becomes HTTP/2 when TLS negotiated `h2`, but has no cleartext HTTP/2.
A prior-knowledge h2c client opens with the fixed preface `PRI * HTTP/2.0\\r\\n\\r\\nSM\\r\\n\\r\\n`,
which no HTTP/1.1 request starts with, so `PrefaceSniffer` looks at the first bytes, builds
our `BatchingH2Connection` (h2.py) or the site's HTTP/1.1 channel, hands it the connection and replays
the bytes. Most requests are decided on their first byte (`G` is not `P`).

`options.versions` limits what is served: an HTTP/2-only binding answers HTTP/1.1 with `505`,
and a binding without `h2` treats the preface as the bad HTTP/1.1 request it then is. Over TLS,
the tls binding only negotiates protocols its exit lists in `versions` (it reads
`HttpServer.versions`).

(Upgrade: h2c from HTTP/1.1 is not offered: browsers never use it, and curl only with
`--http2` on http://, where it falls back to HTTP/1.1 cleanly.)
"""

from __future__ import annotations

import typing
from collections.abc import Collection
from typing import Any, cast

from twisted.internet.interfaces import IProtocol
from twisted.internet.protocol import Protocol
from twisted.python.failure import Failure

from ssekd.bindings.http.h2 import BatchingH2Connection
from ssekd.bindings.http.h2 import h2_connection as _batching_h2_connection
from ssekd.spi.connection import ConnectionInfo


class HttpServer(typing.Protocol):
    """What the sniffer needs of the http binding (`server.HttpServer`)."""

    @property
    def versions(self) -> Collection[str]: ...

    @property
    def site(self) -> Any: ...

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

_VERSION_NOT_SUPPORTED = (b"HTTP/1.1 505 HTTP Version Not Supported\r\n"
                          b"Connection: close\r\nContent-Length: 0\r\n\r\n")


def protocol_for(server: HttpServer, conn: ConnectionInfo) -> IProtocol | None:
    """The protocol for a connection the http binding accepts (its `build_protocol`)."""
    if conn.secure:
        # ALPN has spoken; the tls binding negotiated only what `versions` allows.
        if conn.alpn == "h2" or "http/1.1" in server.versions:
            site: Any = server.site
            return cast(IProtocol, site.buildProtocol(conn.peer))
        return cast(IProtocol, _Refuse())
    return cast(IProtocol, PrefaceSniffer(server, conn))


def h2_connection(site: Any) -> BatchingH2Connection:
    """The same HTTP/2 connection class as after ALPN over TLS, on the site's reactor."""
    return _batching_h2_connection(site)


class PrefaceSniffer(Protocol):
    """Buffers a cleartext connection's first bytes until they tell HTTP/2 from HTTP/1.1."""

    def __init__(self, server: HttpServer, conn: ConnectionInfo) -> None:
        self.server = server
        self.conn = conn
        self.inner: Any = None
        self._buffer = b""
        self._deadline: Any = None

    def connectionMade(self) -> None:
        # The chosen protocol brings its own timeouts; until then a silent client must not hold
        # the socket for ever.
        site: Any = self.server.site
        if site.timeOut:
            self._deadline = site.reactor.callLater(site.timeOut, self._silent)

    def dataReceived(self, data: bytes) -> None:
        if self.inner is not None:
            self.inner.dataReceived(data)
            return
        self._buffer += data
        head = self._buffer[:len(PREFACE)]
        if PREFACE.startswith(head) and len(head) < len(PREFACE):
            return  # could still be the preface: wait for more
        buffered, self._buffer = self._buffer, b""
        self._disarm()
        versions = self.server.versions
        site: Any = self.server.site
        if head == PREFACE and "h2" in versions:
            h2 = h2_connection(site)
            self.inner = h2
            h2.makeConnection(self.transport)
            # The transport pauses HTTP/2 (all its streams) when the socket backs up.
            transport: Any = self.transport
            transport.registerProducer(h2, True)
        elif "http/1.1" in versions:
            self.inner = site.buildProtocol(self.conn.peer)
            self.inner.makeConnection(self.transport)
        else:
            self.inner = _Refuse()
            self.inner.makeConnection(self.transport)
        self.inner.dataReceived(buffered)

    def connectionLost(self, reason: Failure | None = None) -> None:
        self._disarm()
        if self.inner is not None:
            self.inner.connectionLost(reason)

    def _silent(self) -> None:
        self._deadline = None
        transport: Any = self.transport
        if transport is not None and self.inner is None:
            transport.loseConnection()

    def _disarm(self) -> None:
        if self._deadline is not None and self._deadline.active():
            self._deadline.cancel()
        self._deadline = None


class _Refuse(Protocol):
    """An HTTP/1.1 request to an HTTP/2-only binding: `505`, then close."""

    def dataReceived(self, data: bytes) -> None:
        transport: Any = self.transport
        if transport is not None and not getattr(self, "_answered", False):
            self._answered = True
            transport.write(_VERSION_NOT_SUPPORTED)
            transport.loseConnection()
