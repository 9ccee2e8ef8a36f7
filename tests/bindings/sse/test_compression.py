"""gzip on event streams (an ssekd addition, the sse server's `compression`): who gets it
(`Accept-Encoding`, and never a route that says `compress: false`), that every write is
flushed so a client decodes each event as it comes, the trailer closing a stream that ends,
and that `context: event` takes away the length oracle a shared window is (issue 36 item 7)."""

from __future__ import annotations

import gzip
import zlib
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from twisted.internet.testing import MemoryReactorClock

from ssekd.bindings.http.roles import HttpContext
from ssekd.bindings.sse.compression import CONTEXTS, Compression, Context, GzipWriter, accepts_gzip
from ssekd.telemetry.metrics import Metrics
from tests.bindings.sse.test_sse_server import FakeSource, _request, _server


@pytest.mark.parametrize(("header", "gzip_ok"), [
    (None, False),
    ("", False),
    ("gzip", True),
    ("GZip", True),
    ("x-gzip", True),
    ("gzip, deflate, br, zstd", True),  # what a browser sends
    ("deflate, br", False),
    ("identity", False),
    ("*", True),
    ("*;q=0", False),
    ("gzip;q=0", False),
    ("gzip;q=0, *", False),  # gzip named and refused: the wildcard does not bring it back
    ("gzip;q=0.001", True),
    ("gzip; q=0.5, identity", True),
    ("br;q=1, gzip;q=0.8", True),
    ("gzip;q=", False),  # does not parse: no
    ("gzip;level=9", False),
    ("gzip;q=nan", False),
    ("gz\u00efp", False),
    (b"gzip", True),
])
def test_who_asks_for_gzip(header: str | bytes | None, gzip_ok: bool) -> None:
    assert accepts_gzip(header) is gzip_ok


def _decoder() -> Any:
    return zlib.decompressobj(16 + zlib.MAX_WBITS)


#: Bytes that end events, split a line's end and are neither, as an event writer's may hold.
_SSE_BYTES = st.lists(st.sampled_from([b"\n\n", b"\n", b"data:", b"x", b"\x00\xff", b"\n\n\n"])
                      | st.binary(max_size=300), max_size=20).map(b"".join)


@given(st.lists(st.binary(max_size=3000) | _SSE_BYTES, max_size=12), st.integers(1, 9),
       st.integers(9, 15), st.integers(1, 9), st.sampled_from(CONTEXTS))
def test_each_write_decodes_at_once_and_the_whole_is_one_gzip_member(
        writes: list[bytes], level: int, window_bits: int, memory_level: int,
        context: Context) -> None:
    writer = GzipWriter(Compression(level, window_bits, memory_level, context))
    decoder = _decoder()
    sent = []
    for data in writes:
        out = writer.write(data)
        assert out, "a write always sends something (the flush marker at least)"
        sent.append(out)
        assert decoder.decompress(out) == data, "flushed: nothing held back"
    sent.append(writer.finish())
    assert gzip.decompress(b"".join(sent)) == b"".join(writes)
    assert (writer.plain, writer.sent) == (sum(map(len, writes)), sum(map(len, sent)))


#: A session token in one writer's event, and a record another writer controls that may repeat
#: it: what a stream that mixes writers (a shared topic, a feed of everyone's changes) carries.
SECRET = b"tok_Q7xK2mZ9vR4p"
#: Wrong guesses of the same length and letters (so, alone, each costs what the secret does):
#: reversed, its halves swapped (each half a match: smaller, not as small), shuffled.
WRONG = [b"tok_" + bytes(reversed(SECRET[4:])), b"tok_" + SECRET[10:] + SECRET[4:10],
         b"tok_" + SECRET[4:][1::2] + SECRET[4:][::2]]


def _secret(n: int) -> bytes:
    return b'id:%d\ndata:{"user":"alice","session":"%s"}\n\n' % (n, SECRET)


def _guess(n: int, guess: bytes) -> bytes:
    return b'id:%d\ndata:{"user":"mallory","session":"%s"}\n\n' % (n, guess)


def _guess_sizes(context: Context, batched: bool) -> dict[bytes, int]:
    """For each guess, the bytes its event costs on a stream that carried the secret before
    (`batched`: the bytes of one write holding the secret and then the guess, as a catching-up
    stream gets them)."""
    assert all(len(w) == len(SECRET) and sorted(w) == sorted(SECRET) for w in WRONG)
    sizes = {}
    for guess in [SECRET, *WRONG]:
        writer = GzipWriter(Compression(context=context))
        writer.write(b"retry:1000\n\n")
        if batched:  # the write is both: the secret's share is the same for every guess
            sizes[guess] = len(writer.write(_secret(1) + _guess(2, guess)))
        else:
            writer.write(_secret(1))
            writer.write(b'id:2\ndata:{"user":"mallory","note":"hello"}\n\n')
            sizes[guess] = len(writer.write(_guess(3, guess)))
    return sizes


@pytest.mark.parametrize("batched", [False, True], ids=["a-write-each", "one-write"])
def test_a_shared_context_is_a_length_oracle_and_context_event_is_not(batched: bool) -> None:
    """`context: stream` (the default): the guess that repeats the secret sent earlier costs
    fewer bytes than every wrong guess, so a writer who sees the sizes learns the secret.
    `context: event`: every guess of that length costs the same, in separate writes and when
    the secret and the guess share a write."""
    shared = _guess_sizes("stream", batched)
    assert all(shared[SECRET] < shared[w] for w in WRONG), shared
    alone = _guess_sizes("event", batched)
    assert len(set(alone.values())) == 1, alone
    assert Compression().context == "stream", "the default keeps what streams get today"


@given(st.lists(_SSE_BYTES, max_size=6), st.lists(_SSE_BYTES, max_size=6),
       st.lists(st.binary(min_size=1, max_size=400).map(lambda b: b + b"\n\n"), min_size=1,
                max_size=4),
       st.integers(1, 9), st.integers(9, 15), st.integers(1, 9))
def test_with_context_event_an_event_costs_the_same_whatever_came_before(
        history: list[bytes], other: list[bytes], events: list[bytes], level: int,
        window_bits: int, memory_level: int) -> None:
    """Whatever two streams were sent before, the same events then cost the same bytes on each:
    nothing of the history reaches them (and each write is still decodable as it comes)."""
    settings = Compression(level, window_bits, memory_level, "event")
    outs = []
    for past in (history, other):
        writer = GzipWriter(settings)
        decoder = _decoder()
        for data in [b"", *past]:
            decoder.decompress(writer.write(data))
        out = writer.write(b"".join(events))
        assert decoder.decompress(out) == b"".join(events)
        outs.append(out)
    assert outs[0] == outs[1]


def test_memory_per_stream_is_zlibs_formula() -> None:
    assert Compression().memory_per_stream() == 4096 + 1024 + 6_200
    assert Compression(6, 15, 8).memory_per_stream() == 131_072 + 131_072 + 6_200


class Handle:
    def __init__(self, compress: bool = True) -> None:
        self.compress = compress
        self.closed = False

    def pause(self) -> None: ...

    def resume(self) -> None: ...

    def close(self) -> None:
        self.closed = True


def _open(accept: bytes | None, compress: bool = True,
          compression: Compression | None = Compression()) -> tuple[Any, Any, Metrics]:
    clock = MemoryReactorClock()
    source = FakeSource(Handle(compress))
    metrics = Metrics()
    server = _server(source, clock, retry=1000, max_idle=5.0, compression=compression,
                     metrics=metrics)
    req = _request(headers={b"accept-encoding": accept} if accept is not None else {})
    server.render(req, HttpContext("http"))
    return req, (source, clock, server), metrics


@pytest.mark.parametrize("context", CONTEXTS)
def test_a_client_that_asks_gets_gzip_flushed_per_write(context: Context) -> None:
    req, (source, clock, server), metrics = _open(b"gzip, deflate, br",
                                                  compression=Compression(context=context))
    headers = req.responseHeaders
    assert headers.getRawHeaders(b"content-encoding") == [b"gzip"]
    assert headers.getRawHeaders(b"vary") == [b"Accept-Encoding"]
    decoder = _decoder()
    assert decoder.decompress(b"".join(req.written)) == b"retry:1000\n\n"
    seen = len(req.written)
    source.sink.write(b"id:1\ndata:{\"a\":1}\n\n")
    assert decoder.decompress(b"".join(req.written[seen:])) == b"id:1\ndata:{\"a\":1}\n\n"
    seen = len(req.written)
    clock.advance(5)  # the keepalive is compressed as well
    assert decoder.decompress(b"".join(req.written[seen:])) == b":\n\n"
    sent = metrics.counter("stream.data.sent", "sse").value
    assert metrics.counter("sse.gzip.input", "sse").value == len(b"id:1\ndata:{\"a\":1}\n\n:\n\n")
    assert sent == sum(map(len, req.written[1:])), "the bytes on the wire are counted"
    source.sink.end("drain")
    assert gzip.decompress(b"".join(req.written)) == \
        b"retry:1000\n\nid:1\ndata:{\"a\":1}\n\n:\n\n", "the trailer ends the member"
    assert req.finished


@pytest.mark.parametrize(("accept", "compress", "compression", "vary"), [
    (None, True, Compression(), True),
    (b"identity", True, Compression(), True),
    (b"gzip", False, Compression(), True),  # the route's records are compressed already
    (b"gzip", True, None, False),  # off by default
])
def test_plain_unless_asked_allowed_and_on(accept: bytes | None, compress: bool,
                                           compression: Compression | None, vary: bool) -> None:
    req, (source, _, _), _ = _open(accept, compress, compression)
    source.sink.write(b"data:x\n\n")
    assert b"".join(req.written) == b"retry:1000\n\ndata:x\n\n"
    assert not req.responseHeaders.hasHeader(b"content-encoding")
    assert req.responseHeaders.hasHeader(b"vary") is vary
