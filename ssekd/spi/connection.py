"""The roles of the connection layers: the listener that owns sockets, the stream bindings that
take over an accepted connection (tls, http server), and the connectors that open outbound
ones (tcp client, tls client); for QUIC, the datagram listener that owns a UDP socket (quic
server) and the binding that speaks HTTP/3 over the connections it accepts (http server).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from twisted.internet.interfaces import IAddress, IProtocol, IStreamClientEndpoint

from ssekd.spi.guard import Session


class ConnectionFactory(Protocol):
    def buildProtocol(self, addr: IAddress) -> IProtocol | None: ...


@dataclass(frozen=True)
class ListenSpec:
    """A socket a listener binding wants: `factory.buildProtocol` is called per connection."""

    host: str
    port: int
    factory: ConnectionFactory


@runtime_checkable
class ListenerBinding(Protocol):
    """A binding that owns sockets; the engine opens what it asks for."""

    def listen_specs(self) -> list[ListenSpec]: ...


@dataclass(frozen=True)
class ConnectionInfo:
    """What the outer layers know about an accepted connection, for routing inside."""

    local: IAddress
    peer: IAddress
    secure: bool = False
    server_name: str | None = None  # TLS SNI
    alpn: str | None = None  # negotiated ALPN protocol
    #: guard name -> the session the connection opened (a tls server's `authorization`: the
    #: client certificate's), for the routes of the layers inside, as a request's token's is.
    sessions: Mapping[str, Session] = field(default_factory=dict)


@runtime_checkable
class StreamBinding(Protocol):
    """Takes over an accepted connection (tls, http server)."""

    @property
    def versions(self) -> Collection[str] | None:
        """The ALPN protocols it speaks, or None when it takes any (tls offers only these)."""

    def build_protocol(self, conn: ConnectionInfo) -> IProtocol | None:
        """The protocol for this connection, or None to close it."""


@runtime_checkable
class Connector(Protocol):
    """Where and how an outbound connection is made (tcp client, tls client)."""

    @property
    def address(self) -> tuple[str, int] | None:
        """The (host, port) it connects to (a tcp client's `options.host` and `port`), or None
        when the binding using it says where (a kafka client's `servers`)."""

    @property
    def secure(self) -> bool:
        """Whether connections are wrapped in TLS (a tls client in front of the tcp client)."""

    def endpoint(self) -> IStreamClientEndpoint:
        """A Twisted `IStreamClientEndpoint` to `address`; connecting never blocks the reactor.
        Raises `ValueError` when there is no `address`."""


@runtime_checkable
class NegotiatingConnector(Connector, Protocol):
    """A connector that offers protocols by ALPN (tls client): the http client asks it for
    connections that offer fewer (its HTTP/1.1 ones never offer `h2`)."""

    @property
    def alpn(self) -> tuple[str, ...]:
        """The protocols its connections offer (`options.alpn`)."""

    def endpoint_offering(self, protocols: Sequence[str]) -> IStreamClientEndpoint:
        """`endpoint()`, but offering `protocols` (none: no ALPN)."""


# -- QUIC ------------------------------------------------------------------------------------

#: A UDP peer: (host, port), as Twisted's datagram protocols see it.
Peer = tuple[str, int]


class DatagramReceiver(Protocol):
    """What a datagram listener puts behind one UDP socket. The engine owns the socket (kept
    across reloads, shared by workers) and hands every datagram to the receiver of the current
    config, except those a receiver of an earlier config still `claims`: a reload must not cut
    the QUIC connections a rebuilt quic server holds, since their state lives in it."""

    def start(self, send: Callable[[bytes, Peer], None], shard: tuple[int, int]) -> None:
        """Called once the socket is open: `send` writes one datagram to a peer. `shard` is
        (index, count): workers share the port, and the kernel hands this socket the datagrams
        whose destination connection id's first byte modulo `count` is `index`
        (`ssekd.workers.sockets.steering_program`); (0, 1) when the socket is this process's
        alone."""

    def datagram_received(self, data: bytes, peer: Peer) -> None: ...

    def claims(self, data: bytes) -> bool:
        """Whether `data` belongs to a connection this receiver holds (its destination
        connection id is one of them); asked of a receiver a reload replaced."""

    def retire(self) -> None:
        """A reload replaced this receiver: it takes no new connection; its own go on until
        their clients leave (`idle` then turns True)."""

    def stop(self) -> None:
        """The socket closes (the daemon stops, or a reload dropped the port): end every
        connection now."""

    @property
    def idle(self) -> bool:
        """Holds no connection: a retired receiver that is idle is dropped."""


@dataclass(frozen=True)
class DatagramSpec:
    """A UDP socket a datagram listener wants, and what receives its datagrams."""

    host: str
    port: int
    receiver: DatagramReceiver


@runtime_checkable
class DatagramListenerBinding(Protocol):
    """A binding that owns UDP sockets (quic server); the engine opens what it asks for."""

    def datagram_specs(self) -> list[DatagramSpec]: ...


class QuicTransport(Protocol):
    """One QUIC connection as a binding inside sees it: the aioquic connection to act on, and
    the calls that make what it did go out (the quic server owns the socket and the timers)."""

    @property
    def quic(self) -> Any:
        """The `aioquic.quic.connection.QuicConnection` (an untyped library)."""

    def transmit(self) -> None:
        """Send what the connection has to send, soon (once per reactor turn) and re-arm its
        timer: called after anything that queued stream data, a reset or a close."""

    def unsent(self) -> int:
        """Response bytes queued on the connection and not yet acknowledged by the client."""

    def close(self, error_code: int, reason: str) -> None:
        """Close the whole connection (CONNECTION_CLOSE with an application error)."""


class QuicSession(Protocol):
    """What speaks an application protocol (HTTP/3) over one QUIC connection."""

    def quic_event_received(self, event: Any) -> None:
        """Each `aioquic.quic.events` event of the connection, in order."""

    def sent(self) -> None:
        """Some of what was queued went out or was acknowledged: room for paused producers."""

    def going_away(self) -> None:
        """The daemon is draining: take no new request (HTTP/3 GOAWAY), finish the rest."""

    def connection_lost(self, reason: str) -> None:
        """The connection is over (closed by either side, timed out): end every request."""


@runtime_checkable
class QuicSessionBinding(Protocol):
    """Takes over QUIC connections a quic server accepted (the http server: HTTP/3)."""

    def quic_session(self, conn: ConnectionInfo, transport: QuicTransport) -> QuicSession:
        """The session for one connection, whose handshake negotiated `conn.alpn`."""
