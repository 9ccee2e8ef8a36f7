"""The http binding in the running daemon, with curl and raw sockets as clients: routing by
authority, methods, same-origin and cross-origin policies, and requests that are refused."""

from __future__ import annotations

import re
import select
import socket
import time
from pathlib import Path

import pytest

from tests.support.daemon import Daemon
from tests.support.http import curl, raw
from tests.support.static_site import CROSS_ORIGIN, write_site

pytestmark = [pytest.mark.daemon]


def test_unmatched_authority_is_404(site: tuple[Daemon, str], port: int) -> None:
    status, _, body = curl("-H", "Host: elsewhere.example", f"http://127.0.0.1:{port}/")
    assert status == 404 and body == b""


def test_methods(site: tuple[Daemon, str]) -> None:
    _, base = site
    status, headers, _ = curl("-X", "DELETE", base + "/")
    assert status == 405 and headers["allow"] == "GET, HEAD"


def test_same_origin_refuses_other_origins(site: tuple[Daemon, str], port: int) -> None:
    _, base = site
    status, _, _ = curl("-H", "Origin: https://evil.example", base + "/")
    assert status == 403
    status, _, _ = curl("-H", f"Origin: http://localhost:{port}", base + "/")
    assert status == 200


def test_cross_origin_preflight_and_response(tmp_path: Path, run_daemon, port: int) -> None:  # type: ignore[no-untyped-def]
    config = write_site(tmp_path, CROSS_ORIGIN)
    run_daemon(config, env={"HTTP_PORT": str(port)}, wait_ports=[port])
    base = f"http://localhost:{port}"
    status, headers, body = curl(
        "-X", "OPTIONS", "-H", "Origin: https://app.example.com",
        "-H", "Access-Control-Request-Method: GET",
        "-H", "Access-Control-Request-Headers: last-event-id", base + "/events")
    assert status == 204 and body == b""
    assert headers["access-control-allow-origin"] == "https://app.example.com"
    assert headers["access-control-allow-methods"] == "GET"
    assert headers["access-control-allow-headers"] == "last-event-id"
    assert headers["access-control-allow-credentials"] == "true"
    assert headers["access-control-max-age"] == "600"
    status, headers, _ = curl("-H", "Origin: https://app.example.com", base + "/")
    assert status == 200
    assert headers["access-control-allow-origin"] == "https://app.example.com"
    assert headers["vary"] == "Origin"
    assert headers["access-control-expose-headers"] == "x-trace"
    status, _, _ = curl("-H", "Origin: https://evil.example", base + "/")
    assert status == 403


BAD_REQUEST = b"HTTP/1.1 400 Bad Request\r\n\r\n"


def output_after_start(daemon: Daemon, answered: bool = False) -> list[str]:
    """The daemon's output lines after its last ENGINE_STARTED event (one per worker), without
    the access log's answered events (`answered` keeps them)."""
    lines = daemon.output().splitlines()
    started = max(i for i, line in enumerate(lines) if " ENGINE_STARTED " in line)
    return [line for line in lines[started + 1:]
            if answered or " BINDING_HTTP_REQUEST_ANSWERED " not in line]


def accepted(port: int, path: str) -> re.Pattern[str]:
    return re.compile(r"test:http0 \[[^]]+\] BINDING_HTTP_REQUEST_ACCEPTED - GET "
                      rf"http://localhost:{port}{re.escape(path)}")


@pytest.mark.parametrize(("request_bytes", "reply"), [
    (b"GARBAGE\r\n\r\n", BAD_REQUEST),
    # a head over `header-bytes` (4096): the connection is dropped without an answer
    (b"GET / HTTP/1.1\r\nHost: localhost\r\nX-Big: " + b"a" * 8000 + b"\r\n\r\n", b""),
    (b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: localhost\r\n\r\n", b""),
    (b"GET /\xff\xfe HTTP/1.1\r\nHost: localhost:@PORT@\r\n\r\n", BAD_REQUEST),
    (b"GET / HTTP/1.1\r\nHost: localhost\r\nBad Header\r\n\r\n", BAD_REQUEST),
    (b"GET / HTTP/1.1\r\nHost: localhost\r\nContent-Length: -5\r\n\r\n", BAD_REQUEST),
    # Bodies over `body-bytes` are in tests/reliability/test_request_bodies.py: this site's
    # routes take none, so a body sent to them is answered without being read.
], ids=["garbage", "big-header", "long-target", "bad-utf8-path", "header-without-colon",
        "negative-length"])
def test_bad_requests_get_4xx_and_no_traceback(site: tuple[Daemon, str], port: int,
                                               request_bytes: bytes, reply: bytes) -> None:
    daemon, base = site
    assert raw(port, request_bytes.replace(b"@PORT@", str(port).encode())) == reply
    assert curl(base + "/?after")[0] == 200
    daemon.wait_output("/?after")
    # the bad request reached no binding and left nothing in the log: no traceback, no error
    (line,) = output_after_start(daemon)
    assert accepted(port, "/?after").fullmatch(line), line


def test_slowloris_is_cut_off(site: tuple[Daemon, str], port: int) -> None:
    """A head trickling in, one line at a time, is answered 408 once `header-timeout` (1 s) has
    passed since it began, however often lines arrive."""
    daemon, base = site
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"GET / HTTP/1.1\r\nHost: localhost\r\n")
        deadline = time.monotonic() + 10
        # one more header line whenever 0.2 s pass without an answer
        while not select.select([s], [], [], 0.2)[0]:
            assert time.monotonic() < deadline, "the head deadline never closed the connection"
            s.sendall(b"X-Slow: 1\r\n")
        reply = b""
        while chunk := s.recv(1024):
            reply += chunk
    assert reply == b"HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
    assert curl(base + "/?after")[0] == 200
    daemon.wait_output("/?after")
    (line,) = output_after_start(daemon)
    assert accepted(port, "/?after").fullmatch(line), line
    # the access log says the 408, as it says every answer (before the one that came after)
    answered = [line for line in output_after_start(daemon, answered=True)
                if " BINDING_HTTP_REQUEST_ANSWERED " in line]
    # (its request line came: the line says it, though its head never ended)
    assert " method=GET path=/ route=- status=408 bytes=0 " in answered[0], answered
