"""The cleartext port's preface sniffer (h2c) on a MemoryReactorClock: HTTP/2 prior knowledge or
HTTP/1.1, decided by the first bytes, with no sockets."""

from __future__ import annotations

import pytest
from twisted.internet.address import IPv4Address
from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.web._http2 import H2Connection
from twisted.web.http import _GenericHTTPChannelProtocol
from twisted.web.resource import Resource
from twisted.web.server import Site

from ssekd.bindings.http.h2c import PREFACE, PrefaceSniffer, protocol_for
from ssekd.spi.connection import ConnectionInfo

PEER = IPv4Address("TCP", "127.0.0.1", 50000)
LOCAL = IPv4Address("TCP", "127.0.0.1", 7114)


def sniff(versions: tuple[str, ...] = ("http/1.1", "h2")
          ) -> tuple[PrefaceSniffer, StringTransport, MemoryReactorClock]:
    clock = MemoryReactorClock()
    site = Site(Resource(), timeout=30, reactor=clock)
    proto = protocol_for(site, versions, ConnectionInfo(LOCAL, PEER))
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
