"""Before a quic server keeps anything for a client, the client proves it receives at the
address it sends from (a Retry and its token); datagrams that are not a proper first packet
cost nothing and get no answer."""

from __future__ import annotations

import random

from aioquic.buffer import Buffer  # type: ignore[attr-defined]
from aioquic.quic.events import HandshakeCompleted
from aioquic.quic.packet import QuicHeader, QuicPacketType, pull_quic_header

from tests.bindings.quic.wire import Wire, clock, http_server, quic_server
from tests.support.http_fakes import GetOnly

CLIENT = ("127.0.0.1", 40000)


def header(data: bytes) -> QuicHeader:
    return pull_quic_header(Buffer(data=data), host_cid_length=8)


def initial(size: int, *, dcid: bytes = b"\x11" * 8, token: bytes = b"") -> bytes:
    """A datagram of `size` bytes holding one Initial packet of QUIC v1 whose header is right
    (what the server reads before anything is decrypted) and whose payload is noise."""
    head = bytes([0xC0]) + (1).to_bytes(4, "big") + bytes([len(dcid)]) + dcid \
        + bytes([8]) + b"\x22" * 8 + bytes([len(token)]) + token
    rest = size - len(head) - 2
    assert 0 < rest < 0x4000
    return head + (0x4000 | rest).to_bytes(2, "big") + random.Random(size).randbytes(rest)


def _wire() -> Wire:
    c = clock()
    return Wire(quic_server(c, http_server(c, GetOnly())), c)


def test_a_first_initial_without_a_token_gets_only_a_small_retry_and_no_state() -> None:
    wire = _wire()
    server = wire.server
    client = wire.client(CLIENT[1])
    first = client.flight()
    assert first and all(header(d).packet_type == QuicPacketType.INITIAL
                         and not header(d).token for d in first)
    for data in first:
        server.datagram_received(data, CLIENT)
    wire.clock.advance(0)
    assert len(wire.sent) == 1
    retry, to = wire.sent[0]
    assert to == CLIENT
    assert header(retry).packet_type == QuicPacketType.RETRY
    assert len(retry) < 3 * sum(len(d) for d in first)  # no amplification
    assert server.peers == set() and server.by_id == {} and server.open.value == 0
    assert not wire.clock.getDelayedCalls()  # nothing scheduled for it either

    client.inbox.append(retry)
    client.take(wire.clock.seconds())
    wire.run(0.2)
    assert client.of(HandshakeCompleted)  # the client also checked the Retry's ids
    assert len(server.peers) == 1 and server.open.value == 1
    stream = client.request()
    wire.run(0.1)
    assert client.status(stream) == b"200" and client.body(stream) == b"ok"


def test_a_token_shown_from_another_address_is_dropped() -> None:
    wire = _wire()
    server = wire.server
    client = wire.client(CLIENT[1])
    for data in client.flight():
        server.datagram_received(data, CLIENT)
    client.take(wire.clock.seconds())  # the Retry
    with_token = client.flight()
    assert any(header(d).token for d in with_token)
    wire.sent.clear()
    for elsewhere in (("127.0.0.2", CLIENT[1]), ("127.0.0.1", CLIENT[1] + 1)):
        for data in with_token:
            server.datagram_received(data, elsewhere)
    wire.clock.advance(0)
    assert wire.sent == [] and server.peers == set() and server.by_id == {}
    # the same datagrams from the address the token was made for open the connection
    for data in with_token:
        server.datagram_received(data, CLIENT)
    assert len(server.peers) == 1 and wire.sent and all(to == CLIENT for _, to in wire.sent)


def test_a_token_too_old_is_dropped() -> None:
    wire = _wire()
    server = wire.server
    client = wire.client(CLIENT[1])
    for data in client.flight():
        server.datagram_received(data, CLIENT)
    client.take(wire.clock.seconds())
    with_token = client.flight()
    wire.sent.clear()
    wire.clock.advance(31)  # aioquic's tokens last 30 s
    for data in with_token:
        server.datagram_received(data, CLIENT)
    assert wire.sent == [] and server.peers == set()


def test_initials_under_1200_bytes_are_dropped_without_state_or_reply() -> None:
    wire = _wire()
    server = wire.server
    for size in (100, 600, 1199):
        server.datagram_received(initial(size), CLIENT)
    wire.clock.advance(0)
    assert wire.sent == [] and server.peers == set() and server.by_id == {}
    # the same packet filled to the floor is a first packet: it gets its Retry
    server.datagram_received(initial(1200), CLIENT)
    assert [header(d).packet_type for d, _ in wire.sent] == \
        [QuicPacketType.RETRY]


def test_garbage_datagrams_are_dropped_without_state_reply_or_exception() -> None:
    wire = _wire()
    server = wire.server
    noise = random.Random(42)
    garbage = [
        b"",
        b"\x00",
        b"\xc0\x00\x00\x00\x01",  # a long header cut short
        b"\xc0" + b"\x00\x00\x00\x01" + b"\x08" + b"\x01" * 8,  # no source id
        initial(1300)[:700],  # its length says more than the datagram holds
        bytes([0x40]) + noise.randbytes(1300),  # a short header: no connection of ours
        bytes([0xE0]) + (1).to_bytes(4, "big") + b"\x08" + b"\x01" * 8 + b"\x08"
        + b"\x02" * 8 + b"\x40\x10" + noise.randbytes(16),  # a Handshake of no connection
        initial(1250, token=noise.randbytes(60)),  # a token not ours
        *(bytes([b & 0x7F]) + noise.randbytes(n) for b, n in ((noise.randrange(256), n)
                                                             for n in (10, 100, 1200, 1500))),
    ]
    for data in garbage:
        server.datagram_received(data, CLIENT)
    wire.clock.advance(0)
    assert wire.sent == [] and server.peers == set() and server.by_id == {}
    assert not [e for e in server.events.recent if "ERROR" in e]

    # a connection held goes on whatever noise comes with its id
    client = wire.connect(CLIENT[1])
    cid = client.quic._peer_cid.cid  # noqa: SLF001 - the id the client sends to
    for n in (0, 5, 40, 1200):
        server.datagram_received(bytes([0x40]) + cid + noise.randbytes(n), CLIENT)
    stream = client.request()
    wire.run(0.1)
    assert client.status(stream) == b"200" and len(server.peers) == 1
