"""The tls binding's handshake deadline on a MemoryReactorClock: a stalled handshake is aborted
with one event, and never reaches the exit."""

from __future__ import annotations

from typing import Any

from twisted.internet.address import IPv4Address
from twisted.internet.testing import MemoryReactorClock, StringTransport

from ssekd.bindings.tls import ServerKey, TlsServer, build_context, certificate_names
from ssekd.dev.certs import issue, make_ca
from ssekd.spi.connection import ConnectionInfo
from ssekd.telemetry.events import EventLog
from ssekd.vaults.pkcs12 import StoreEntry

PEER = IPv4Address("TCP", "127.0.0.1", 50000)
LOCAL = IPv4Address("TCP", "127.0.0.1", 7114)


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
