"""Connection migration: a client whose address changes (a phone leaving Wi-Fi) keeps its
connection and the streams it holds; the server checks the new address, then sends there."""

from __future__ import annotations

from ssekd.bindings.connection_limits import OpenConnections
from tests.bindings.quic.wire import Held, Wire, clock, http_server, quic_server

OLD = ("127.0.0.1", 40000)
NEW = ("192.0.2.7", 51000)


def test_a_client_that_moves_keeps_its_connection_and_streams() -> None:
    c = clock()
    exit = Held()
    table = OpenConnections(1000)
    server = quic_server(c, http_server(c, exit), table=table)
    wire = Wire(server, c)
    client = wire.connect(OLD[1])
    before = client.request(path="/events")
    wire.run(0.1)
    assert client.body(before) == b": hello\n\n"
    peer = next(iter(server.peers))

    client.move(NEW)
    client.quic.change_connection_id()  # as a client moving should: not linkable to the old
    sent_before = len(wire.sent)
    after = client.request(path="/whole/5")
    wire.run(0.2)
    assert client.status(after) == b"200" and client.body(after) == b"wwwww"
    to = {addr for _, addr in wire.sent[sent_before:]}
    assert to == {NEW}  # nothing more to where the client was
    path = peer.quic._network_paths[0]  # noqa: SLF001 - aioquic's paths, newest first
    assert path.addr == NEW and path.is_validated
    assert peer.peer == NEW
    assert server.migrations.value == 1
    moved = [e for e in server.events.recent if "BINDING_QUIC_MIGRATED" in e]
    assert len(moved) == 1 and moved[0].endswith("127.0.0.1:40000 -> 192.0.2.7:51000")

    # the stream opened before the move goes on, at the new address
    request, _ = exit.held[0]
    request.write(b"data: after the move\n\n")
    wire.run(0.1)
    assert client.body(before) == b": hello\n\ndata: after the move\n\n"
    assert len(server.peers) == 1 and server.open.value == 1

    # counted under the address it began from, and given back from there
    client.quic.close()
    wire.run(1.0)
    assert server.peers == set() and table.total == 0


def test_packets_from_a_new_address_that_only_probe_do_not_move_the_connection() -> None:
    """A datagram the server cannot read, with the connection's id, from elsewhere (an
    attacker who saw the id): the connection stays where it is."""
    c = clock()
    server = quic_server(c, http_server(c, Held()))
    wire = Wire(server, c)
    client = wire.connect(OLD[1])
    cid = client.quic._peer_cid.cid  # noqa: SLF001
    server.datagram_received(bytes([0x41]) + cid + bytes(60), NEW)
    wire.run(0.1)
    peer = next(iter(server.peers))
    assert peer.peer == OLD and server.migrations.value == 0
    assert all(addr == OLD for _, addr in wire.sent)
    stream = client.request(path="/whole/3")
    wire.run(0.1)
    assert client.status(stream) == b"200"
