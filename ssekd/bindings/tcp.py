"""tcp: `server` owns listening sockets and routes each accepted connection by local port and
peer address (docs/config-reference.md), within its connection limits (`connection_limits`); `client` is the
outbound side: it connects to its `host` and `port` for an http client, and names the way out of a
kafka client (whose `servers` say where)."""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from twisted.internet.address import IPv4Address, IPv6Address
from twisted.internet.endpoints import HostnameEndpoint
from twisted.internet.interfaces import IAddress, IProtocol

from ssekd.bindings._schemas import PORT, PORTS
from ssekd.bindings.connection_limits import (
    LIMITS_SCHEMA,
    PROCESS,
    ConnectionLimits,
    CountedConnection,
    OpenConnections,
)
from ssekd.bindings.proxy_protocol import SCHEMA as PROXY_PROTOCOL_SCHEMA
from ssekd.bindings.proxy_protocol import (
    TRUSTS_EVERYONE,
    BadNetwork,
    HeaderRefusingConnection,
    ProxiedConnection,
    ProxyProtocol,
)
from ssekd.config import ConfigError
from ssekd.config.model import Binding
from ssekd.spi.binding import BindingType, BuildContext, Exit, KindSpec
from ssekd.spi.connection import ConnectionInfo, Connector, ListenerBinding, ListenSpec, StreamBinding
from ssekd.telemetry.events import EventLog

Network = ipaddress.IPv4Network | ipaddress.IPv6Network

#: Where a tcp server listens when its options name no host.
DEFAULT_HOST = "0.0.0.0"
#: Said when `proxy-protocol.from` holds every address (`ProxyProtocol.trusting_everyone`): as
#: the build's event at the daemon's start and reload, and as a warning by `ssekd check`.
PROXY_PROTOCOL_UNSAFE = "BINDING_TCP_PROXY_PROTOCOL_UNSAFE"


def expand_ports(value: Any) -> list[int]:
    """`7114`, `"8080-8090"` or a list of either, to a list of ports in config order."""
    items = value if isinstance(value, list) else [value]
    ports: list[int] = []
    for item in items:
        if isinstance(item, int):
            lo = hi = item
        else:
            lo_s, _, hi_s = str(item).partition("-")
            lo, hi = int(lo_s), int(hi_s or lo_s)
        if not (0 < lo <= hi <= 65535):
            raise ValueError(f"a port or range within 1-65535, low to high; got {item!r}")
        ports.extend(p for p in range(lo, hi + 1) if p not in ports)
    return ports


@dataclass(frozen=True)
class Condition:
    """One `when` item: every field given must match."""

    ports: frozenset[int] | None
    network: Network | None

    def matches(self, port: int, peer: IAddress) -> bool:
        if self.ports is not None and port not in self.ports:
            return False
        if self.network is not None:
            host = getattr(peer, "host", None)
            try:
                if host is None or ipaddress.ip_address(host) not in self.network:
                    return False
            except ValueError:
                return False
        return True


@dataclass(frozen=True)
class TcpRoute:
    conditions: tuple[Condition, ...]
    exit: StreamBinding


class TcpServer:
    """Listens on `host` x each port; hands each connection to the first route that matches,
    unless it would pass a connection limit. With `proxy` (`options.proxy-protocol`), the
    connections of trusted balancers are routed and counted by the client their PROXY header
    names (`ssekd.bindings.proxy_protocol`)."""

    def __init__(self, name: str, host: str, ports: Sequence[int], routes: Sequence[TcpRoute],
                 default: StreamBinding | None, limits: ConnectionLimits, events: EventLog,
                 table: OpenConnections = PROCESS, proxy: ProxyProtocol | None = None,
                 clock: Any = None) -> None:
        self.name = name
        self.host = host
        self.ports = list(ports)
        self.routes = list(routes)
        self.default = default
        self.limits = limits
        self.events = events
        self.table = table
        self.proxy = proxy
        self.clock = clock

    def listen_specs(self) -> list[ListenSpec]:
        return [ListenSpec(self.host, port, _PortFactory(self, port)) for port in self.ports]

    def route(self, port: int, peer: IAddress) -> StreamBinding | None:
        for route in self.routes:
            if any(c.matches(port, peer) for c in route.conditions):
                return route.exit
        return self.default

    def build_protocol(self, port: int, peer: IAddress) -> IProtocol | None:
        proxy = self.proxy
        if proxy is not None and proxy.trusts(peer):
            return ProxiedConnection(lambda client: self.admit(port, client), self.table,
                                     self.name, proxy.timeout, self.clock, self._refused)
        admitted = self.admit(port, peer)
        if admitted is None:
            return None
        inner, address = admitted
        if proxy is not None:
            return HeaderRefusingConnection(inner, self.table, self.name, address, self._refused)
        return CountedConnection(inner, self.table, self.name, address)

    def admit(self, port: int, peer: IAddress) -> tuple[IProtocol, str] | None:
        """Route and count a connection from `peer` on `port`: the exit's protocol and the
        address it is counted under (the caller releases it when the connection closes), or
        None when it has no route or would pass a limit (Twisted then closes it)."""
        exit_ = self.route(port, peer)
        if exit_ is None:
            # no route and no default exit: closed at once (Twisted does it), and said
            self.events.emit(self.name, "BINDING_TCP_NO_ROUTE",
                             f"{getattr(peer, 'host', '?')} to port {port}: no route takes it, "
                             f"closed")
            return None
        address = str(getattr(peer, "host", ""))
        refused = self.table.admit(self.name, address, self.limits)
        if refused is not None:
            # Closed unanswered, before a byte is read (see connection_limits for why).
            self.events.emit(self.name, "BINDING_TCP_CONNECTION_REFUSED", f"{address}: {refused}")
            return None
        local_type = IPv6Address if ":" in self.host else IPv4Address
        local = local_type("TCP", self.host, port)
        try:
            inner = exit_.build_protocol(ConnectionInfo(local=local, peer=peer))
        except BaseException:
            self.table.release(self.name, address)
            raise
        if inner is None:
            self.table.release(self.name, address)
            return None
        return inner, address

    def _refused(self, peer: IAddress, why: str) -> None:
        self.events.emit(self.name, "BINDING_TCP_CONNECTION_REFUSED",
                         f"{getattr(peer, 'host', peer)}: {why}")


class _PortFactory:
    """What the engine puts behind one socket of a TcpServer."""

    def __init__(self, server: TcpServer, port: int) -> None:
        self.server = server
        self.port = port

    def buildProtocol(self, addr: IAddress) -> IProtocol | None:
        return self.server.build_protocol(self.port, addr)


#: Why a tcp server route may not name `authority`. At accept there is no host name to match: no
#: SNI and no Host header has been read yet. Zilla matches it against the peer's reverse-DNS
#: name, a blocking lookup per connection that the owner of the peer's address controls; ssekd
#: ignored it, so such a route matched every connection. Refusing is the honest answer.
AUTHORITY_REFUSED = ("tcp routes cannot match authority; route by authority in the tls or "
                     "http binding (the tls server's `when: [{authority}]` matches the SNI name)")


def _build_server(ctx: BuildContext, binding: Binding) -> TcpServer:
    options = binding.options
    base = ("bindings", binding.name)
    try:
        ports = expand_ports(options["port"])
    except ValueError as e:
        raise ConfigError([ctx.issue(base + ("options", "port"), f"expected {e}")]) from e
    routes = []
    for i, route in enumerate(binding.routes):
        conditions = []
        for j, when in enumerate(route.when):
            path = base + ("routes", i, "when", j)
            if "authority" in when:
                raise ConfigError([ctx.issue(path + ("authority",), AUTHORITY_REFUSED)])
            try:
                route_ports = frozenset(expand_ports(when["port"])) if "port" in when else None
            except ValueError as e:
                raise ConfigError([ctx.issue(path + ("port",), f"expected {e}")]) from e
            strays = sorted((route_ports or frozenset()) - set(ports))
            if strays:
                # no connection arrives there: the route would never match, silently
                raise ConfigError([ctx.issue(
                    path + ("port",),
                    f"expected a port this server listens on ({', '.join(map(str, ports))}); "
                    f"it does not listen on {', '.join(map(str, strays))}")])
            try:
                network = ipaddress.ip_network(when["cidr"], strict=False) \
                    if "cidr" in when else None
            except ValueError as e:
                raise ConfigError([ctx.issue(path + ("cidr",),
                                             f"expected a network such as 10.0.0.0/8: {e}")]) \
                    from e
            conditions.append(Condition(route_ports, network))
        assert route.exit is not None  # required by the schema
        exit_ = ctx.exit(route.exit, StreamBinding)
        routes.append(TcpRoute(tuple(conditions) or (Condition(None, None),), exit_))
    default = ctx.exit(binding.exit, StreamBinding) if binding.exit else None
    limits = ConnectionLimits.from_options(options.get("limits"), PROCESS.budget)
    proxy = None
    if "proxy-protocol" in options:
        try:
            proxy = ProxyProtocol.from_options(options["proxy-protocol"])
        except BadNetwork as e:
            raise ConfigError([ctx.issue(base + ("options", "proxy-protocol", "from", e.index),
                                         f"expected {e.expected}")]) from e
        for i, holds in proxy.trusting_everyone():
            entry = options["proxy-protocol"]["from"][i]
            where = ctx.issue(base + ("options", "proxy-protocol", "from", i),
                              f"{entry} holds {holds}: {TRUSTS_EVERYONE}")
            ctx.events.emit(binding.name, PROXY_PROTOCOL_UNSAFE, str(where))
    return TcpServer(binding.name, options.get("host", DEFAULT_HOST), ports, routes, default,
                     limits, ctx.events, proxy=proxy, clock=ctx.reactor)


#: Seconds an outbound connection may take to be established before it counts as failed.
CONNECT_TIMEOUT = 10.0


class TcpClient:
    """The outbound side: connects to `options.host`/`port` (an http client's upstream), or -
    without them - only names the way out of a kafka client, whose `servers` say where."""

    secure = False

    def __init__(self, name: str, reactor: Any, address: tuple[str, int] | None) -> None:
        self.name = name
        self.reactor = reactor
        self.address = address

    def endpoint(self) -> Any:
        """A `HostnameEndpoint`: the name is resolved off the reactor thread, IPv4 and IPv6."""
        if self.address is None:
            raise ValueError(f"tcp client {self.name!r} has no options.host and options.port")
        host, port = self.address
        return HostnameEndpoint(self.reactor, host, port, timeout=CONNECT_TIMEOUT)


_CLIENT_ROUTES_REFUSAL = ("a tcp client has no routes in ssekd: `options.host` and `port` say "
                          "where it connects; remove them")


def _build_client(ctx: BuildContext, binding: Binding) -> TcpClient:
    """Routes given to a tcp client would be ignored, so they are refused rather than silently
    accepted; `host` and `port` come together or not at all."""
    base: tuple[str | int, ...] = ("bindings", binding.name)
    if binding.routes:
        raise ConfigError([ctx.issue(base + ("routes",), _CLIENT_ROUTES_REFUSAL)])
    options = binding.options
    if ("host" in options) != ("port" in options):
        missing = "port" if "host" in options else "host"
        raise ConfigError([ctx.issue(base + ("options",),
                                     f"expected `{missing}` beside "
                                     f"`{'host' if missing == 'port' else 'port'}`: a tcp client "
                                     f"connects to one host and port")])
    address = None
    if "host" in options:
        try:
            ports = expand_ports(options["port"])
        except ValueError as e:
            raise ConfigError([ctx.issue(base + ("options", "port"), f"expected {e}")]) from e
        if len(ports) != 1:
            raise ConfigError([ctx.issue(base + ("options", "port"),
                                         "expected one port: a tcp client connects to one")])
        address = (str(options["host"]), ports[0])
    return TcpClient(binding.name, ctx.reactor, address)

_WHEN = {"type": "object", "additionalProperties": False, "properties": {
    "port": {**PORTS, "description": "Local port(s) the connection arrived on."},
    "cidr": {"type": "string", "description": "Network the peer's address is in, e.g. `10.0.0.0/8`."},
    "authority": {"type": "string", "description": "Zilla's server name condition. Refused by "
                                                   "ssekd: match server names in a tls "
                                                   "binding's routes."}}}

BINDING = BindingType("tcp", {
    "server": KindSpec(
        role=ListenerBinding, build=_build_server, exit=Exit.REQUIRED, exit_roles=(StreamBinding,),
        when=_WHEN, summary=lambda o: f"{o.get('host', DEFAULT_HOST)}:{o.get('port')}",
        options={"type": "object", "additionalProperties": False, "required": ["port"],
                 "description": "Listens on TCP ports and hands each accepted connection to the first "
                                "route whose `when` matches (else to `exit`; with neither, the "
                                "connection is closed).",
                 "properties": {
                     "host": {"type": "string", "minLength": 1, "default": DEFAULT_HOST,
                              "description": "Address to listen on."},
                     "port": {**PORTS, "description": "Port(s) to listen on; each gets its own "
                                                      "socket, kept across reloads."},
                     "limits": LIMITS_SCHEMA,
                     "proxy-protocol": PROXY_PROTOCOL_SCHEMA}},
    ),
    "client": KindSpec(
        role=Connector, build=_build_client, when=_WHEN,
        summary=lambda o: f"{o['host']}:{o.get('port', '?')}" if "host" in o else "",
        options={"type": "object", "additionalProperties": False,
                 "description": "The outbound side. Behind an http client it connects to `host` "
                                "and `port`; behind a kafka client (Zilla's example config) it "
                                "takes no options, since the kafka client's `servers` say where "
                                "it connects. Routes are refused.",
                 "properties": {
                     "host": {"type": "string", "minLength": 1, "x-ssekd-default": "none",
                              "description": "Host name or address to connect to (resolved "
                                             "without blocking; IPv4 and IPv6)."},
                     "port": {**PORT, "x-ssekd-default": "none",
                              "description": "Port to connect to, with `host`."}}},
    ),
})
