"""Zilla's http.proxy example on ssekd: TLS and HTTP/2 in (the example's localhost.p12), the http
client as a reverse proxy, TLS and HTTP/2 out (`alpn: [h2]`, the example's truststore) to real
nginx run as its compose file runs it (`tests.support.nginx`). Replays `.github/test.sh` with
nghttp and checks more: what the upstream saw, request bodies, a large file under a stalled
client, an upstream that is down, an HTTP/1.1 upstream, and the cleartext proxying of
http.json.schema (`versions: [http/1.1, h2]`)."""

from __future__ import annotations

import hashlib
import os
import re
import socket
import ssl
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ssekd.dev.broker import free_port
from tests.e2e.zilla_examples.conftest import RunExample
from tests.support.daemon import Daemon, start_daemon
from tests.support.h2c_upstream import H2cUpstream
from tests.support.nginx import Nginx, start_nginx
from tests.support.wait import wait_until
from tests.support.zilla_examples import EXAMPLES, Example

pytestmark = [pytest.mark.daemon]

NAME = "http.proxy"


@pytest.fixture
def nginx(tmp_path: Path) -> Iterator[Nginx]:
    server = start_nginx(EXAMPLES / NAME, tmp_path / "nginx", writable=True, cleartext=True)
    yield server
    server.stop()


def run_proxy(run_example: RunExample, nginx: Nginx, client_options: str = "") -> Example:
    """The example with its tcp client pointed at nginx (the compose network's `nginx:443`);
    `client_options` is added to the http client (`south_http_client`)."""
    hosts = {"host: nginx": "host: 127.0.0.1", "port: 443": f"port: {nginx.port}"}
    if client_options:
        hosts["    kind: client\n    exit: south_tls_client"] = (
            f"    kind: client\n    options:\n{client_options}    exit: south_tls_client")
    return run_example(NAME, kafka=False, hosts=hosts)


def expected_page() -> str:
    """EXPECTED of the example's test.sh."""
    text = (EXAMPLES / NAME / ".github" / "test.sh").read_text()
    found = re.search(r"EXPECTED='(.*?)'", text, re.DOTALL)
    assert found is not None
    return found.group(1)


def nghttp(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["nghttp", "--no-verify", *args, url], capture_output=True, text=True,
                          timeout=30, check=False)


def curl(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["curl", "-sk", "--max-time", "30", *args], capture_output=True,
                          timeout=40, check=False)


def test_http_proxy_as_test_sh_does(run_example: RunExample, nginx: Nginx) -> None:
    """`nghttp --no-verify https://...:7143/demo.html` prints the example's page, fetched from
    nginx over TLS with HTTP/2 (nginx's log says `HTTP/2.0`)."""
    example = run_proxy(run_example, nginx)
    url = f"https://localhost:{example.port(7143)}/demo.html"
    out = nghttp(url)
    assert out.returncode == 0, out.stderr
    assert out.stdout.rstrip("\n") == expected_page()
    assert any(line.startswith("GET /demo.html HTTP/2.0 200") for line in nginx.seen())


def test_http_proxy_headers_bodies_and_protocols(run_example: RunExample, nginx: Nginx) -> None:
    """Status, headers and bodies both ways, over HTTP/2 and HTTP/1.1 downstream: a `PUT` body
    reaches nginx (read back as the file it wrote), a `POST` gets nginx's own `405`, a missing
    file nginx's `404`, the `Host` is the client's, and the upstream always sees HTTP/2."""
    example = run_proxy(run_example, nginx)
    base = f"https://localhost:{example.port(7143)}"
    body = os.urandom(300_000)
    sent = subprocess.run(["curl", "-sk", "--http2", "-X", "PUT", "--data-binary", "@-",
                           "-o", "/dev/null", "-w", "%{http_code} %{http_version}",
                           f"{base}/uploads/two.bin"],
                          input=body, capture_output=True, timeout=30, check=False)
    assert sent.stdout == b"201 2", sent.stderr
    assert (nginx.root / "uploads" / "two.bin").read_bytes() == body
    back = curl("--http1.1", f"{base}/uploads/two.bin")
    assert back.stdout == body
    post = curl("--http2", "-X", "POST", "-d", "a=1", "-D", "-", f"{base}/demo.html")
    assert post.stdout.startswith(b"HTTP/2 405")
    assert b"server: nginx" in post.stdout.lower()
    missing = curl("--http1.1", "-o", "/dev/null", "-w", "%{http_code}", f"{base}/nothing")
    assert missing.stdout == b"404"
    css = curl("--http2", "-D", "-", f"{base}/style.css")
    assert b"content-type: text/css" in css.stdout.lower()
    seen = nginx.seen()
    assert any(line.startswith("PUT /uploads/two.bin HTTP/2.0 201") for line in seen), seen
    assert all(" HTTP/2.0 " in line for line in seen), seen
    assert any(line.split()[5] == f"localhost:{example.port(7143)}" for line in seen), seen


def test_http_proxy_multiplexes_requests_on_one_upstream_connection(run_example: RunExample,
                                                                    nginx: Nginx) -> None:
    """nghttp asks for the page and its stylesheet at once, twice over: every request reaches
    nginx as an HTTP/2 stream of the same connection."""
    example = run_proxy(run_example, nginx)
    base = f"https://localhost:{example.port(7143)}"
    for _ in range(2):
        out = nghttp(f"{base}/demo.html", f"{base}/style.css")
        assert out.returncode == 0 and expected_page() in out.stdout, out.stderr
    seen = nginx.seen()
    assert len(seen) == 4 and {line.split()[2] for line in seen} == {"HTTP/2.0"}, seen
    assert len({line.split()[6] for line in seen}) == 1, seen


def test_a_client_that_leaves_cancels_the_upstream_request(run_example: RunExample,
                                                           nginx: Nginx) -> None:
    """A client that reads the head of a 64 MiB file and closes: nginx's request ends with a
    fraction of the file sent (its stream was reset), and the daemon serves on."""
    example = run_proxy(run_example, nginx)
    (nginx.root / "large.bin").write_bytes(os.urandom(64 * 1024 * 1024))
    conn = _tls(example.port(7143))
    conn.sendall(b"GET /large.bin HTTP/1.1\r\nHost: localhost\r\n\r\n")
    assert conn.recv(4096).startswith(b"HTTP/1.1 200")
    conn.close()
    wait_until(lambda: any("/large.bin" in line for line in nginx.seen()), 10)
    [line] = [line for line in nginx.seen() if "/large.bin" in line]
    assert int(line.split()[7]) < 16 * 1024 * 1024, line
    assert curl("-o", "/dev/null", "-w", "%{http_code}",
                f"https://localhost:{example.port(7143)}/demo.html").stdout == b"200"


def _tls(port: int) -> ssl.SSLSocket:
    """A TLS connection to the example's port without ALPN (HTTP/1.1), its certificate not
    checked (`--no-verify`, as test.sh does)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    raw = socket.create_connection(("127.0.0.1", port), 10)
    return context.wrap_socket(raw, server_hostname="localhost")


@pytest.mark.parametrize("options,protocol", [("", "HTTP/2.0"),
                                              ("      versions:\n        - http/1.1\n",
                                               "HTTP/1.1")])
def test_http_proxy_streams_a_large_file_to_a_stalled_client(
        run_example: RunExample, nginx: Nginx, options: str, protocol: str) -> None:
    """A 64 MiB file to a client that reads the head and then nothing for two seconds: nginx
    has not finished sending it (flow control held it upstream, the daemon did not take it all
    in: HTTP/2 windows or a paused HTTP/1.1 connection); once the client reads, the whole file
    arrives intact and nginx logs the request."""
    example = run_proxy(run_example, nginx, options)
    data = os.urandom(64 * 1024 * 1024)
    (nginx.root / "large.bin").write_bytes(data)
    conn = _tls(example.port(7143))
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
    conn.sendall(b"GET /large.bin HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
    head = b""
    while b"\r\n\r\n" not in head:
        head += conn.recv(4096)
    assert head.startswith(b"HTTP/1.1 200")
    time.sleep(2)
    assert not any("/large.bin" in line for line in nginx.seen())
    digest = hashlib.sha256(head.split(b"\r\n\r\n", 1)[1])
    received = len(head.split(b"\r\n\r\n", 1)[1])
    while True:
        chunk = conn.recv(1 << 20)
        if not chunk:
            break
        digest.update(chunk)
        received += len(chunk)
    conn.close()
    assert received == len(data)
    assert digest.hexdigest() == hashlib.sha256(data).hexdigest()
    wait_until(lambda: any(line.startswith(f"GET /large.bin {protocol} 200")
                           for line in nginx.seen()), 10)


def test_http_proxy_answers_502_when_the_upstream_is_down(run_example: RunExample,
                                                          nginx: Nginx) -> None:
    """nginx stopped: `502` over HTTP/2 and HTTP/1.1, an event naming why, no traceback; nginx
    back on the same port: served again."""
    example = run_proxy(run_example, nginx)
    base = f"https://localhost:{example.port(7143)}"
    assert curl("-o", "/dev/null", "-w", "%{http_code}", f"{base}/demo.html").stdout == b"200"
    nginx.stop()
    for version in ("--http2", "--http1.1"):
        answer = curl(version, "-o", "/dev/null", "-w", "%{http_code}", f"{base}/demo.html")
        assert answer.stdout == b"502"
    assert example.daemon is not None
    example.daemon.wait_output("BINDING_HTTP_UPSTREAM_FAILED")
    assert "refused; answered 502" in example.daemon.output()
    assert "Traceback" not in example.daemon.output()
    again = start_nginx(EXAMPLES / NAME, nginx.folder.parent / "nginx-again", nginx.port,
                        writable=True, cleartext=True)
    try:
        answer = curl("--http2", f"{base}/demo.html")
        assert answer.stdout.decode().rstrip("\n") == expected_page()
    finally:
        again.stop()


def test_an_upstream_certificate_that_does_not_name_sni_is_502(run_example: RunExample,
                                                               nginx: Nginx) -> None:
    """The tls client expects nginx's certificate to name `sni`: with another name there, no
    byte goes to nginx unverified; the client gets `502` and the event says `tls`."""
    hosts = {"host: nginx": "host: 127.0.0.1", "port: 443": f"port: {nginx.port}",
             "sni:\n        - nginx": "sni:\n        - elsewhere"}
    example = run_example(NAME, kafka=False, hosts=hosts)
    answer = curl("-o", "/dev/null", "-w", "%{http_code}",
                  f"https://localhost:{example.port(7143)}/demo.html")
    assert answer.stdout == b"502"
    assert example.daemon is not None
    example.daemon.wait_output("tls; answered 502")
    assert not [line for line in nginx.seen() if "/demo.html" in line]


def test_http_proxy_speaks_http11_upstream_with_versions_http11(run_example: RunExample,
                                                               nginx: Nginx) -> None:
    """`versions: [http/1.1]` on the http client: the tls client's `alpn: [h2]` is not offered
    on its connections, nginx sees HTTP/1.1, and connections are reused."""
    example = run_proxy(run_example, nginx, "      versions:\n        - http/1.1\n")
    url = f"https://localhost:{example.port(7143)}/demo.html"
    for _ in range(3):
        out = nghttp(url)
        assert out.stdout.rstrip("\n") == expected_page()
    seen = [line for line in nginx.seen() if "/demo.html" in line]
    assert len(seen) == 3 and all(" HTTP/1.1 200 " in line for line in seen), seen
    assert len({line.split()[6] for line in seen}) == 1, seen  # one pooled connection


_CLEARTEXT = """\
name: cleartext
bindings:
  north_tcp_server:
    type: tcp
    kind: server
    options:
      host: 127.0.0.1
      port: {port}
    exit: north_http_server
  north_http_server:
    type: http
    kind: server
    options:
      access-control:
        policy: cross-origin
    exit: south_http_client
  south_http_client:
    type: http
    kind: client
    options:
      versions:
{versions}
    exit: south_tcp_client
  south_tcp_client:
    type: tcp
    kind: client
    options:
      host: 127.0.0.1
      port: {upstream}
"""


@pytest.mark.parametrize("versions,expected", [(["http/1.1", "h2"], "HTTP/1.1"),
                                               (["h2"], "HTTP/2.0")])
def test_cleartext_proxying_as_http_json_schema_configures_it(
        tmp_path: Path, nginx: Nginx, versions: list[str], expected: str) -> None:
    """http.json.schema's proxying part: an http server whose exit is an http client to a
    cleartext upstream with `versions: [http/1.1, h2]`: the first request offers
    `Upgrade: h2c`, which nginx declines, so it and the rest are HTTP/1.1; with `[h2]` alone,
    HTTP/2 with prior knowledge."""
    port = free_port()
    upstream = nginx.plain_port if expected == "HTTP/1.1" else nginx.h2c_port
    daemon = _cleartext(tmp_path, port, upstream, versions)
    try:
        page = subprocess.run(["curl", "-s", f"http://localhost:{port}/demo.html"],
                              capture_output=True, text=True, timeout=30, check=False)
        assert page.stdout.rstrip("\n") == expected_page()
        h2 = subprocess.run(["curl", "-s", "--http2-prior-knowledge", "-X", "POST", "-d", "x",
                             "-o", "/dev/null", "-w", "%{http_code}",
                             f"http://localhost:{port}/demo.html"],
                            capture_output=True, text=True, timeout=30, check=False)
        assert h2.stdout == "405"
    finally:
        daemon.stop()
    seen = nginx.seen()
    if expected == "HTTP/1.1":  # the upgrade was offered once, and never again once declined
        assert [line.split()[:3] + line.split()[8:] for line in seen] == [
            ["GET", "/demo.html", "HTTP/1.1", "h2c"], ["POST", "/demo.html", "HTTP/1.1", "-"]]
    assert any(line.startswith(f"GET /demo.html {expected} 200") for line in seen), seen
    assert any(line.startswith(f"POST /demo.html {expected} 405") for line in seen), seen


def test_a_cleartext_upstream_that_takes_the_h2c_upgrade_gets_http2(tmp_path: Path) -> None:
    """`versions: [http/1.1, h2]` toward an upstream that switches (a stand-in: nginx does
    not): the first request is answered after `101` on stream 1, the next ones are HTTP/2
    streams of that same connection, and the pages come back whole."""
    upstream = H2cUpstream(EXAMPLES / NAME / "www").start()
    port = free_port()
    daemon = _cleartext(tmp_path, port, upstream.port, ["http/1.1", "h2"])
    try:
        for _ in range(3):
            page = subprocess.run(["curl", "-s", f"http://localhost:{port}/demo.html"],
                                  capture_output=True, text=True, timeout=30, check=False)
            assert page.stdout.rstrip("\n") == expected_page()
        missing = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}",
                                  f"http://localhost:{port}/nothing"],
                                 capture_output=True, text=True, timeout=30, check=False)
        assert missing.stdout == "404"
    finally:
        daemon.stop()
        upstream.stop()
    assert [(m, p, how) for m, p, how, _ in upstream.seen] == [
        ("GET", "/demo.html", "h2c-upgrade"), ("GET", "/demo.html", "h2"),
        ("GET", "/demo.html", "h2"), ("GET", "/nothing", "h2")]
    assert {n for *_, n in upstream.seen} == {1}


def _cleartext(tmp_path: Path, port: int, upstream: int, versions: list[str]) -> Daemon:
    config = tmp_path / "zilla.yaml"
    config.write_text(_CLEARTEXT.format(
        port=port, upstream=upstream,
        versions="".join(f"        - {v}\n" for v in versions)))
    return start_daemon(config, wait_ports=[port])
