"""The http binding's limits over HTTP/3, through its own site and routes as a quic server hands
it each connection: request heads (`header-count`, `header-bytes`), bodies (`body-bytes`, a bad
`content-length`, routes that take none) and what a client that does not acknowledge may make
the daemon hold (`h3-unsent-bytes`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from aioquic.h3.connection import ErrorCode
from aioquic.quic.events import StopSendingReceived
from twisted.logger import ILogObserver, globalLogPublisher
from zope.interface import implementer

from ssekd.bindings.http.channel import Limits
from ssekd.bindings.http.unsent import PROCESS, RETRY_AFTER
from tests.bindings.quic.wire import Client, Held, Wire, clock, http_server, quic_server
from tests.support.http_fakes import GetOnly, Upload


def _connect(exit: object, limits: Limits | None = None) -> tuple[Wire, Client]:
    c = clock()
    wire = Wire(quic_server(c, http_server(c, exit, limits)), c)
    return wire, wire.connect()


def _ask(wire: Wire, client: Client, method: str = "GET", path: str = "/", **kwargs: object
         ) -> int:
    stream = client.request(method, path, **kwargs)  # type: ignore[arg-type]
    wire.run(0.1)
    return stream


def _no_errors(wire: Wire) -> None:
    assert not [e for e in wire.server.events.recent if "ERROR" in e]
    assert len(wire.server.peers) == 1  # the connection goes on


def test_a_head_with_too_many_headers_or_bytes_is_431() -> None:
    wire, client = _connect(GetOnly(), Limits(header_count=5, header_bytes=1000))
    five = [(b"x-h%d" % n, b"v") for n in range(5)]
    assert client.status(_ask(wire, client, headers=five)) == b"200"
    six = [*five, (b"x-h5", b"v")]
    stream = _ask(wire, client, headers=six)
    assert client.status(stream) == b"431" and client.ended(stream)
    big = [(b"x-big", b"b" * 1000)]
    assert client.status(_ask(wire, client, headers=big)) == b"431"
    assert client.status(_ask(wire, client, headers=[(b"x-small", b"s" * 600)])) == b"200"
    _no_errors(wire)


def test_a_head_that_never_ends_is_refused_before_it_is_held_whole() -> None:
    """A HEADERS frame that announces a megabyte and comes in pieces: aioquic would keep every
    piece until the frame is whole; past 4 x `header-bytes` it is `431`, and the connection,
    with its other requests, goes on."""
    wire, client = _connect(GetOnly(), Limits(header_bytes=1000))
    stream = client.quic.get_next_available_stream_id()
    head = bytes([0x01]) + (1 << 20 | 0x80000000).to_bytes(4, "big")  # HEADERS, 1 MiB
    client.quic.send_stream_data(stream, head, end_stream=False)
    sent = 0
    while client.status(stream) is None and sent < 20:
        client.quic.send_stream_data(stream, b"\x00" * 600, end_stream=False)
        sent += 1
        wire.run(0.05)
    assert client.status(stream) == b"431"
    assert 600 * sent < 4000 + 2 * 600, "refused as the bound passed, not later"
    session = next(iter(wire.server.peers)).session
    kept = session.h3._stream.get(stream)  # noqa: SLF001 - what aioquic keeps of the stream
    assert kept is None or len(kept.buffer) == 0
    assert client.status(_ask(wire, client)) == b"200"
    assert len(wire.server.peers) == 1
    _no_errors(wire)


def test_a_body_past_body_bytes_is_413() -> None:
    exit = Upload()
    wire, client = _connect(exit, Limits(body_bytes=100))
    ok = _ask(wire, client, "POST", body=b"a" * 100)
    assert client.status(ok) == b"200" and client.body(ok) == b"100"
    # announced: refused before a byte of it is read
    announced = _ask(wire, client, "POST", headers=[(b"content-length", b"5000")], end=False)
    assert client.status(announced) == b"413"
    # not announced: refused once it passes the bound
    stream = client.request("POST", body=b"b" * 60, end=False)
    wire.run(0.1)
    assert client.status(stream) is None
    assert client.h3 is not None
    client.h3.send_data(stream, b"b" * 60, end_stream=True)
    wire.run(0.1)
    assert client.status(stream) == b"413"
    assert exit.bodies == [b"a" * 100]
    _no_errors(wire)


def test_a_bad_content_length_is_400_without_an_exception() -> None:
    exit = Upload()
    wire, client = _connect(exit)
    for lengths in ([b"abc"], [b"-1"], [b"1e3"], [b"5", b"6"], [b" 5"]):
        stream = _ask(wire, client, "POST", headers=[(b"content-length", v) for v in lengths],
                      body=b"hello")
        assert client.status(stream) == b"400", lengths
    assert exit.bodies == []
    good = _ask(wire, client, "POST", headers=[(b"content-length", b"5")], body=b"hello")
    assert client.status(good) == b"200" and exit.bodies == [b"hello"]
    _no_errors(wire)


def test_a_malformed_request_is_400_and_the_connections_other_requests_go_on() -> None:
    """RFC 9114 §4.1.2: an error of its stream, not of the connection, whose other requests
    (a browser's SSE streams) are not to be cut for it."""
    exit = Held()
    wire, client = _connect(exit)
    events = _ask(wire, client, path="/events")
    for head in ([(b"X-Capital", b"v")], [(b"connection", b"close")], [(b"te", b"gzip")]):
        stream = _ask(wire, client, headers=head)
        assert client.status(stream) == b"400", head
    request, _ = exit.held[0]
    request.write(b"data: on\n\n")
    another = _ask(wire, client, path="/more")
    assert client.body(events) == b": hello\n\ndata: on\n\n"
    assert client.status(another) == b"200" and len(exit.held) == 2
    _no_errors(wire)


def test_a_body_other_than_its_content_length_is_not_handed_on() -> None:
    """RFC 9114 §4.1.2: a request whose DATA does not add up to its content-length is
    malformed; the exit must not read a body its headers misstate."""
    exit = Upload()
    wire, client = _connect(exit)
    longer = _ask(wire, client, "POST", headers=[(b"content-length", b"5")],
                  body=b"hello, and more")
    shorter = _ask(wire, client, "POST", headers=[(b"content-length", b"50")], body=b"hi")
    assert client.status(longer) != b"200" and client.status(shorter) != b"200"
    assert exit.bodies == []
    _no_errors(wire)


def test_a_route_that_takes_no_body_is_answered_without_reading_it() -> None:
    exit = GetOnly()
    wire, client = _connect(exit)
    stream = client.request("POST", headers=[(b"content-length", b"100000")],
                            body=b"x" * 1000, end=False)  # and the rest never comes
    wire.run(0.1)
    assert client.status(stream) == b"405" and client.ended(stream)
    assert exit.rendered == [b"POST"]
    stops = [e for e in client.quic_events if isinstance(e, StopSendingReceived)]
    assert [e.stream_id for e in stops] == [stream]  # told to send no more of it
    _no_errors(wire)


@implementer(ILogObserver)
class _Failures:
    """What Twisted logs as failures (an exception in a request's render)."""

    def __init__(self) -> None:
        self.found: list[Any] = []

    def __call__(self, event: Any) -> None:
        if event.get("log_failure") is not None or event.get("isError"):
            self.found.append(event)


@pytest.fixture
def logged_errors() -> Iterator[list[Any]]:
    """What Twisted logs as failures while the test runs."""
    observer = _Failures()
    globalLogPublisher.addObserver(observer)
    yield observer.found
    globalLogPublisher.removeObserver(observer)


def test_a_whole_answer_alone_on_its_connection_goes_out_past_the_bound(
        logged_errors: list[Any]) -> None:
    """As over HTTP/2: the bound refuses a whole answer only when the connection holds others'
    bytes; on its own it goes out (else an answer bigger than the bound could never be had)."""
    wire, client = _connect(Held(), Limits(h3_unsent_bytes=65536))
    for n in range(3):  # later requests too: the server's QPACK acknowledgements are no answer
        stream = _ask(wire, client, path="/whole/100000")
        wire.run(0.5)
        assert client.status(stream) == b"200", n
        assert len(client.body(stream)) == 100000
    assert logged_errors == []
    _no_errors(wire)


def test_an_answer_of_no_announced_length_past_the_bound_is_cut_quietly(
        logged_errors: list[Any]) -> None:
    """Written whole in parts with no length announced: cut (its stream reset) at the write
    that would pass the bound; the exit's own end of it goes on without an error."""
    exit = Held()
    wire, client = _connect(exit, Limits(h3_unsent_bytes=65536))
    stream = _ask(wire, client, path="/parts/30000/4")
    assert client.reset(stream) == ErrorCode.H3_REQUEST_CANCELLED
    assert exit.finished == 1 and logged_errors == []
    small = _ask(wire, client, path="/parts/1000/4")  # within the bound: whole
    assert client.status(small) == b"200" and len(client.body(small)) == 4000
    _no_errors(wire)


def test_a_client_that_acknowledges_nothing_gets_its_producers_paused_and_big_answers_503(
) -> None:
    start = PROCESS.held
    exit = Held()
    wire, client = _connect(exit, Limits(h3_unsent_bytes=65536))
    streams = [_ask(wire, client, path=f"/events/{n}") for n in range(2)]
    assert len(exit.held) == 2 and not any(p.paused for _, p in exit.held)
    big = _ask(wire, client, path="/whole/70000")  # past the bound, but nothing else waits
    wire.run(0.5)
    assert client.status(big) == b"200" and len(client.body(big)) == 70000
    # it held the connection over its bound a moment: the streams paused, then went on
    assert not any(p.paused for _, p in exit.held)
    pauses = [(p.pauses, p.resumes) for _, p in exit.held]

    client.deaf = True  # from now on nothing the server sends is acknowledged
    for _ in range(5):
        for request, _ in exit.held:
            request.write(b"data: " + b"e" * 8000 + b"\n\n")
        wire.run(0.01)
    assert [(p.pauses, p.resumes) for _, p in exit.held] == [(n + 1, r) for n, r in pauses]
    refused = client.request(path="/whole/70000")
    wire.run(0.01)
    assert len(exit.held) == 2

    client.deaf = False  # the client hears again: what was lost is sent again, and acknowledged
    wire.run(3.0, until=lambda: client.status(refused) is not None
              and not any(p.paused for _, p in exit.held))
    headers = client.response_headers(refused)
    assert headers[b":status"] == b"503" and headers[b"retry-after"] == RETRY_AFTER
    assert client.body(refused) == b""
    assert [(p.pauses, p.resumes) for _, p in exit.held] == [(n + 1, r + 1) for n, r in pauses]
    assert all(client.body(s).count(b"data: ") == 5 for s in streams)  # nothing lost
    client.quic.close()
    wire.run(1.0)
    assert PROCESS.held == start  # what the connection held is given back
