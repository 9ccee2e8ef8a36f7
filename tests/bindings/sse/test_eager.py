"""`eager` and `send_now`: a stream at the tail sends at once when nothing is queued for its connection,
and never lets its bytes overtake what Twisted still holds (ssekd/bindings/sse/eager.py)."""

from __future__ import annotations

import socket

from twisted.internet import tcp
from twisted.internet.protocol import Protocol
from twisted.internet.testing import MemoryReactorClock, StringTransport

from ssekd.bindings.sse.eager import eager, send_now


def _read(sock: socket.socket) -> bytes:
    out = b""
    while True:
        try:
            got = sock.recv(1 << 20)
        except BlockingIOError:
            return out
        out += got


def test_sends_at_once_when_idle_and_keeps_the_order_behind_queued_bytes() -> None:
    a, b = socket.socketpair()
    b.setblocking(False)
    reactor = MemoryReactorClock()
    conn = tcp.Connection(a, Protocol(), reactor)
    conn.connected = 1
    try:
        assert eager(conn)

        def write(data: bytes) -> None:
            send_now(conn, data)

        write(b"one")
        assert _read(b) == b"one"
        assert reactor.getWriters() == [], "sent without asking the reactor to watch the socket"
        conn.write(b"two")  # queued the Twisted way: waits for the reactor
        write(b"three")
        assert _read(b) == b"", "must not overtake the queued bytes"
        conn.doWrite()
        assert _read(b) == b"twothree"
        big = bytes(range(256)) * (1 << 16)  # 16 MiB: more than the socket takes at once
        write(big)
        got = _read(b)
        assert 0 < len(got) < len(big), "the rest is queued in Twisted's buffer"
        while len(got) < len(big):
            conn.doWrite()
            got += _read(b)
        assert got == big
    finally:
        a.close()
        b.close()


def test_tcp_connections_written_eagerly_have_nagle_off() -> None:
    server = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(server.getsockname())
    accepted, _ = server.accept()
    try:
        conn = tcp.Connection(accepted, Protocol(), MemoryReactorClock())
        conn.connected = 1
        assert eager(conn)
        send_now(conn, b"x")
        assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
        assert client.recv(1) == b"x"
    finally:
        for s in (server, client, accepted):
            s.close()


def test_other_transports_keep_their_own_write() -> None:
    assert not eager(StringTransport())
