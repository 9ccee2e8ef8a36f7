"""The PROXY protocol on a tcp server (`options.proxy-protocol`, an ssekd addition).

A balancer in front of the daemons (HAProxy's `send-proxy-v2`, a cloud load balancer) opens
each connection with a short header that names the client it is relaying. Without it every
browser has the balancer's address, so `connections-per-ip` counts the balancer as one client
and refuses real users early, and nothing that reports an address can tell two users apart.

Trust goes by the address a connection comes from. One from a network that `from` lists must
start with a header, version 1 or 2; one that does not is closed (`ProxiedConnection`). One from
anywhere else that starts with a header is closed too (`HeaderRefusingConnection`): otherwise
any client could claim any address. Everything after the header sees the client's address:
routing by `cidr`, the connection limits, `getPeer()` below (the http binding's requests, the
tls binding's events, the JWT guard's renewals by client).

So `from` must name the balancers only. A network in it that holds every address (`0.0.0.0/0`,
`::/0`: `covers_everyone`) lets every peer forge its address; it is accepted, since that is what
the config says, but never silently: the tcp binding's build reports it as an event, which the
daemon prints at start and `ssekd check` as a `warning:`.

The headers are parsed by Twisted's own parsers (`twisted.protocols.haproxy`). Twisted's
wrapper around them is not used: it builds the protocol inside as the connection opens, before
the header has said which client it is, when routing and the per-address limits need that
address; and it closes a connection whose first read holds less than 16 bytes of a version 2
header, which a header split over two segments does.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from twisted.internet.address import IPv4Address, IPv6Address
from twisted.internet.interfaces import IAddress, IDelayedCall, IProtocol, ITransport
from twisted.internet.protocol import Protocol, connectionDone
from twisted.protocols.haproxy._exceptions import InvalidProxyHeader
from twisted.protocols.haproxy._v1parser import V1Parser
from twisted.protocols.haproxy._v2parser import V2Parser
from twisted.protocols.policies import ProtocolWrapper
from twisted.python.failure import Failure
from zope.interface import directlyProvides, providedBy

from ssekd.bindings.connection_limits import CountedConnection, OpenConnections

Network = ipaddress.IPv4Network | ipaddress.IPv6Network

#: How a version 1 header starts ("PROXY TCP4 ..."); no HTTP request or TLS record does.
V1_SIGNATURE = V1Parser.PROXYSTR + b" "
#: The 12 bytes a version 2 header starts with.
V2_SIGNATURE: bytes = V2Parser.PREFIX
#: A whole version 1 header naming no client: the balancer's own connection.
V1_UNKNOWN = b"PROXY UNKNOWN\r\n"
#: Seconds a trusted balancer may take to send the header, by default.
DEFAULT_TIMEOUT = 10.0
#: Every IPv4 address as a dual-stack socket (`host: "::"`) reports its peers: `::ffff:a.b.c.d`.
IPV4_MAPPED = ipaddress.IPv6Network("::ffff:0:0/96")

SCHEMA: Mapping[str, Any] = {
    "type": "object", "additionalProperties": False, "required": ["from"],
    "x-ssekd-addition": True,
    "description": "Read the PROXY protocol header (versions 1 and 2, as HAProxy's `send-proxy` "
                   "and `send-proxy-v2` send it) that a balancer opens each connection with, and "
                   "use the client address it names for routing, the connection limits and "
                   "everything above. A connection from `from` without a header is closed; a "
                   "connection from elsewhere with a header is closed too",
    "properties": {
        "from": {
            "type": "array", "minItems": 1, "x-ssekd-addition": True,
            "items": {"type": "string", "minLength": 1},
            "description": "Networks of the balancers that send the header, e.g. "
                           "`[10.0.0.0/8]` or `[127.0.0.1]`; only they are believed. A network "
                           "that holds every address (`0.0.0.0/0`, `::/0`) lets any peer forge "
                           "its client address: `ssekd check` and the daemon's start warn of it",
        },
        "timeout": {
            "type": "number", "exclusiveMinimum": 0, "default": DEFAULT_TIMEOUT,
            "x-ssekd-addition": True,
            "description": "Seconds a balancer's connection may take to send its header and "
                           "the first bytes after it; then it is closed",
        },
    },
}


class BadNetwork(ValueError):
    """Entry `index` of `from` is not a network; `expected` says what would be."""

    def __init__(self, index: int, expected: str) -> None:
        super().__init__(expected)
        self.index = index
        self.expected = expected


@dataclass(frozen=True)
class ProxyProtocol:
    """`options.proxy-protocol` of a tcp server."""

    trusted: tuple[Network, ...]
    timeout: float = DEFAULT_TIMEOUT

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> ProxyProtocol:
        """Raises `BadNetwork` for the first entry of `from` that is not a network."""
        networks = []
        for i, item in enumerate(options["from"]):
            try:
                networks.append(ipaddress.ip_network(item, strict=False))
            except ValueError as e:
                raise BadNetwork(i, f"an address or network such as 10.0.0.0/8: {e}") from e
        return cls(tuple(networks), float(options.get("timeout", DEFAULT_TIMEOUT)))

    def trusting_everyone(self) -> list[tuple[int, str]]:
        """(index in `from`, what it holds) of each network that holds every address of IPv4
        or IPv6 (`covers_everyone`): from there any peer may name any client."""
        found = []
        for i, network in enumerate(self.trusted):
            holds = covers_everyone(network)
            if holds is not None:
                found.append((i, holds))
        return found

    def trusts(self, peer: IAddress) -> bool:
        host = getattr(peer, "host", None)
        if host is None:
            return False
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            return False
        return any(address in network for network in self.trusted)


def covers_everyone(network: Network) -> str | None:
    """What of the Internet `network` holds when it is all of IPv4 or of IPv6, else None.

    A balancer sits at a known address; a network that holds every address is a mistake (a
    `0.0.0.0/0` meant to say "all balancers", or copied from a firewall rule), and with it the
    header is believed from anyone, who can then claim any client address: past routes by
    `cidr`, past `connections-per-ip`, into every event and log line. The config stays valid
    (that is what it says), but `ssekd check` and the daemon's start say so.

    Only networks that hold everything: a prefix of length 0, and an IPv6 network that holds
    every IPv4-mapped address (`::ffff:0:0/96`, `::/64`, ...), which is every IPv4 client of a
    dual-stack listener. A network that is merely wide (`10.0.0.0/8`, a cloud provider's
    range) may be where the balancers are; no line drawn through the prefix lengths would tell
    those from mistakes."""
    if network.prefixlen == 0:
        return f"every IPv{network.version} address"
    if isinstance(network, ipaddress.IPv6Network) and network.supernet_of(IPV4_MAPPED):
        return "every IPv4 address, as a dual-stack listener sees it (::ffff:0:0/96)"
    return None


#: What a network `covers_everyone` lets a peer do, for the warning.
TRUSTS_EVERYONE = ("any peer can then forge its client address with a PROXY header (past "
                   "routes by cidr and connections-per-ip, into every event); list only the "
                   "balancers' addresses")


def header_version(head: bytes) -> int | None:
    """1 or 2 when `head` starts with a PROXY header's signature, 0 when it cannot (any other
    first bytes), None while it is too short to tell."""
    if head.startswith(V1_SIGNATURE):
        return 1
    if head.startswith(V2_SIGNATURE):
        return 2
    if V1_SIGNATURE.startswith(head) or V2_SIGNATURE.startswith(head):
        return None
    return 0


def _address(value: IAddress | None) -> IAddress | None:
    """An address the header names, or None when it names none of IPv4 or IPv6: `LOCAL` (v2)
    and `UNKNOWN` (v1) are the balancer's own connections (its health checks), and a Unix
    socket is no client address. IPv6 in the usual short form, as the kernel reports a peer
    (Twisted's v2 parser writes every group: `2001:db8:0:0:0:0:0:7`), so one client is one key
    of the per-address count whichever header version named it."""
    if isinstance(value, IPv6Address):
        return IPv6Address(value.type, str(ipaddress.ip_address(value.host)), value.port)
    return value if isinstance(value, IPv4Address) else None


@dataclass(frozen=True)
class _NoAddresses:
    source: IAddress | None = None
    destination: IAddress | None = None


_LOCAL = _NoAddresses()


class _Unregistered:
    """`ProtocolWrapper` reports to a `WrappingFactory`, which keeps every connection in a dict;
    the tcp server keeps its own count (`OpenConnections`), so this one keeps nothing."""

    def registerProtocol(self, protocol: object) -> None:
        pass

    def unregisterProtocol(self, protocol: object) -> None:
        pass


_UNREGISTERED: Any = _Unregistered()
#: What a `ProxiedConnection` wraps until its header is read: nothing reaches it.
_NOT_YET = Protocol()

#: Routes, counts and builds what serves a connection from `peer`: the protocol (and the client
#: address the connection is counted under, to release when it closes), or None when it is
#: refused or has no route.
Admit = Callable[[IAddress], "tuple[IProtocol, str] | None"]


class ProxiedConnection(ProtocolWrapper):
    """A connection from a trusted balancer: reads its PROXY header, then is the transport of
    whatever serves the connection, reporting the client's address as `getPeer()` and the
    address the client connected to as `getHost()`.

    Nothing is built, routed or counted before the header is read. Writes and the rest of the
    transport are handed straight on (`ProtocolWrapper`); the sse binding writes past this to
    the socket itself (`socket_transport`)."""

    def __init__(self, admit: Admit, table: OpenConnections, binding: str,
                 timeout: float, clock: Any, refuse: Callable[[IAddress, str], None]) -> None:
        super().__init__(_UNREGISTERED, _NOT_YET)
        #: What serves the connection, once the header is read and the connection admitted.
        self._inner: IProtocol | None = None
        self._admit = admit
        self._table = table
        self._binding = binding
        self._timeout = timeout
        self._clock = clock
        self._refuse = refuse
        self._head = b""
        #: What the parser was given, until the header is complete.
        self._fed = b""
        self._parser: V1Parser | V2Parser | None = None
        self._deadline: IDelayedCall | None = None
        self._source: IAddress | None = None
        self._destination: IAddress | None = None
        self._counted: str | None = None

    def makeConnection(self, transport: ITransport) -> None:
        directlyProvides(self, providedBy(transport))
        Protocol.makeConnection(self, transport)
        # the protocol inside is made later, when the header has named the client

    def connectionMade(self) -> None:
        self._deadline = self._clock.callLater(self._timeout, self._too_slow)

    @property
    def _socket(self) -> Any:
        return self.transport

    def getPeer(self) -> IAddress:
        return self._source or self._socket.getPeer()

    def getHost(self) -> IAddress:
        return self._destination or self._socket.getHost()

    def logPrefix(self) -> str:
        return f"{type(self._inner or self).__name__} (PROXY)"

    def dataReceived(self, data: bytes) -> None:
        inner = self._inner
        if inner is not None:
            inner.dataReceived(data)
            return
        if self._parser is None:
            self._head += data
            version = header_version(self._head)
            if version is None:
                return
            if version == 0:
                self._close("no PROXY protocol header, and proxy-protocol.from names this "
                            "address")
                return
            self._parser = V1Parser() if version == 1 else V2Parser()
            data, self._head = self._head, b""
        self._fed += data
        info: Any
        try:
            info, rest = self._parser.feed(data)
        except InvalidProxyHeader as e:
            if not self._fed.startswith(V1_UNKNOWN):
                self._close(f"an invalid PROXY protocol header ({type(e).__name__})")
                return
            # the shortest v1 header, which Twisted's parser does not take
            info, rest = _LOCAL, self._fed[len(V1_UNKNOWN):]
        if info is None:
            return
        self._fed = b""
        self._cancel_deadline()
        self._source = _address(info.source)
        self._destination = _address(info.destination)
        admitted = self._admit(self.getPeer())
        if admitted is None:
            self._socket.loseConnection()
            return
        inner, self._counted = admitted
        self._inner = self.wrappedProtocol = inner
        inner.makeConnection(self)  # type: ignore[arg-type]  # provides what the socket does
        if rest:
            inner.dataReceived(rest)

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        self._cancel_deadline()
        if self._counted is not None:
            self._table.release(self._binding, self._counted)
            self._counted = None
        inner, self._inner = self._inner, None
        self.wrappedProtocol = _NOT_YET
        if inner is not None:
            inner.connectionLost(reason)

    def _close(self, why: str) -> None:
        self._cancel_deadline()
        self._refuse(self._socket.getPeer(), why)
        self._socket.abortConnection()

    def _too_slow(self) -> None:
        self._deadline = None
        if self._inner is None:
            self._close(f"no PROXY protocol header within {self._timeout:g} s")

    def _cancel_deadline(self) -> None:
        if self._deadline is not None and self._deadline.active():
            self._deadline.cancel()
        self._deadline = None


class HeaderRefusingConnection(CountedConnection):
    """A connection from an address `from` does not list, on a tcp server that reads PROXY
    headers: served as any other, unless its first bytes are a PROXY header, which only a
    trusted balancer may send; then it is closed before the protocol inside sees a byte."""

    def __init__(self, inner: IProtocol, table: OpenConnections, binding: str, address: str,
                 refuse: Callable[[IAddress, str], None]) -> None:
        super().__init__(inner, table, binding, address)
        self._refuse = refuse
        self._head: bytes | None = b""

    def dataReceived(self, data: bytes) -> None:
        if self._head is None:
            self.inner.dataReceived(data)
            return
        head = self._head + data
        version = header_version(head)
        if version is None:
            self._head = head
            return
        self._head = None
        if version:
            transport: Any = self.transport
            self._refuse(transport.getPeer(), "a PROXY protocol header from an address "
                                              "proxy-protocol.from does not list")
            transport.abortConnection()
            return
        self.inner.dataReceived(head)


def socket_transport(transport: Any) -> Any:
    """The transport a writer may treat as the TCP connection itself: the one under a
    `ProxiedConnection`, which only tells addresses apart, else `transport` as it is. (By type,
    not by attribute: a TLS transport on top would hand an attribute lookup down to the
    connection below, and plaintext would go to the socket.)"""
    return transport.transport if isinstance(transport, ProxiedConnection) else transport
