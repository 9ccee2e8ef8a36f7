"""The http binding's stream writer (ssekd/bindings/http/stream_writer.py): the writer chosen for
the connection, HTTP/1.1 chunks framed once for a group of streams, the cut; and `eager` and
`send_now`: a stream at the tail sends at once when nothing is queued for its connection, and
never lets its bytes overtake what Twisted still holds."""

from __future__ import annotations

import socket
from typing import Any

import h2.events
from twisted.internet import tcp
from twisted.internet.protocol import Protocol
from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.web.server import NOT_DONE_YET, Request

from ssekd.bindings.http import stream_writer
from ssekd.bindings.http.roles import HttpContext
from ssekd.bindings.http.stream_writer import (
    ChunkedWriter,
    RequestWriter,
    StreamWriter,
    eager,
    send_now,
    start_stream,
)
from tests.support.http_fakes import H2Peer, http11, http_site


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


class Streaming:
    """An exit that opens a stream as the sse binding does, and keeps its writer."""

    max_idle: float | None = None
    takes_body = False

    def __init__(self, shared: bool = True) -> None:
        self.shared = shared
        self.writers: list[StreamWriter] = []

    def render(self, request: Request, ctx: HttpContext) -> int:
        request.setHeader(b"content-type", b"text/event-stream")
        self.writers.append(start_stream(request, b"retry:1\n\n", self.shared))
        return NOT_DONE_YET


def _http11_stream(clock: MemoryReactorClock, exit: Streaming) -> tuple[Any, StringTransport]:
    proto, transport = http11(http_site(clock, exit))
    proto.dataReceived(b"GET /events HTTP/1.1\r\nHost: localhost\r\n\r\n")
    return proto, transport


def test_http11_chunks_go_to_the_transport_framed_once_for_a_group() -> None:
    clock = MemoryReactorClock()
    exit = Streaming()
    (_, one), (_, two) = _http11_stream(clock, exit), _http11_stream(clock, exit)
    assert all(isinstance(w, ChunkedWriter) for w in exit.writers)
    assert one.value().endswith(b"\r\n\r\n9\r\nretry:1\n\n\r\n"), "headers, then the first chunk"
    one.clear()
    two.clear()
    batch = b"id:1\ndata:x\n\n"
    exit.writers[0].write(batch)
    framed = stream_writer._FRAMED.pair[1]
    exit.writers[1].write(batch)
    assert stream_writer._FRAMED.pair[1] is framed, "the second stream reuses the first's chunk"
    assert one.value() == two.value() == b"%x\r\n%b\r\n" % (len(batch), batch)


def test_a_streams_own_bytes_leave_the_shared_chunk_alone() -> None:
    clock = MemoryReactorClock()
    own, shared = Streaming(shared=False), Streaming()
    (_, t_own), _ = _http11_stream(clock, own), _http11_stream(clock, shared)
    batch = b"data:y\n\n"
    shared.writers[0].write(batch)
    cached = stream_writer._FRAMED.pair
    t_own.clear()
    own.writers[0].write(b"gzip bytes")
    assert stream_writer._FRAMED.pair is cached
    assert t_own.value() == b"a\r\ngzip bytes\r\n"


def test_http11_reset_aborts_the_connection() -> None:
    clock = MemoryReactorClock()
    exit = Streaming()
    _, transport = _http11_stream(clock, exit)
    exit.writers[0].reset()
    assert transport.disconnected  # what StringTransport.abortConnection sets


def test_http2_writes_are_data_frames_and_reset_is_rst_stream() -> None:
    clock = MemoryReactorClock()
    exit = Streaming()
    peer = H2Peer(http_site(clock, exit))
    first, second = peer.request("GET", "/events"), peer.request("GET", "/events")
    peer.send()
    peer.read()
    assert all(isinstance(w, RequestWriter) for w in exit.writers)
    exit.writers[0].write(b"data:z\n\n")
    peer.read()
    data = b"".join(e.data for e in peer.of(h2.events.DataReceived, first))
    assert data == b"retry:1\n\ndata:z\n\n"
    exit.writers[0].reset()
    peer.read()
    assert peer.of(h2.events.StreamReset, first), "RST_STREAM for that stream"
    assert not peer.of(h2.events.StreamReset, second) and peer.goaway() is None, \
        "the connection and its other streams go on"


class _Counted:
    """What a `ChunkedWriter` needs of its request: the count `Request.write` would keep."""

    sentLength = 0


def test_write_each_sends_to_each_writer_what_its_write_would_in_order() -> None:
    """`write_each` (a group's batch in one loop) against `write` stream by stream: the same
    bytes on each connection, the same counts, and never ahead of what Twisted still holds for
    a connection (its bytes then queue behind them); a transport that is not plain TCP gets
    Twisted's write."""
    pairs = [socket.socketpair() for _ in range(3)]
    reactor = MemoryReactorClock()
    conns = []
    for a, b in pairs:
        b.setblocking(False)
        conn = tcp.Connection(a, Protocol(), reactor)
        conn.connected = 1
        conns.append(conn)
    other = StringTransport()
    writers = [ChunkedWriter(_Counted(), t, eager(t)) for t in (*conns, other)]
    try:
        conns[1].write(b"queued ")  # waits for the reactor: the batch must not overtake it
        batch = b"id:1\ndata:x\n\n"
        stream_writer.write_each(writers, batch)
        framed = b"%x\r\n%b\r\n" % (len(batch), batch)
        assert _read(pairs[0][1]) == framed, "sent at once"
        assert _read(pairs[1][1]) == b"", "behind the queued bytes"
        conns[1].doWrite()
        assert _read(pairs[1][1]) == b"queued " + framed
        assert _read(pairs[2][1]) == framed
        assert other.value() == framed
        assert [w.request.sentLength for w in writers] == [0] * 4, "counted as it ends"
        for w in writers:
            w.settle()
        assert [w.request.sentLength for w in writers] == [len(batch)] * 4
        assert stream_writer._FRAMED.pair == (batch, framed), "framed once for the group"
    finally:
        for a, b in pairs:
            a.close()
            b.close()


def test_write_each_never_overtakes_what_a_partial_send_left_with_twisted() -> None:
    """A stream whose last send left bytes with Twisted looks into the transport's buffer again:
    the next batch goes behind them, and straight out once they are gone."""
    a, b = socket.socketpair()
    b.setblocking(False)
    conn = tcp.Connection(a, Protocol(), MemoryReactorClock())
    conn.connected = 1
    writer = ChunkedWriter(_Counted(), conn, eager(conn))
    try:
        big = bytes(range(256)) * (1 << 16)  # 16 MiB: more than the socket takes at once
        stream_writer.write_each([writer], big)
        assert writer.direct is None, "the rest is queued with Twisted"
        stream_writer.write_each([writer], b"after")
        expected = b"%x\r\n%b\r\n5\r\nafter\r\n" % (len(big), big)
        got = _read(b)
        while len(got) < len(expected):
            conn.doWrite()
            got += _read(b)
        assert got == expected
        stream_writer.write_each([writer], b"then")
        assert writer.direct is conn.socket and _read(b) == b"4\r\nthen\r\n"
        writer.write(b"one")  # the single-stream path may queue: the next batch looks again
        assert writer.direct is None and _read(b) == b"3\r\none\r\n"
    finally:
        a.close()
        b.close()
