"""The PROXY protocol on a tcp server (`options.proxy-protocol`), one connection at a time on a
`StringTransport` and a `MemoryReactorClock`: a trusted balancer's header names the client that
routing, the limits and `getPeer()` see; a connection from a trusted address without a header,
or from anywhere else with one, is closed before the protocol inside reads a byte.
(tests/e2e/test_proxy_protocol.py runs it with the real daemon and HAProxy.)"""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest
from twisted.internet.address import IPv4Address, IPv6Address
from twisted.internet.error import ConnectionDone
from twisted.internet.interfaces import IAddress, ITransport
from twisted.internet.protocol import Protocol
from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.python.failure import Failure

from ssekd.bindings.connection_limits import ConnectionLimits, OpenConnections
from ssekd.bindings.proxy_protocol import (
    V2_SIGNATURE,
    HeaderRefusingConnection,
    ProxiedConnection,
    ProxyProtocol,
    header_version,
    socket_transport,
)
from ssekd.bindings.tcp import PROXY_PROTOCOL_UNSAFE, Condition, TcpRoute, TcpServer
from ssekd.config import ConfigError
from ssekd.engine import Engine
from ssekd.spi.connection import ConnectionInfo
from ssekd.telemetry.events import EventLog, severity
from tests.support.proxy_header import v1, v2

BALANCER = "10.0.0.5"
REQUEST = b"GET /events HTTP/1.1\r\nHost: example.com\r\n\r\n"


class Inner(Protocol):
    """What serves the connection: records its transport, bytes and close."""

    def __init__(self, conn: ConnectionInfo) -> None:
        self.conn = conn
        self.received = b""
        self.lost = False

    def dataReceived(self, data: bytes) -> None:
        self.received += data

    def connectionLost(self, reason: Failure = Failure(ConnectionDone())) -> None:
        self.lost = True


class Exit:
    versions = None

    def __init__(self) -> None:
        self.built: list[Inner] = []

    def build_protocol(self, conn: ConnectionInfo) -> Inner:
        self.built.append(Inner(conn))
        return self.built[-1]


class World:
    """A tcp server with `proxy-protocol: {from: [10.0.0.0/24]}` and one route for 203.0.113.0/24
    besides its default exit."""

    def __init__(self, per_ip: int = 1000, timeout: float = 10.0) -> None:
        self.clock = MemoryReactorClock()
        self.events = EventLog("t")
        self.table = OpenConnections(budget=100)
        self.default, self.special = Exit(), Exit()
        route = TcpRoute((Condition(None, ipaddress.ip_network("203.0.113.0/24")),), self.special)
        self.server = TcpServer("tcp0", "0.0.0.0", [7114], [route], self.default,
                                ConnectionLimits(100, per_ip=per_ip), self.events, self.table,
                                proxy=ProxyProtocol((ipaddress.ip_network("10.0.0.0/24"),),
                                                    timeout),
                                clock=self.clock)

    def connect(self, peer: str = BALANCER) -> tuple[Protocol, StringTransport]:
        p = self.server.build_protocol(7114, IPv4Address("TCP", peer, 40000))
        assert p is not None
        transport = StringTransport(peerAddress=IPv4Address("TCP", peer, 40000),
                                    hostAddress=IPv4Address("TCP", "10.0.0.9", 7114))
        p.makeConnection(transport)
        return p, transport

    def refusals(self) -> list[str]:
        return [line.split("BINDING_TCP_CONNECTION_REFUSED ", 1)[1] for line in self.events.recent
                if "BINDING_TCP_CONNECTION_REFUSED" in line]


def peer(transport: ITransport) -> IAddress:
    return transport.getPeer()


@pytest.mark.parametrize("header", [v1("198.51.100.7"), v2("198.51.100.7")], ids=["v1", "v2"])
def test_a_trusted_header_names_the_client_everything_above_sees(header: bytes) -> None:
    world = World()
    p, transport = world.connect()
    assert isinstance(p, ProxiedConnection)
    assert world.default.built == [] and world.table.total == 0, "nothing before the header"
    p.dataReceived(header + REQUEST)
    (inner,) = world.default.built
    assert inner.received == REQUEST
    assert inner.conn.peer == IPv4Address("TCP", "198.51.100.7", 51000)
    seen = peer(inner.transport)
    assert (seen.host, seen.port) == ("198.51.100.7", 51000)  # type: ignore[attr-defined]
    local = inner.transport.getHost()
    assert (local.host, local.port) == ("192.0.2.1", 443)  # type: ignore[attr-defined]
    assert world.table.count("tcp0", "198.51.100.7") == 1
    assert world.table.count("tcp0", BALANCER) == 0
    # writes go to the socket; the sse binding's own writes skip the relabelling layer
    inner.transport.write(b"HTTP/1.1 200 OK\r\n")
    assert transport.value() == b"HTTP/1.1 200 OK\r\n"
    assert socket_transport(inner.transport) is transport
    assert socket_transport(transport) is transport
    p.connectionLost(Failure(ConnectionDone()))
    assert inner.lost and world.table.total == 0


def test_a_header_in_pieces_of_any_size_is_read() -> None:
    """Twisted's own wrapper closes a connection whose first read holds less than 16 bytes of a
    version 2 header; a header split over segments is no error."""
    for header in (v2("2001:db8::7"), v1("198.51.100.8")):
        world = World()
        p, _ = world.connect()
        data = header + REQUEST
        for i in range(0, len(data), 5):
            p.dataReceived(data[i:i + 5])
        (inner,) = world.default.built
        assert inner.received == REQUEST
        assert peer(inner.transport).host in ("2001:db8::7", "198.51.100.8")  # type: ignore


def test_routing_by_cidr_and_the_per_address_limit_use_the_named_client() -> None:
    world = World(per_ip=2)
    for _ in range(2):
        p, _ = world.connect()
        p.dataReceived(v2("203.0.113.9") + REQUEST)
    assert len(world.special.built) == 2 and world.default.built == []
    p, transport = world.connect()
    p.dataReceived(v2("203.0.113.9") + REQUEST)
    assert transport.disconnecting and len(world.special.built) == 2
    assert world.refusals()[-1] == "203.0.113.9: connections-per-ip limit 2 reached"
    # the same balancer, another client: admitted
    p, _ = world.connect()
    p.dataReceived(v2("198.51.100.1") + REQUEST)
    assert len(world.default.built) == 1


def test_the_balancers_own_connections_count_as_the_balancer() -> None:
    """v2 LOCAL and v1 UNKNOWN (HAProxy's health checks) name no client."""
    for header in (v2("", local=True), b"PROXY UNKNOWN\r\n"):
        world = World()
        p, _ = world.connect()
        p.dataReceived(header + b"GET /health/ready HTTP/1.1\r\n\r\n")
        (inner,) = world.default.built
        assert peer(inner.transport).host == BALANCER  # type: ignore[attr-defined]
        assert world.table.count("tcp0", BALANCER) == 1


@pytest.mark.parametrize(("first", "why"), [
    (REQUEST, "no PROXY protocol header, and proxy-protocol.from names this address"),
    (b"\x16\x03\x01\x02\x00\x01", "no PROXY protocol header, and proxy-protocol.from names "
                                  "this address"),
    (b"PROXY TCP4 nonsense\r\n" + REQUEST, "an invalid PROXY protocol header"),
    (V2_SIGNATURE + b"\x99\x11\x00\x0c" + bytes(12), "an invalid PROXY protocol header"),
], ids=["http", "tls", "bad-v1", "bad-v2-version"])
def test_a_trusted_address_without_a_good_header_is_refused(first: bytes, why: str) -> None:
    world = World()
    p, transport = world.connect()
    p.dataReceived(first)
    assert transport.disconnected, "aborted, not answered"
    assert world.default.built == [] and world.table.total == 0
    assert world.refusals()[-1].startswith(f"{BALANCER}: {why}")


def test_a_trusted_address_that_sends_nothing_is_closed_after_the_timeout() -> None:
    world = World(timeout=3)
    p, transport = world.connect()
    p.dataReceived(v2("198.51.100.7")[:10])
    world.clock.advance(2.9)
    assert not transport.disconnected
    world.clock.advance(0.2)
    assert transport.disconnected
    assert world.refusals() == [f"{BALANCER}: no PROXY protocol header within 3 s"]
    # a header in time disarms the deadline
    p, transport = world.connect()
    p.dataReceived(v2("198.51.100.7"))
    world.clock.advance(10)
    assert not transport.disconnected and len(world.default.built) == 1
    assert world.clock.getDelayedCalls() == []


@pytest.mark.parametrize("header", [v1("198.51.100.7"), v2("198.51.100.7")], ids=["v1", "v2"])
def test_a_header_from_an_address_not_trusted_is_refused(header: bytes) -> None:
    world = World()
    p, transport = world.connect("192.0.2.50")
    assert isinstance(p, HeaderRefusingConnection)
    p.dataReceived(header[:3])
    p.dataReceived(header[3:] + REQUEST)
    (inner,) = world.default.built
    assert inner.received == b"", "the protocol inside never sees the header"
    assert transport.disconnected
    assert world.refusals() == [
        "192.0.2.50: a PROXY protocol header from an address proxy-protocol.from does not list"]
    p.connectionLost(Failure(ConnectionDone()))
    assert world.table.total == 0


def test_other_clients_are_served_as_they_come() -> None:
    """An untrusted connection's first bytes are looked at only until they cannot be a header:
    `PR` of an HTTP/2 preface waits for one more byte, and every byte reaches the protocol."""
    world = World()
    p, transport = world.connect("192.0.2.50")
    preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
    p.dataReceived(preface[:2])
    (inner,) = world.default.built
    assert inner.received == b""
    p.dataReceived(preface[2:])
    p.dataReceived(b"more")
    assert inner.received == preface + b"more"
    assert inner.transport is transport, "the socket itself: no relabelling layer"
    assert not transport.disconnected and world.refusals() == []


def test_header_version() -> None:
    assert header_version(b"") is None
    assert header_version(b"PROX") is None
    assert header_version(b"PROXY TCP4") == 1
    assert header_version(V2_SIGNATURE[:5]) is None
    assert header_version(V2_SIGNATURE + b"\x21") == 2
    assert header_version(b"GET /") == 0
    assert header_version(b"PROXZ") == 0
    assert header_version(b"\r\n\r\nGET") == 0


def test_ipv6_balancers_and_clients() -> None:
    proxy = ProxyProtocol((ipaddress.ip_network("fd00::/8"),))
    assert proxy.trusts(IPv6Address("TCP", "fd00::1", 1))
    assert not proxy.trusts(IPv6Address("TCP", "2001:db8::1", 1))
    assert not proxy.trusts(IPv4Address("TCP", "10.0.0.1", 1))


def build(folder: Path, text: str) -> None:
    """Load, check and build a config as the daemon does before it listens."""
    config = folder / "zilla.yaml"
    config.write_text(text)
    Engine(config, reactor=MemoryReactorClock(), environ={})


CONFIG = """\
name: t
bindings:
  tcp0:
    type: tcp
    kind: server
    options:
      port: 7114
      proxy-protocol:
        from: [10.0.0.0/8, {bad}]
    exit: http0
  http0: {{type: http, kind: server, exit: files_map}}
  files_map:
    type: http-filesystem
    kind: proxy
    routes: [{{when: [{{path: "/{{path}}"}}], exit: files, with: {{path: "${{params.path}}"}}}}]
  files: {{type: filesystem, kind: server, options: {{location: www}}}}
"""


@pytest.mark.parametrize(("bad", "expected"), [
    ("not-a-network", "bindings.tcp0.options.proxy-protocol.from[1]: expected an address or "
                      "network such as 10.0.0.0/8"),
    ("10.0.0.0/33", "bindings.tcp0.options.proxy-protocol.from[1]: expected an address or "
                    "network"),
])
def test_a_bad_network_is_a_config_error_with_file_line_and_path(
        tmp_path: Path, bad: str, expected: str) -> None:
    with pytest.raises(ConfigError) as e:
        build(tmp_path, CONFIG.format(bad=bad))
    (issue,) = e.value.issues
    assert f"zilla.yaml:9: {expected}" in str(issue)


def test_from_is_required_and_timeout_positive(tmp_path: Path) -> None:
    for options, path in (("{}", "proxy-protocol"), ("{from: []}", "proxy-protocol.from"),
                          ("{from: [10.0.0.1], timeout: 0}", "proxy-protocol.timeout")):
        text = CONFIG.format(bad="x").replace("\n        from: [10.0.0.0/8, x]", "").replace(
            "proxy-protocol:", f"proxy-protocol: {options}")
        with pytest.raises(ConfigError) as e:
            build(tmp_path, text)
        assert any(f"bindings.tcp0.options.{path}" in str(i) for i in e.value.issues), \
            e.value.issues


@pytest.mark.parametrize(("network", "holds"), [
    ("0.0.0.0/0", "every IPv4 address"),
    ("::/0", "every IPv6 address"),
    ("::ffff:0:0/96", "every IPv4 address, as a dual-stack listener sees it (::ffff:0:0/96)"),
    ("::/64", "every IPv4 address, as a dual-stack listener sees it (::ffff:0:0/96)"),
    ("0.0.0.0/1", None), ("10.0.0.0/8", None), ("2000::/3", None),
    ("::ffff:10.0.0.0/104", None), ("::/96", None), ("127.0.0.1", None),
])
def test_a_network_that_holds_every_address_is_told_from_a_wide_one(
        network: str, holds: str | None) -> None:
    """Only what holds everything: a prefix of length 0, or every IPv4-mapped address (each
    IPv4 client of a `::` listener). A wide network may be where the balancers are."""
    proxy = ProxyProtocol.from_options({"from": ["10.0.0.5", network]})
    assert proxy.trusting_everyone() == ([(1, holds)] if holds else [])


def test_a_from_that_holds_every_address_is_an_event_of_the_build_at_its_line(
        tmp_path: Path) -> None:
    """Accepted (it is what the config says) but said, with the entry's file, line and path,
    as a warning (its severity in JSON lines); a narrower network is not."""
    events = EventLog("t")
    config = tmp_path / "zilla.yaml"
    config.write_text(CONFIG.format(bad="0.0.0.0/0"))
    Engine(config, reactor=MemoryReactorClock(), environ={}, events=events, print_events=False)
    [line] = [line for line in events.recent if PROXY_PROTOCOL_UNSAFE in line]
    assert line.startswith("t:tcp0 ")
    assert line.endswith(f"{PROXY_PROTOCOL_UNSAFE} {config}:9: bindings.tcp0.options."
                         "proxy-protocol.from[1]: 0.0.0.0/0 holds every IPv4 address: any peer "
                         "can then forge its client address with a PROXY header (past routes "
                         "by cidr and connections-per-ip, into every event); list only the "
                         "balancers' addresses"), line
    assert severity(PROXY_PROTOCOL_UNSAFE) == "WARNING"
    quiet = EventLog("t")
    config.write_text(CONFIG.format(bad="0.0.0.0/1"))
    Engine(config, reactor=MemoryReactorClock(), environ={}, events=quiet, print_events=False)
    assert not [line for line in quiet.recent if PROXY_PROTOCOL_UNSAFE in line]
