"""Clock-driven unit tests: the h2c preface sniffer and the TLS handshake deadline, no sockets."""

from __future__ import annotations

from typing import Any

import pytest
from twisted.internet.address import IPv4Address
from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.web._http2 import H2Connection
from twisted.web.http import _GenericHTTPChannelProtocol
from twisted.web.resource import Resource
from twisted.web.server import Site

from ssekd.bindings.api import ConnectionInfo
from ssekd.bindings.http.h2c import PREFACE, PrefaceSniffer, protocol_for
from ssekd.bindings.tls import ServerKey, TlsServer, build_context, certificate_names
from ssekd.devcert import issue, make_ca
from ssekd.telemetry.events import EventLog
from ssekd.vaults.pkcs12 import StoreEntry

PEER = IPv4Address("TCP", "127.0.0.1", 50000)
LOCAL = IPv4Address("TCP", "127.0.0.1", 7114)


class FakeHttpServer:
    """What h2c needs of the http binding's runtime: its Site and its `versions`."""

    def __init__(self, clock: MemoryReactorClock, versions: tuple[str, ...]) -> None:
        self.site = Site(Resource(), timeout=30, reactor=clock)
        self.versions = versions


def sniff(versions: tuple[str, ...] = ("http/1.1", "h2")
          ) -> tuple[PrefaceSniffer, StringTransport, MemoryReactorClock]:
    clock = MemoryReactorClock()
    proto = protocol_for(FakeHttpServer(clock, versions), ConnectionInfo(LOCAL, PEER))  # type: ignore[arg-type]
    assert isinstance(proto, PrefaceSniffer)
    transport = StringTransport()
    proto.makeConnection(transport)
    return proto, transport, clock


def test_preface_in_pieces_becomes_http2() -> None:
    proto, transport, _ = sniff()
    proto.dataReceived(PREFACE[:5])
    assert proto.inner is None and transport.value() == b""
    proto.dataReceived(PREFACE[5:] + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00")  # empty SETTINGS
    assert isinstance(proto.inner, H2Connection)
    # the server's own SETTINGS frame (type 4) went out first
    assert transport.value()[3:4] == b"\x04"
    assert transport.producer is proto.inner  # backpressure reaches HTTP/2


@pytest.mark.parametrize("first", [b"GET / HTTP/1.1\r\n", b"P", b"PRI * HTTP/1.1\r\n"])
def test_anything_else_is_http11(first: bytes) -> None:
    proto, _transport, _ = sniff()
    proto.dataReceived(first)
    if first == b"P":
        assert proto.inner is None
        proto.dataReceived(b"OST /x HTTP/1.1\r\n")
    assert isinstance(proto.inner, _GenericHTTPChannelProtocol)


def test_http2_only_answers_http11_with_505() -> None:
    proto, transport, _ = sniff(("h2",))
    proto.dataReceived(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    assert transport.value().startswith(b"HTTP/1.1 505 ")
    assert transport.disconnecting


def test_silent_connection_is_closed_after_the_site_timeout() -> None:
    _, transport, clock = sniff()
    clock.advance(29)
    assert not transport.disconnecting
    clock.advance(1)
    assert transport.disconnecting


class NeverExit:
    """A stream exit that must not be reached: the handshake never completes."""

    versions = ("http/1.1", "h2")

    def build_protocol(self, conn: ConnectionInfo) -> Any:
        raise AssertionError("no handshake, no exit")


def _server(clock: MemoryReactorClock, events: EventLog) -> TlsServer:
    ca = make_ca()
    leaf = issue(ca, ["localhost"])
    entry = StoreEntry("localhost", leaf.cert, leaf.key)
    key = ServerKey("localhost", certificate_names(leaf.cert),
                    build_context("t", entry, [], "none"))
    return TlsServer("tls_in", [key], None, ["h2"], [], NeverExit(), events, clock,
                     handshake_timeout=10)


def test_a_stalled_handshake_ends_with_one_event() -> None:
    clock = MemoryReactorClock()
    events = EventLog("ns", clock=clock.seconds)
    proto: Any = _server(clock, events).build_protocol(ConnectionInfo(LOCAL, PEER))
    transport = StringTransport()
    proto.makeConnection(transport)
    proto.dataReceived(b"\x16\x03\x01")  # the first bytes of a ClientHello, then nothing
    clock.advance(9.9)
    assert not transport.disconnected and not events.recent
    clock.advance(0.2)
    assert transport.disconnected  # aborted, not politely closed
    proto.connectionLost(Exception("aborted"))  # what the reactor then reports
    assert len(events.recent) == 1
    assert events.recent[0].endswith(
        "BINDING_TLS_HANDSHAKE_FAILED 127.0.0.1:50000 handshake not completed within 10s")


def test_sni_matching_covers_exact_and_wildcard_names() -> None:
    key = ServerKey("k", ("a.example", "*.b.example"), None)  # type: ignore[arg-type]
    assert key.covers("a.example")
    assert key.covers("x.b.example")
    assert not key.covers("b.example")
    assert not key.covers("y.x.b.example")
