"""HTTP/1.1 request smuggling: every way a request's body length can be read two ways is a `400`
and a closed connection, so a proxy in front and ssekd can never disagree on where one request
ends and the next begins. In process (the http binding's own channel over a `StringTransport`),
and against the running daemon with raw sockets.

The audit of issue 23 found these refused; `Transfer-Encoding: chunked` followed by a second
`Transfer-Encoding: identity` header was read as chunked by Twisted, where RFC 9112 makes the
final coding `identity` (a `400`); a `Transfer-Encoding` other than `chunked` is now refused
too."""

from __future__ import annotations

import pytest
from twisted.internet.testing import MemoryReactorClock

from tests.support.daemon import Daemon
from tests.support.http import raw
from tests.support.http_fakes import Upload, http11, http_site

SMUGGLED = b"GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n"
HEAD = b"POST /up HTTP/1.1\r\nHost: x\r\n"

CASES = {
    "CL.TE": HEAD + b"Content-Length: 6\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + SMUGGLED,
    "TE.CL": HEAD + b"Transfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n"
                    b"29\r\n" + SMUGGLED + b"\r\n0\r\n\r\n",
    "two Content-Length": HEAD + b"Content-Length: 0\r\nContent-Length: 37\r\n\r\n" + SMUGGLED,
    "Content-Length list": HEAD + b"Content-Length: 0, 37\r\n\r\n" + SMUGGLED,
    "Content-Length +": HEAD + b"Content-Length: +37\r\n\r\n" + SMUGGLED,
    "Content-Length negative": HEAD + b"Content-Length: -1\r\n\r\n" + SMUGGLED,
    "chunked, identity": HEAD + b"Transfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n" + SMUGGLED,
    "xchunked": HEAD + b"Transfer-Encoding: xchunked\r\nContent-Length: 0\r\n\r\n" + SMUGGLED,
    "space before colon": HEAD + b"Transfer-Encoding : chunked\r\n\r\n0\r\n\r\n" + SMUGGLED,
    "folded header": HEAD + b"Content-Length: 0\r\n Transfer-Encoding: chunked\r\n\r\n"
                     + SMUGGLED,
    "chunk size 0x": HEAD + b"Transfer-Encoding: chunked\r\n\r\n0x0\r\n\r\n" + SMUGGLED,
    "chunk line bare LF": HEAD + b"Transfer-Encoding: chunked\r\n\r\n3;x\nabc\r\n0\r\n\r\n"
                          + SMUGGLED,
    "chunked twice": HEAD + b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n"
                     b"0\r\n\r\n" + SMUGGLED,
    # these two were read as chunked (Twisted ignores `identity`)
    "chunked then identity": HEAD + b"Transfer-Encoding: chunked\r\n"
                             b"Transfer-Encoding: identity\r\n\r\n0\r\n\r\n" + SMUGGLED,
    "identity then chunked": HEAD + b"Transfer-Encoding: identity\r\n"
                             b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + SMUGGLED,
    "identity": HEAD + b"Transfer-Encoding: identity\r\nContent-Length: 0\r\n\r\n" + SMUGGLED,
    "NUL in a value": HEAD + b"Content-Length: 0\r\nX: a\x00b\r\n\r\n" + SMUGGLED,
}


@pytest.mark.parametrize("name", CASES)
def test_every_ambiguous_body_length_is_400_and_closed(name: str) -> None:
    exit = Upload()
    proto, transport = http11(http_site(MemoryReactorClock(), exit))
    proto.dataReceived(CASES[name])
    answer = transport.value()
    assert answer.startswith(b"HTTP/1.1 400 "), answer[:80]
    assert answer.count(b"HTTP/1.1 ") == 1, "one answer: the smuggled request was never read"
    assert transport.disconnecting
    assert exit.bodies == [], "the exit never saw the request"


def test_plain_chunked_and_content_length_bodies_still_pass() -> None:
    for body in (b"Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
                 b"Transfer-Encoding: Chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
                 b"Content-Length: 3\r\n\r\nabc"):
        exit = Upload()
        proto, transport = http11(http_site(MemoryReactorClock(), exit))
        proto.dataReceived(HEAD + body)
        assert transport.value().startswith(b"HTTP/1.1 200 "), body
        assert exit.bodies == [b"abc"]


@pytest.mark.daemon
@pytest.mark.parametrize("name", ["CL.TE", "TE.CL", "two Content-Length",
                                  "chunked then identity"])
def test_the_running_daemon_refuses_them_on_its_socket(site: tuple[Daemon, str], port: int,
                                                       name: str) -> None:
    answer = raw(port, CASES[name].replace(b"Host: x", f"Host: 127.0.0.1:{port}".encode()))
    assert answer.startswith(b"HTTP/1.1 400 "), answer[:80]
    assert answer.count(b"HTTP/1.1 ") == 1
