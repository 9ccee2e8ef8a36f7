"""gzip on event streams (an ssekd addition, the sse server's `compression`): who gets it
(`Accept-Encoding`, and never a route that says `compress: false`), and that every write is
flushed so a client decodes each event as it comes, the trailer closing a stream that ends."""

from __future__ import annotations

import gzip
import zlib
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from twisted.internet.testing import MemoryReactorClock

from ssekd.bindings.http.roles import HttpContext
from ssekd.bindings.sse.compression import Compression, GzipWriter, accepts_gzip
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


@given(st.lists(st.binary(max_size=3000), max_size=12), st.integers(1, 9), st.integers(9, 15),
       st.integers(1, 9))
def test_each_write_decodes_at_once_and_the_whole_is_one_gzip_member(
        writes: list[bytes], level: int, window_bits: int, memory_level: int) -> None:
    writer = GzipWriter(Compression(level, window_bits, memory_level))
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


def test_a_client_that_asks_gets_gzip_flushed_per_write() -> None:
    req, (source, clock, server), metrics = _open(b"gzip, deflate, br")
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
