"""The echo server: each byte of a connection back as it arrives; behind an http server, `200`
with the request's body and headers, less the ones that would do harm in an answer; one kind
that stands behind a tcp or tls server and behind an http server, and nowhere else."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import h2.events
import pytest
from twisted.internet.address import IPv4Address
from twisted.internet.testing import MemoryReactorClock, StringTransport

from ssekd.bindings.echo import EchoServer, EchoService, echoed
from ssekd.bindings.http.roles import HttpBinding, HttpContext
from ssekd.cli import main
from ssekd.spi.binding import plays
from ssekd.spi.connection import ConnectionInfo, StreamBinding
from tests.support.http_fakes import H2Peer, http11, http_site

PEER = IPv4Address("TCP", "127.0.0.1", 40000)


def test_a_connection_gets_each_byte_back_as_it_arrives() -> None:
    protocol: Any = EchoServer("echo0").build_protocol(ConnectionInfo(PEER, PEER))
    transport = StringTransport()
    protocol.makeConnection(transport)
    protocol.dataReceived(b"Hello, Zilla!\n")
    assert transport.value() == b"Hello, Zilla!\n"
    protocol.dataReceived(bytes(range(256)))
    assert transport.value() == b"Hello, Zilla!\n" + bytes(range(256))


def test_it_stops_reading_while_what_it_sent_back_waits() -> None:
    """A client that writes and never reads: once the transport's buffer is full the transport
    pauses its producer, the echo connection, which stops reading the socket - through a TLS
    layer, the socket under it - until the buffer drains."""
    protocol: Any = EchoServer("echo0").build_protocol(ConnectionInfo(PEER, PEER))
    transport = StringTransport()
    protocol.makeConnection(transport)
    assert transport.producer is protocol and transport.streaming
    transport.producer.pauseProducing()
    assert transport.producerState == "paused"
    transport.producer.resumeProducing()
    assert transport.producerState == "producing"

    class TlsLayer:  # what TLSMemoryBIOProtocol offers: writes and a producer, no pausing
        def __init__(self, under: StringTransport) -> None:
            self.transport = under

        def registerProducer(self, producer: Any, streaming: bool) -> None:
            self.transport.registerProducer(producer, streaming)

        def write(self, data: bytes) -> None:
            self.transport.write(data)

    socket_transport = StringTransport()
    protocol = EchoServer("echo0").build_protocol(ConnectionInfo(PEER, PEER, secure=True))
    protocol.makeConnection(TlsLayer(socket_transport))
    socket_transport.producer.pauseProducing()
    assert socket_transport.producerState == "paused"


def _answer(raw: bytes) -> tuple[bytes, dict[bytes, list[bytes]], bytes]:
    head, _, body = raw.partition(b"\r\n\r\n")
    status, *lines = head.split(b"\r\n")
    headers: dict[bytes, list[bytes]] = {}
    for line in lines:
        name, _, value = line.partition(b": ")
        headers.setdefault(name.lower(), []).append(value)
    return status, headers, body


def test_a_request_is_answered_with_its_body_and_its_harmless_headers() -> None:
    """As Zilla's echo answers: the request's headers and body. Not echoed: credentials (a
    script could read an HttpOnly cookie back), headers that would steer the client (a cookie,
    a CORS grant, a redirect), and those about the connection or the message's framing."""
    site = http_site(MemoryReactorClock(), EchoServer("echo0"))
    proto, transport = http11(site)
    proto.dataReceived(
        b"POST /items HTTP/1.1\r\nHost: localhost\r\nContent-Type: text/plain\r\n"
        b"X-Trace: t-1\r\nX-Trace: t-2\r\nAuthorization: Bearer secret\r\nCookie: sid=secret\r\n"
        b"Proxy-Authorization: Basic c2VjcmV0\r\nSet-Cookie: sid=planted\r\n"
        b"Access-Control-Allow-Origin: *\r\nLocation: https://elsewhere.test/\r\n"
        b"Refresh: 0; url=https://elsewhere.test/\r\nServer: spoofed\r\n"
        b"Content-Length: 12\r\n\r\nHello, world")
    status, headers, body = _answer(transport.value())
    assert status == b"HTTP/1.1 200 OK"
    assert body == b"Hello, world"
    assert headers[b"content-type"] == [b"text/plain"]
    assert headers[b"x-trace"] == [b"t-1", b"t-2"]
    assert headers[b"content-length"] == [b"12"]
    assert headers[b"server"] == [b"ssekd"]
    for name in (b"authorization", b"cookie", b"proxy-authorization", b"set-cookie",
                 b"access-control-allow-origin", b"location", b"refresh", b"host"):
        assert name not in headers, name
    assert b"secret" not in transport.value() and b"planted" not in transport.value()


def test_over_http2_too_and_a_get_is_an_empty_200() -> None:
    site = http_site(MemoryReactorClock(), EchoServer("echo0"))
    peer = H2Peer(site)
    post = peer.request("POST", "/", end_stream=False, headers=[("content-type", "text/plain")])
    peer.client.send_data(post, b"over h2", end_stream=True)
    get = peer.request("GET", "/")
    peer.send()
    peer.read()
    assert peer.status(post) == peer.status(get) == "200"

    def body(stream: int) -> bytes:
        return b"".join(e.data for e in peer.of(h2.events.DataReceived, stream))
    assert body(post) == b"over h2" and body(get) == b""
    assert dict(peer.of(h2.events.ResponseReceived, post)[0].headers)["content-type"] == \
        "text/plain"


def test_the_headers_the_http_binding_reads_tokens_from_are_never_echoed() -> None:
    assert echoed("x-trace") and echoed("content-type")
    assert not echoed("x-api-token", {"x-api-token"})
    assert not echoed("access-control-allow-credentials")


def test_render_leaves_out_the_credential_headers_of_its_context() -> None:
    site = http_site(MemoryReactorClock(), _WithCredentialHeader(EchoServer("echo0")))
    proto, transport = http11(site)
    proto.dataReceived(b"GET / HTTP/1.1\r\nHost: localhost\r\nX-Api-Token: secret\r\n"
                       b"X-Kept: yes\r\n\r\n")
    _, headers, _ = _answer(transport.value())
    assert headers[b"x-kept"] == [b"yes"] and b"x-api-token" not in headers


class _WithCredentialHeader:
    """The echo server as an http binding that reads tokens from `X-Api-Token` sees it."""

    max_idle: float | None = None
    takes_body = True

    def __init__(self, echo: EchoServer) -> None:
        self.echo = echo

    def render(self, request: Any, ctx: HttpContext) -> bytes | int:
        ctx.credential_headers = frozenset({"x-api-token"})
        return self.echo.render(request, ctx)


def test_its_role_is_both_a_connections_and_a_requests() -> None:
    echo = EchoServer("echo0")
    assert isinstance(echo, StreamBinding) and isinstance(echo, HttpBinding)
    assert isinstance(echo, EchoService)
    assert plays(EchoService, StreamBinding) and plays(EchoService, HttpBinding)
    assert not plays(StreamBinding, EchoService)


CONFIG = """\
name: echo
bindings:
  tcp0:
    type: tcp
    kind: server
    options: {host: 127.0.0.1, port: 8080}
    routes:
      - when: [{port: 8080}]
        exit: http0
    exit: echo0
  http0:
    type: http
    kind: server
    routes:
      - when: [{headers: {":path": "/events"}}]
        exit: sse0
    exit: echo0
  sse0:
    type: sse
    kind: server
    exit: echo0
  echo0:
    type: echo
    kind: server
"""


#: The same without the sse server: the echo server behind a tcp server's route and behind the
#: http server.
VALID = CONFIG.replace("""    routes:
      - when: [{headers: {":path": "/events"}}]
        exit: sse0
""", "").replace("""  sse0:
    type: sse
    kind: server
    exit: echo0
""", "")


def test_it_stands_behind_tcp_and_http_and_nowhere_else(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "zilla.yaml"
    config.write_text(CONFIG)
    assert main(["check", "--config", str(config)]) == 1
    out = capsys.readouterr()
    problems = [line for line in (out.out + out.err).splitlines() if ": bindings." in line]
    assert len(problems) == 1, problems
    assert "zilla.yaml:21: bindings.sse0.exit: exit 'echo0' of binding 'sse0' is a echo " \
           "server (echo service); expected a binding that is stream source" in problems[0]
    config.write_text(VALID)
    assert main(["check", "--config", str(config)]) == 0, capsys.readouterr()


def test_it_takes_no_options(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "zilla.yaml"
    config.write_text(VALID + "    options: {reply: upper}\n")
    assert main(["check", "--config", str(config)]) == 1
    out = capsys.readouterr()
    assert "bindings.echo0.options.reply" in out.out + out.err
