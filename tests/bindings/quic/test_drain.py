"""The end of a quic server's connections: a drain (GOAWAY, the requests already made go on),
the daemon's stop (every connection closed at once), and a reload (the connections of the
replaced server go on beside the new server's, on the same socket)."""

from __future__ import annotations

from collections.abc import Callable

from aioquic.buffer import Buffer  # type: ignore[attr-defined]
from aioquic.h3.connection import ErrorCode, FrameType
from aioquic.quic.events import ConnectionTerminated, HandshakeCompleted, StreamDataReceived

from ssekd.datagrams import DatagramSwitch
from ssekd.health import Health
from ssekd.spi.connection import Peer
from tests.bindings.quic.wire import Client, Held, Wire, clock, http_server, quic_server


def control_frames(client: Client) -> list[tuple[int, bytes]]:
    """The frames of the server's HTTP/3 control stream as the client received them (aioquic's
    client reads GOAWAY without saying so)."""
    data = b"".join(e.data for e in client.quic_events
                    if isinstance(e, StreamDataReceived) and e.stream_id == 3)
    buf = Buffer(data=data)
    assert buf.pull_uint_var() == 0  # a control stream
    frames = []
    while not buf.eof():
        kind = buf.pull_uint_var()
        frames.append((kind, buf.pull_bytes(buf.pull_uint_var())))
    return frames


def goaway(client: Client) -> int | None:
    for kind, payload in control_frames(client):
        if kind == FrameType.GOAWAY:
            return int(Buffer(data=payload).pull_uint_var())
    return None


def test_a_drain_sends_goaway_and_rejects_new_requests_while_the_old_go_on() -> None:
    c = clock()
    exit = Held()
    health = Health(c)
    server = quic_server(c, http_server(c, exit), health=health)
    server.startService()
    wire = Wire(server, c)
    client = wire.connect()
    streams = [client.request(path=f"/{n}") for n in range(2)]
    wire.run(0.1)
    assert len(exit.held) == 2 and goaway(client) is None

    health.draining = True
    wire.run(0.6)  # the server looks twice a second
    assert goaway(client) == streams[-1] + 4  # the first request stream it did not serve
    late = client.request(path="/late")
    wire.run(0.1)
    assert client.reset(late) == ErrorCode.H3_REQUEST_REJECTED
    assert len(exit.held) == 2  # the late request never reached the exit

    request, _ = exit.held[1]
    request.write(b"data: still here\n\n")  # what was asked before goes on
    wire.run(0.1)
    assert client.body(streams[1]).endswith(b"data: still here\n\n")

    # a client new to the server gets nothing at all, not even a Retry
    before = len(wire.sent)
    newcomer = wire.client(40001)
    wire.run(0.3)
    assert not newcomer.of(HandshakeCompleted)
    assert not [addr for _, addr in wire.sent[before:] if addr == newcomer.addr]
    assert len(server.peers) == 1
    server.stop()
    wire.run(1.0)


def test_a_connection_made_while_draining_gets_goaway_at_once() -> None:
    """Made between the drain and the server's next look at it (retry off: no check either)."""
    c = clock()
    health = Health(c)
    server = quic_server(c, http_server(c, Held()), health=health)
    server.startService()
    wire = Wire(server, c)
    client = wire.connect()
    health.draining = True
    server._watch_drain()  # noqa: SLF001 - the look the reactor would make
    assert goaway(client) is None
    wire.run(0.1)
    assert goaway(client) == 0  # nothing served on it: every request stream refused


def test_stop_closes_every_connection_at_once() -> None:
    c = clock()
    exit = Held()
    server = quic_server(c, http_server(c, exit))
    server.startService()
    wire = Wire(server, c)
    clients = [wire.connect(40000 + n) for n in range(3)]
    for client in clients:
        client.request()
    wire.run(0.1)
    assert len(exit.held) == 3

    server.stop()
    wire.run(1.0)  # the closing period: three probe timeouts
    for client in clients:
        closed = client.of(ConnectionTerminated)
        assert closed and closed[0].error_code == ErrorCode.H3_NO_ERROR
        assert closed[0].reason_phrase == "server stopping"
    assert len(exit.lost) == 3  # the requests ended with their connections
    assert server.peers == set() and server.open.value == 0 and server.idle
    assert not [call for call in c.getDelayedCalls() if call.active()]


class _Transport:
    """The UDP port under a `DatagramSwitch`: what it writes goes to `send`."""

    def __init__(self, send: Callable[[bytes, Peer], None]) -> None:
        self.send = send

    def write(self, data: bytes, addr: Peer) -> None:
        self.send(data, addr)


class _Port:
    """A `DatagramSwitch` as a `Wire` drives a receiver (the engine's socket, in memory)."""

    def __init__(self, switch: DatagramSwitch) -> None:
        self.switch = switch

    def start(self, send: Callable[[bytes, Peer], None], shard: tuple[int, int]) -> None:
        self.switch.transport = _Transport(send)  # type: ignore[assignment]
        self.switch.startProtocol()

    def datagram_received(self, data: bytes, peer: Peer) -> None:
        self.switch.datagramReceived(data, peer)


def test_a_reload_keeps_the_replaced_servers_connections_on_the_socket() -> None:
    c = clock()
    old_exit, new_exit = Held(), Held()
    old = quic_server(c, http_server(c, old_exit))
    switch = DatagramSwitch(old)
    wire = Wire(_Port(switch), c)  # type: ignore[arg-type]
    staying = wire.connect(40000)

    new = quic_server(c, http_server(c, new_exit))
    switch.replace(new)  # a reload built another quic server for the same port
    assert switch.retired == [old]
    arriving = wire.connect(40001)
    staying.request(path="/events")
    stream = arriving.request(path="/events")
    wire.run(0.1)
    assert len(old_exit.held) == 1 and len(new_exit.held) == 1
    assert len(old.peers) == 1 and len(new.peers) == 1

    staying.quic.close()
    wire.run(1.0)
    assert old.idle
    request, _ = new_exit.held[0]
    request.write(b"data: on\n\n")
    wire.run(0.1)
    assert switch.retired == []  # dropped at the next datagram once its last client left
    assert arriving.body(stream) == b": hello\n\ndata: on\n\n"
    switch.stop()
    wire.run(1.0)
    assert new.idle and arriving.of(ConnectionTerminated)
