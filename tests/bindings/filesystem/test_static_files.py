"""The running daemon with curl as the client: static files, routing, CORS, limits, lifecycle."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.daemon import TWISTD, Daemon
from tests.support.http import curl, raw
from tests.support.static_site import CROSS_ORIGIN, write_site

pytestmark = [pytest.mark.daemon]


def test_index_etag_304_and_head(site: tuple[Daemon, str]) -> None:
    _, base = site
    status, headers, body = curl(base + "/")
    assert status == 200 and body == b"<h1>ssekd</h1>\n"
    assert headers["content-type"] == "text/html; charset=utf-8"
    assert "last-modified" in headers and headers["etag"].startswith('"')
    status, headers2, body = curl("-H", f"If-None-Match: {headers['etag']}", base + "/")
    assert status == 304 and body == b"" and headers2["etag"] == headers["etag"]
    status, headers3, body = curl("-I", base + "/one-k.txt")
    assert status == 200 and headers3["content-length"] == "1024" and body == b""
    status, _, body = curl(base + "/docs/")
    assert status == 200 and body == b"docs\n"
    status, headers, _ = curl(base + "/docs?x=1")
    assert status == 301 and headers["location"] == "/docs/?x=1"
    status, headers, _ = curl(base + "/app.js?v=3")
    assert status == 200 and headers["content-type"].startswith("text/javascript")


def test_range_request(site: tuple[Daemon, str]) -> None:
    _, base = site
    status, headers, body = curl("-H", "Range: bytes=10-19", base + "/one-k.txt")
    assert status == 206 and body == b"x" * 10
    assert headers["content-range"] == "bytes 10-19/1024"
    status, _, _ = curl("-H", "Range: bytes=5000-", base + "/one-k.txt")
    assert status == 416


@pytest.mark.parametrize("path", ["/../../etc/passwd", "/%2e%2e/%2e%2e/etc/passwd", "//etc/passwd",
                                  "/link-out.txt", "/docs/../../secret.txt", "/%2fetc/passwd",
                                  "/..%2f..%2fsecret.txt", "/missing.html", "/%00"])
def test_no_way_out_of_the_root(site: tuple[Daemon, str], path: str) -> None:
    _, base = site
    status, _, body = curl("--path-as-is", base + path)
    assert status == 404 and b"root:" not in body and b"outside" not in body


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


def test_sigterm_exits_zero(site: tuple[Daemon, str], port: int) -> None:
    daemon, _ = site
    assert daemon.stop() == 0
    assert "ENGINE_STOPPED" in daemon.output()


def test_sighup_reload(site: tuple[Daemon, str], tmp_path: Path, port: int) -> None:
    daemon, base = site
    config = daemon.config
    good = config.read_text()
    # An open keep-alive connection made before the reload keeps working after it.
    with socket.create_connection(("127.0.0.1", port), timeout=5) as kept:
        kept.sendall(b"GET /one-k.txt HTTP/1.1\r\nHost: localhost:%d\r\n\r\n" % port)
        assert kept.recv(65536).startswith(b"HTTP/1.1 200")
        config.write_text(good.replace("type: filesystem", "type: filesystem\n    oops: 1"))
        daemon.signal(signal.SIGHUP)
        daemon.wait_output("CONFIG_RELOAD_FAILED")
        assert "oops" in daemon.output()
        assert curl(base + "/")[0] == 200
        (tmp_path / "other").mkdir()
        (tmp_path / "other" / "new.txt").write_text("new route\n")
        config.write_text(good.replace(
            "    routes:\n      - when:\n          - headers:\n              :authority",
            "    routes:\n      - when:\n          - headers:\n              :path: /new/*\n"
            "        exit: other_map\n      - when:\n          - headers:\n              :authority",
            1).replace("telemetry:", OTHER + "telemetry:"))
        daemon.signal(signal.SIGHUP)
        daemon.wait_output("CONFIG_RELOADED")
        status, _, body = curl(base + "/new/new.txt")
        assert status == 200 and body == b"new route\n"
        kept.sendall(b"GET /one-k.txt HTTP/1.1\r\nHost: localhost:%d\r\n\r\n" % port)
        assert kept.recv(65536).startswith(b"HTTP/1.1 200")
    assert daemon.alive()


OTHER = """\
  other_map:
    type: http-filesystem
    kind: proxy
    routes:
      - when:
          - path: /new/{path}
        exit: other
        with:
          path: ${params.path}
  other:
    type: filesystem
    kind: server
    options:
      location: other
"""


def test_daemonized_with_twistd_pidfile_and_logfile(tmp_path: Path, port: int) -> None:
    from ssekd.broker import port_open

    config = write_site(tmp_path).read_text().replace("    out:\n      type: stdout\n", "")
    (tmp_path / "zilla.yaml").write_text(config.replace("exporters:\n", "exporters: {}\n"))
    pidfile, logfile = tmp_path / "ssekd.pid", tmp_path / "ssekd.log"
    subprocess.run([TWISTD, f"--pidfile={pidfile}", f"--logfile={logfile}", "ssekd",
                    "--config", str(tmp_path / "zilla.yaml")], check=True, timeout=30,
                   cwd=tmp_path, env={**os.environ, "HTTP_PORT": str(port)})
    deadline = time.monotonic() + 15
    while not port_open("127.0.0.1", port) and time.monotonic() < deadline:
        time.sleep(0.05)
    pid = int(pidfile.read_text())
    try:
        assert curl(f"http://localhost:{port}/")[0] == 200
        assert "ENGINE_STARTED" in logfile.read_text()
    finally:
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 15
    while pidfile.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not pidfile.exists(), "twistd removes its pidfile on an orderly stop"
    assert "ENGINE_STOPPED" in logfile.read_text()
