"""Which HTTP a connection speaks: ALPN over TLS, the HTTP/2 preface in cleartext (docs/config-reference.md).

Over TLS, `SwitchingChannelProtocol` is the Site's protocol: HTTP/1.1 until TLS says ALPN chose
`h2`, then our HTTP/2 connection (Twisted's own switch always builds its own class).

Twisted's `Site` has no cleartext HTTP/2. A prior-knowledge h2c client opens with the fixed
preface `PRI * HTTP/2.0\\r\\n\\r\\nSM\\r\\n\\r\\n`, which no HTTP/1.1 request starts with, so
`PrefaceSniffer` looks at the first bytes, builds our HTTP/2 connection or the site's HTTP/1.1
channel, hands it the connection and replays the bytes. Most requests are decided on their
first byte (`G` is not `P`).

Both build the same HTTP/2 connection, `h2_connection`: `LimitedH2Connection` (h2_limits.py),
the http binding's limits over our batching data path (h2_sending.py).

`options.versions` limits what is served: an HTTP/2-only binding answers HTTP/1.1 with `505`,
and a binding without `h2` treats the preface as the bad HTTP/1.1 request it then is. Over TLS,
the tls binding only negotiates protocols its exit lists in `versions` (it reads
`server.HttpServer.versions`).

(Upgrade: h2c from HTTP/1.1 is not offered: browsers never use it, and curl only with
`--http2` on http://, where it falls back to HTTP/1.1 cleanly.)

The sessions a connection opened before HTTP (a tls server's client certificate,
`ConnectionInfo.sessions`) are kept on the HTTP/1.1 channel or the HTTP/2 connection it gets,
where `connection_sessions` finds them for each of its requests.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any, cast

from twisted.internet.interfaces import IProtocol
from twisted.internet.protocol import Protocol
from twisted.python.failure import Failure
from twisted.web import http

from ssekd.bindings.http.h2_limits import LimitedH2Connection
from ssekd.spi.connection import ConnectionInfo
from ssekd.spi.guard import Session

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

_VERSION_NOT_SUPPORTED = (b"HTTP/1.1 505 HTTP Version Not Supported\r\n"
                          b"Connection: close\r\nContent-Length: 0\r\n\r\n")


def protocol_for(site: Any, versions: Collection[str], conn: ConnectionInfo) -> IProtocol | None:
    """The protocol for a connection the http binding accepts (its `build_protocol`): `site`
    serves it, in one of `versions`."""
    if conn.secure:
        # ALPN has spoken; the tls binding negotiated only what `versions` allows.
        if conn.alpn == "h2" or "http/1.1" in versions:
            protocol = site.buildProtocol(conn.peer)
            _keep_sessions(getattr(protocol, "_channel", None), conn.sessions)
            return cast(IProtocol, protocol)
        return cast(IProtocol, _Refuse())
    return cast(IProtocol, PrefaceSniffer(site, versions, conn))


#: The attribute of a channel (HTTP/1.1) or connection (HTTP/2) holding its connection's sessions.
_SESSIONS = "ssekd_connection_sessions"


def _keep_sessions(channel: Any, sessions: Mapping[str, Session]) -> None:
    if channel is not None and sessions:
        setattr(channel, _SESSIONS, sessions)


def connection_sessions(request: Any) -> Mapping[str, Session]:
    """The sessions the connection `request` came on opened before HTTP (module docstring):
    on HTTP/1.1 its channel holds them, on HTTP/2 its stream's connection."""
    channel = getattr(request, "channel", None)
    found = getattr(channel, _SESSIONS, None)
    if found is None:
        found = getattr(getattr(channel, "_conn", None), _SESSIONS, None)
    return cast(Mapping[str, Session], found or {})


def h2_connection(site: Any) -> LimitedH2Connection:
    """The HTTP/2 connection for `site`, after ALPN over TLS or the h2c preface: set up as
    Twisted's ALPN switch sets one up, on the site's reactor, with the http binding's limits and
    routes when the site is its `HttpSite` (any Twisted Site works)."""
    h2 = LimitedH2Connection(site.reactor, getattr(site, "limits", None),
                             getattr(site, "root", None))
    # Twisted's attributes for these are untyped (set by its factories), hence Any
    wired: Any = h2
    wired.site = site
    wired.factory = site
    wired.requestFactory = site.requestFactory
    wired.timeOut = site.timeOut
    wired.callLater = site.reactor.callLater
    return h2


class SwitchingChannelProtocol(http._GenericHTTPChannelProtocol):
    """Twisted's HTTP/1.1-or-HTTP/2 proxy protocol, switching to our `LimitedH2Connection`.

    Twisted's switch builds the module-global `H2Connection`; this one makes the same moves
    (release the transport's producer slot, stop the HTTP/1.1 timeout, connect the HTTP/2
    connection, register it as the transport's producer) with our class, before the base class
    sees the data and finds the protocol already decided.
    """

    def dataReceived(self, data: bytes) -> None:
        if self._negotiatedProtocol is None:
            old: Any = self._channel
            if getattr(old.transport, "negotiatedProtocol", None) == b"h2":
                network_producer = old._networkProducer
                network_producer.unregisterProducer()
                old.setTimeout(None)
                h2: Any = h2_connection(self._site)
                _keep_sessions(h2, getattr(old, _SESSIONS, {}))
                h2.requestFactory = self._requestFactory
                h2.factory = self._factory
                h2.timeOut = self._timeOut
                if self._callLater is not None:
                    h2.callLater = self._callLater
                self._channel = h2
                h2.makeConnection(old.transport)
                network_producer.registerProducer(h2, True)
                self._negotiatedProtocol = b"h2"  # type: ignore[assignment]
        super().dataReceived(data)


class PrefaceSniffer(Protocol):
    """Buffers a cleartext connection's first bytes until they tell HTTP/2 from HTTP/1.1."""

    def __init__(self, site: Any, versions: Collection[str], conn: ConnectionInfo) -> None:
        self.site = site
        self.versions = versions
        self.conn = conn
        self.inner: Any = None
        self._buffer = b""
        self._deadline: Any = None

    def connectionMade(self) -> None:
        # The chosen protocol brings its own timeouts; until then a silent client must not hold
        # the socket for ever.
        site = self.site
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
        versions, site = self.versions, self.site
        if head == PREFACE and "h2" in versions:
            h2 = h2_connection(site)
            _keep_sessions(h2, self.conn.sessions)
            self.inner = h2
            h2.makeConnection(self.transport)
            # The transport pauses HTTP/2 (all its streams) when the socket backs up.
            transport: Any = self.transport
            transport.registerProducer(h2, True)
        elif "http/1.1" in versions:
            self.inner = site.buildProtocol(self.conn.peer)
            _keep_sessions(getattr(self.inner, "_channel", None), self.conn.sessions)
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
