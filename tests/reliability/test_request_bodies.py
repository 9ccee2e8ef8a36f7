"""Request bodies are bounded where their bytes arrive: a route that takes no body answers
without reading one, and a body that grows past `limits.body-bytes` is refused with `413` the
moment it crosses the limit, on HTTP/1.1 (chunked included) and HTTP/2 alike."""

from __future__ import annotations

import socket
import subprocess
import time

import h2.errors
import h2.events
import pytest
from hyperframe.frame import DataFrame
from twisted.internet.testing import MemoryReactorClock

from ssekd.bindings.http.channel import Limits
from tests.support.daemon import Daemon
from tests.support.http_fakes import GetOnly, H2Peer, Upload, chunk, http11, http_site
from tests.support.reliability import RawH2, tracebacks

# -- on the wire: the daemon's sse and filesystem routes take no body ---------------------------


@pytest.mark.daemon
@pytest.mark.broker
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


@pytest.mark.daemon
@pytest.mark.broker
def test_announced_body_to_a_get_only_route_is_answered_unread(
        served: tuple[Daemon, int]) -> None:
    _, port = served
    for length in (1000, 50 << 30):  # within the body limit, and far beyond it
        answer = _exchange(port, b"POST /events HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                 b"Content-Length: %d\r\n\r\n" % length)
        assert answer.startswith(b"HTTP/1.1 405 "), answer
        assert b"\r\nconnection: close\r\n" in answer.lower()


@pytest.mark.daemon
@pytest.mark.broker
def test_get_with_a_body_is_served_without_reading_it_and_the_connection_closes(
        served: tuple[Daemon, int]) -> None:
    _, port = served
    answer = _exchange(port, b"GET /www/hello.txt HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                             b"Transfer-Encoding: chunked\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 200 "), answer
    assert answer.endswith(b"hello\n")


@pytest.mark.daemon
@pytest.mark.broker
def test_h2_post_to_sse_is_405_before_its_body_is_read(served: tuple[Daemon, int]) -> None:
    daemon, port = served
    client = RawH2(port)
    try:
        stream_id = client.request("POST", "/events", end_stream=False)
        client.flush()
        sent = 0
        # Send as much as flow control lets us, until the answer comes (or 8 MiB went unanswered).
        while client.status(stream_id) is None and sent < 8 << 20 and not client.closed:
            room = min(client.conn.local_flow_control_window(stream_id), 16384)
            if room > 0:
                client.conn.send_data(stream_id, b"\0" * room)
                client.flush()
                sent += room
            client.pump(0.01 if room > 0 else 0.2)
        assert client.status(stream_id) == "405", (sent, client.events[-5:])
        # The server stops the upload (RST_STREAM once its answer is complete) or lets the
        # stream window run dry: either way it stops reading long before 8 MiB.
        assert sent < 1 << 20
        assert client.wait(lambda: bool(client.of(h2.events.StreamReset, stream_id)))
        assert client.of(h2.events.StreamReset, stream_id)[0].error_code == \
            h2.errors.ErrorCodes.NO_ERROR
        # The connection goes on: another request on it is served.
        other = client.request("GET", "/www/hello.txt")
        client.flush()
        assert client.wait(lambda: bool(client.of(h2.events.StreamEnded, other)))
        assert client.status(other) == "200"
    finally:
        client.close()
    assert tracebacks(daemon) == []


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


def test_h2_body_is_413_and_reset_the_moment_it_crosses_the_limit() -> None:
    upload = Upload()
    peer = H2Peer(http_site(MemoryReactorClock(), upload, Limits(body_bytes=1000)))
    stream_id = peer.request("POST", "/up", end_stream=False)
    peer.client.send_data(stream_id, b"x" * 1000)
    peer.send()
    peer.read()
    assert peer.status(stream_id) is None  # exactly at the limit
    peer.client.send_data(stream_id, b"y")
    peer.send()
    peer.read()
    assert peer.status(stream_id) == "413"
    assert peer.of(h2.events.StreamReset, stream_id)[0].error_code == \
        h2.errors.ErrorCodes.NO_ERROR
    assert stream_id not in peer.server.streams
    peer.send_raw(DataFrame(stream_id, b"z" * 100, flags=["END_STREAM"]).serialize())  # in flight
    peer.read()
    assert upload.bodies == []
    assert peer.goaway() is None
    other = peer.request("POST", "/up", end_stream=False)  # the connection goes on
    peer.client.send_data(other, b"fine", end_stream=True)
    peer.send()
    peer.read()
    assert peer.status(other) == "200" and upload.bodies == [b"fine"]


def test_h2_announced_length_over_the_limit_is_413_at_once() -> None:
    upload = Upload()
    peer = H2Peer(http_site(MemoryReactorClock(), upload, Limits(body_bytes=1000)))
    stream_id = peer.request("POST", "/up", end_stream=False,
                             headers=[("content-length", "1001")])
    peer.send()
    peer.read()
    assert peer.status(stream_id) == "413"
    assert upload.bodies == []


def test_h2_body_to_a_get_only_route_is_answered_at_its_first_byte() -> None:
    events = GetOnly()
    peer = H2Peer(http_site(MemoryReactorClock(), events))
    stream_id = peer.request("POST", "/events", end_stream=False)
    peer.send()
    peer.read()
    assert events.rendered == []  # no body yet: nothing to refuse
    peer.client.send_data(stream_id, b"x")
    peer.send()
    peer.read()
    assert events.rendered == [b"POST"] and peer.status(stream_id) == "405"
    assert peer.of(h2.events.StreamReset, stream_id)[0].error_code == \
        h2.errors.ErrorCodes.NO_ERROR
    peer.send_raw(DataFrame(stream_id, b"y" * 1000, flags=["END_STREAM"]).serialize())  # in flight
    peer.read()
    assert events.rendered == [b"POST"] and peer.goaway() is None


def test_h2_body_and_reset_in_one_read_are_neither_refused_nor_handed_on() -> None:
    """A body over the limit (or to a route that takes none) and the client's reset in one
    read: `h2` has closed the stream before its DATA is handled."""
    upload, events = Upload(), GetOnly()
    for exit, path in ((upload, "/up"), (events, "/events")):
        peer = H2Peer(http_site(MemoryReactorClock(), exit, Limits(body_bytes=10)))
        stream_id = peer.request("POST", path, end_stream=False)
        peer.send()
        peer.read()
        peer.client.send_data(stream_id, b"x" * 100)
        peer.client.reset_stream(stream_id, h2.errors.ErrorCodes.CANCEL)
        peer.send()
        peer.read()
        assert peer.status(stream_id) is None and peer.goaway() is None
        assert peer.server.streams == {}
    assert upload.bodies == [] and events.rendered == []
