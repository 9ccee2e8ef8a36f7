"""What a quic server's `limits` bound: connections (in all and per client address), requests
open at once on one connection (QUIC's stream credit), how long a connection may stay silent
and how long a handshake may take. All on a clock."""

from __future__ import annotations

from aioquic.h3.connection import ErrorCode
from aioquic.quic.events import ConnectionTerminated, HandshakeCompleted
from aioquic.quic.packet import QuicErrorCode

from ssekd.bindings.connection_limits import OpenConnections
from tests.bindings.quic.wire import Held, Wire, clock, http_server, quic_server
from tests.support.http_fakes import GetOnly, Upload


def _refusals(wire: Wire) -> list[str]:
    return [e for e in wire.server.events.recent if "BINDING_QUIC_CONNECTION_REFUSED" in e]


def _close(wire: Wire, port: int, host: str = "127.0.0.1") -> None:
    """The client on (host, port) closes its connection; the server drains and forgets it."""
    client = wire.clients[(host, port)]
    client.quic.close()
    wire.run(1.0)


def test_connections_per_ip_refuse_until_one_closes() -> None:
    c = clock()
    table = OpenConnections(1000)
    wire = Wire(quic_server(c, http_server(c, GetOnly()), per_ip=2, table=table), c)
    server = wire.server
    wire.connect(40000)
    wire.connect(40001)
    third = wire.client(40002)
    wire.run(0.3)
    assert not third.of(HandshakeCompleted)
    assert len(server.peers) == 2 and server.open.value == 2
    refused = _refusals(wire)
    assert refused and refused[0].endswith("127.0.0.1: connections-per-ip limit 2 reached")
    # another address has its own count
    wire.connect(40000, host="127.0.0.2")
    assert len(server.peers) == 3
    del wire.clients[third.addr]  # it gave up

    _close(wire, 40000)
    assert len(server.peers) == 2 and table.total == 2
    again = wire.connect(40003)
    stream = again.request()
    wire.run(0.1)
    assert again.status(stream) == b"200"


def test_connections_refuse_past_the_servers_limit_until_one_closes() -> None:
    c = clock()
    table = OpenConnections(1000)
    wire = Wire(quic_server(c, http_server(c, GetOnly()), connections=2, table=table), c)
    server = wire.server
    wire.connect(40000)
    wire.connect(40000, host="127.0.0.2")
    third = wire.client(40000, host="127.0.0.3")
    wire.run(0.3)
    assert not third.of(HandshakeCompleted) and len(server.peers) == 2
    assert _refusals(wire)[0].endswith("127.0.0.3: connections limit 2 reached")
    del wire.clients[third.addr]

    _close(wire, 40000, "127.0.0.2")
    assert len(server.peers) == 1 and table.total == 1 and server.open.value == 1
    wire.connect(40000, host="127.0.0.4")
    assert len(server.peers) == 2


def test_a_connection_has_as_many_requests_open_as_streams_allows() -> None:
    c = clock()
    exit = Held()
    wire = Wire(quic_server(c, http_server(c, exit), streams=3), c)
    client = wire.connect()
    assert client.quic._remote_max_streams_bidi == 3  # noqa: SLF001 - the credit it was given
    streams = [client.request(path=f"/{n}") for n in range(4)]
    wire.run(0.1)
    assert len(exit.held) == 3  # the fourth waits for credit in the client
    assert all(client.status(s) == b"200" for s in streams[:3])
    assert client.status(streams[3]) is None

    request, _ = exit.held[0]
    request.unregisterProducer()
    request.finish()  # one ends: its credit comes back, and the fourth goes out
    wire.run(0.1)
    assert len(exit.held) == 4 and client.status(streams[3]) == b"200"


def test_a_connection_makes_more_requests_in_its_life_than_streams_holds_at_once() -> None:
    """The credit comes back as requests end: `streams` bounds requests open at once, not the
    requests of a connection's life."""
    c = clock()
    wire = Wire(quic_server(c, http_server(c, GetOnly()), streams=3), c)
    client = wire.connect()
    for n in range(12):
        stream = client.request(path=f"/{n}")
        wire.run(0.1)
        assert client.status(stream) == b"200", n


def test_requests_the_client_gives_up_on_give_their_credit_back() -> None:
    """A closed EventSource: the client stops reading (STOP_SENDING, with or without a
    RESET_STREAM of its side, which its GET already ended); the request ends in the exit and
    the stream's credit comes back."""
    c = clock()
    exit = Held()
    wire = Wire(quic_server(c, http_server(c, exit), streams=2), c)
    client = wire.connect()
    for n in range(6):
        stream = client.request(path=f"/{n}")
        wire.run(0.1)
        assert len(exit.held) == n + 1, n
        client.quic.stop_stream(stream, ErrorCode.H3_REQUEST_CANCELLED)
        if n % 2:
            client.quic.reset_stream(stream, ErrorCode.H3_REQUEST_CANCELLED)
        wire.run(0.1)
        assert len(exit.lost) == n + 1
    assert len(wire.server.peers) == 1


def test_uploads_the_client_breaks_off_give_their_credit_back() -> None:
    """A body the client stops sending (RESET_STREAM) before its end: the server ends its side
    of the stream too, so the stream is over and its credit comes back."""
    c = clock()
    exit = Upload()
    wire = Wire(quic_server(c, http_server(c, exit), streams=2), c)
    client = wire.connect()
    for n in range(6):
        stream = client.request("POST", body=b"part of it", end=False)
        wire.run(0.1)
        client.quic.reset_stream(stream, ErrorCode.H3_REQUEST_CANCELLED)
        wire.run(0.1)
        assert client.reset(stream) == ErrorCode.H3_REQUEST_CANCELLED, n
    done = client.request("POST", body=b"whole")
    wire.run(0.1)
    assert client.status(done) == b"200" and exit.bodies == [b"whole"]


def test_a_client_that_ignores_its_stream_credit_loses_the_connection() -> None:
    c = clock()
    exit = Held()
    wire = Wire(quic_server(c, http_server(c, exit), streams=2), c)
    client = wire.connect()
    client.quic._remote_max_streams_bidi = 100  # noqa: SLF001 - a client that cheats
    for n in range(3):
        client.request(path=f"/{n}")
    wire.run(1.0)
    assert len(exit.held) == 2
    closed = client.of(ConnectionTerminated)
    assert closed and closed[0].error_code == QuicErrorCode.STREAM_LIMIT_ERROR
    assert wire.server.peers == set() and len(exit.lost) == 2


def test_a_silent_connection_ends_after_the_idle_timeout() -> None:
    c = clock()
    exit = Held()
    wire = Wire(quic_server(c, http_server(c, exit), idle_timeout=5), c)
    server = wire.server
    client = wire.connect()
    client.request()
    wire.run(0.1)
    assert server.open.value == 1 and len(exit.held) == 1
    wire.run(4.5)
    assert server.open.value == 1 and len(server.peers) == 1 and not exit.lost
    wire.run(1.0)
    assert server.open.value == 0 and server.peers == set() and server.by_id == {}
    assert len(exit.lost) == 1  # the request it held ended with it
    assert not [call for call in c.getDelayedCalls() if call.active()]


def test_talking_keeps_a_connection_past_the_idle_timeout() -> None:
    c = clock()
    wire = Wire(quic_server(c, http_server(c, GetOnly()), idle_timeout=5), c)
    client = wire.connect()
    for _ in range(4):
        wire.run(3)
        stream = client.request()
        wire.run(0.1)
        assert client.status(stream) == b"200"
    assert wire.server.open.value == 1


def test_a_handshake_not_done_in_time_ends_at_the_deadline() -> None:
    """A client that sends its Initial and nothing more (its address is not checked: `retry:
    false`, so the Initial alone opens a connection)."""
    c = clock()
    table = OpenConnections(1000)
    wire = Wire(quic_server(c, http_server(c, GetOnly()), retry=False, handshake_timeout=3,
                            table=table), c)
    server = wire.server
    client = wire.client()
    for data in client.flight():
        server.datagram_received(data, client.addr)
    client.mute = True
    assert len(server.peers) == 1 and server.open.value == 1 and table.total == 1
    assert wire.sent  # no Retry: the server's first flight answers the Initial
    wire.run(2.9)
    assert len(server.peers) == 1
    wire.run(0.2)
    assert server.peers == set() and server.open.value == 0 and table.total == 0
    failed = [e for e in server.events.recent if "BINDING_QUIC_HANDSHAKE_FAILED" in e]
    assert len(failed) == 1 and failed[0].endswith("127.0.0.1: no handshake within 3 s")
    assert server.metrics.counter("tls.handshakes", "quic0", outcome="failed",
                                  protocol="none").value == 1
    assert not [call for call in c.getDelayedCalls() if call.active()]
