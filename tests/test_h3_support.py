"""The HTTP/3 tests' own tools, checked on their own: the SSE parser of `tests.support.h3client`
(whatever way the bytes are cut into chunks, the same events) and the lossy UDP relay (it loses
and reorders what it says, seeded, and passes the rest intact)."""

from __future__ import annotations

import socket

from tests.support.h3client import SseEvent, SseParser
from tests.support.udp_relay import UdpRelay
from tests.support.wait import wait_until

STREAM = (b"\xef\xbb\xbf: hello\r\n\r\nretry: 1500\nid: 1\ndata: one\r\n\r\n"
          b"event: tick\rdata:two\rdata: lines\r\rid: bad\0id\ndata:\n\n"
          b"id\ndata: no id\n\ndata: unfinished")


def _parse(chunks: list[bytes]) -> tuple[list[tuple[str, str, str]], SseParser]:
    parser = SseParser()
    events: list[SseEvent] = []
    for chunk in chunks:
        events += parser.feed(chunk, 0.0)
    return [(e.id, e.event, e.data) for e in events], parser


def test_sse_parser_gives_the_same_events_however_the_bytes_are_cut() -> None:
    whole, parser = _parse([STREAM])
    assert whole == [("1", "message", "one"), ("1", "tick", "two\nlines"),
                     ("1", "message", ""), ("", "message", "no id")]
    assert parser.retry == 1500 and parser.comments == 1
    for size in (1, 2, 3, 5, 7):
        chunks = [STREAM[i:i + size] for i in range(0, len(STREAM), size)]
        assert _parse(chunks)[0] == whole, size


def _read_all(sock: socket.socket) -> list[int]:
    got = []
    try:
        while True:
            got.append(int(sock.recvfrom(100)[0]))
    except TimeoutError:
        return got


def test_udp_relay_loses_and_reorders_what_it_counts_and_passes_the_rest() -> None:
    echo = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    echo.bind(("127.0.0.1", 0))
    client = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    client.bind(("127.0.0.1", 0))
    client.settimeout(0.5)
    sent = 400
    with UdpRelay(echo.getsockname(), drop=0.05, reorder=0.05, seed=3) as relay:
        arrived: list[int] = []
        echo.settimeout(0.002)  # read as they come: a socket's buffer holds a few hundred
        for n in range(sent):
            client.sendto(b"%d" % n, relay.address)
            arrived += _read_all(echo)
        echo.settimeout(0.5)
        arrived += _read_all(echo)
        assert relay.dropped["up"] + len(arrived) == sent
        assert 0 < relay.dropped["up"] < sent * 0.15
        assert relay.reordered["up"] > 0
        assert sorted(arrived) != arrived  # some overtook others
        assert len(set(arrived)) == len(arrived)  # nothing twice
        # and back: the relay knows the client by its address
        upstream = relay.upstream_addresses()
        assert len(upstream) == 1
        relay.set_loss(0.0, 0.0)
        echo.sendto(b"back", upstream[0])
        assert client.recvfrom(100)[0] == b"back"
        wait_until(lambda: relay.forwarded["down"] == 1, 2)  # counted just after it is sent
    echo.close()
    client.close()
