"""The roles of the connection layers: the listener that owns sockets, the stream bindings that
take over an accepted connection (tls, http server), and the connectors that open outbound
ones (tcp client, tls client).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

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
