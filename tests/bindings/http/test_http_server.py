"""The http binding in the running daemon, with curl and raw sockets as clients: routing by
authority, methods, same-origin and cross-origin policies, and requests that are refused."""

from __future__ import annotations

import re
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


def test_bad_requests_get_4xx_and_no_traceback(site: tuple[Daemon, str], port: int) -> None:
    daemon, base = site
    cases = [
        b"GARBAGE\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: localhost\r\nX-Big: " + b"a" * 8000 + b"\r\n\r\n",
        b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: localhost\r\n\r\n",
        b"GET /\xff\xfe HTTP/1.1\r\nHost: localhost:%d\r\n\r\n" % port,
        b"GET / HTTP/1.1\r\nHost: localhost\r\nBad Header\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: localhost\r\nContent-Length: -5\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: localhost\r\nContent-Length: 99999999999\r\n\r\n",
    ]
    for data in cases:
        reply = raw(port, data)
        assert reply == b"" or re.match(rb"HTTP/1\.[01] 4\d\d ", reply), (data[:40], reply[:200])
        assert b"Traceback" not in reply and b"File \"" not in reply
    assert daemon.alive()
    assert curl(base + "/")[0] == 200


def test_slowloris_is_cut_off(site: tuple[Daemon, str], port: int) -> None:
    daemon, base = site
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"GET / HTTP/1.1\r\nHost: localhost\r\n")
        started = time.monotonic()
        reply = b""
        try:
            while time.monotonic() - started < 4:
                s.sendall(b"X-Slow: 1\r\n")  # one header line every 0.2 s never finishes
                time.sleep(0.2)
        except (BrokenPipeError, ConnectionResetError):
            pass
        try:
            reply = s.recv(1024)
        except (ConnectionResetError, TimeoutError):
            pass
        elapsed = time.monotonic() - started
    assert elapsed < 3.5, "the 1 s header deadline should have closed the connection"
    assert reply == b"" or reply.startswith(b"HTTP/1.1 408")
    assert curl(base + "/")[0] == 200
