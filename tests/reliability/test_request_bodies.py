"""Request bodies are bounded where their bytes arrive: a route that takes no body answers
without reading one, and a body that grows past `limits.body-bytes` is refused with `413` the
moment it crosses the limit (chunked included)."""

from __future__ import annotations

import socket
import subprocess
import time

from twisted.internet.testing import MemoryReactorClock

from ssekd.bindings.http.channel import Limits
from tests.conftest import Daemon
from tests.reliability.conftest import tracebacks
from tests.reliability.fakes import GetOnly, Upload, chunk, http11, http_site

# -- on the wire: the daemon's sse and filesystem routes take no body ---------------------------


def test_endless_curl_upload_to_sse_gets_405_at_once(served: tuple[Daemon, int]) -> None:
    daemon, port = served
    # The pipe that used to fill the disk (Twisted spooled it all before routing).
    started = time.monotonic()
    done = subprocess.run(
        ["sh", "-c", f"head -c 50G /dev/zero | curl -sS -o /dev/null -w '%{{http_code}}' "
                     f"--max-time 20 -X POST -T - http://127.0.0.1:{port}/events"],
        capture_output=True, timeout=60, check=False)
    assert done.stdout == b"405", (done.stdout, done.stderr)
    assert time.monotonic() - started < 15
    assert tracebacks(daemon) == []


def _exchange(port: int, head: bytes) -> bytes:
    """Send a request head only (its announced body never comes); what the server answers
    before it closes the connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(head)
        received = b""
        while True:
            try:
                data = s.recv(65536)
            except TimeoutError:
                raise AssertionError(f"no answer without the body; got {received!r}") from None
            if not data:
                return received
            received += data


def test_announced_body_to_a_get_only_route_is_answered_unread(
        served: tuple[Daemon, int]) -> None:
    _, port = served
    for length in (1000, 50 << 30):  # within the body limit, and far beyond it
        answer = _exchange(port, b"POST /events HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                 b"Content-Length: %d\r\n\r\n" % length)
        assert answer.startswith(b"HTTP/1.1 405 "), answer
        assert b"\r\nconnection: close\r\n" in answer.lower()


def test_get_with_a_body_is_served_without_reading_it_and_the_connection_closes(
        served: tuple[Daemon, int]) -> None:
    _, port = served
    answer = _exchange(port, b"GET /www/hello.txt HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                             b"Transfer-Encoding: chunked\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 200 "), answer
    assert answer.endswith(b"hello\n")


# -- in memory: a route that takes bodies, up to the limit ---------------------------------------


def test_h1_chunked_body_is_413_the_moment_it_crosses_the_limit() -> None:
    clock = MemoryReactorClock()
    upload = Upload()
    proto, transport = http11(http_site(clock, upload, Limits(body_bytes=1000)))
    proto.dataReceived(b"POST /up HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
    for _ in range(10):
        proto.dataReceived(chunk(b"x" * 100))
    assert transport.value() == b"" and not transport.disconnecting  # exactly at the limit
    proto.dataReceived(chunk(b"y"))
    assert transport.value().startswith(b"HTTP/1.1 413 ")
    assert transport.disconnecting
    proto.dataReceived(chunk(b"z" * 100) + b"0\r\n\r\n")  # the rest is never handed on
    assert upload.bodies == []


def test_h1_chunked_body_within_the_limit_reaches_the_route() -> None:
    clock = MemoryReactorClock()
    upload = Upload()
    proto, transport = http11(http_site(clock, upload, Limits(body_bytes=1000)))
    proto.dataReceived(b"POST /up HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                       + chunk(b"x" * 1000) + b"0\r\n\r\n")
    assert upload.bodies == [b"x" * 1000]
    assert transport.value().startswith(b"HTTP/1.1 200 ")
    assert not transport.disconnecting


def test_h1_body_to_a_get_only_route_is_answered_without_reading_it() -> None:
    clock = MemoryReactorClock()
    events = GetOnly()
    proto, transport = http11(http_site(clock, events))
    proto.dataReceived(b"POST /events HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                       b"Expect: 100-continue\r\n\r\n")
    answer = transport.value()
    assert answer.startswith(b"HTTP/1.1 405 "), answer
    assert b"100 Continue" not in answer  # the body is not asked for
    assert transport.disconnecting
    assert events.rendered == [b"POST"]
