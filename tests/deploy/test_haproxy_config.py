"""deploy/haproxy/haproxy.cfg: HAProxy accepts it, it balances by open streams, its health
check asks the readiness path the shipped config's http binding answers, on that binding's
cleartext port, with no daemon up an EventSource still gets a `200` that says when to retry,
and it serves TLS with HTTP/2 and sends the PROXY protocol.
(tests/e2e/test_haproxy.py runs it for real in front of three daemons, test_haproxy_tls.py in
front of a browser.)"""

from __future__ import annotations

import http.client
import re
import subprocess
from pathlib import Path

from ssekd.dev.broker import free_port
from ssekd.dev.certs import issue, make_ca
from tests.support.deploy import DEPLOY, health_paths, served_ports, shipped_config
from tests.support.haproxy import start_haproxy
from tests.support.pki import write_pem
from tests.support.sse import SseClient
from tests.support.wait import wait_until

CFG = DEPLOY / "haproxy" / "haproxy.cfg"


def test_haproxy_accepts_the_config(tmp_path: Path) -> None:
    certificate = tmp_path / "ssekd.pem"
    write_pem(certificate, issue(make_ca("haproxy test CA"), ["localhost"]))
    text = CFG.read_text().replace("/run/haproxy/ssekd.sock", str(tmp_path / "s.sock"))
    text = text.replace("/etc/haproxy/certs/ssekd.pem", str(certificate))
    (tmp_path / "haproxy.cfg").write_text(text)
    out = subprocess.run(["haproxy", "-c", "-f", str(tmp_path / "haproxy.cfg")],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stdout + out.stderr


def test_checks_ask_the_readiness_path_on_the_cleartext_port() -> None:
    text = CFG.read_text()
    assert re.search(r"^\s+balance leastconn$", text, re.MULTILINE)
    assert re.search(r"^\s+option http-no-delay$", text, re.MULTILINE)
    (path,) = re.findall(r"option httpchk GET (\S+)", text)
    config = shipped_config()
    served = served_ports(config)
    ports = {int(p) for p in re.findall(r"^\s+server \S+ \S+:(\d+) check", text, re.MULTILINE)}
    assert len(ports) == 1
    (port,) = ports
    binding = served[port].cleartext_http
    assert binding is not None
    paths = health_paths(config, binding)
    assert paths is not None and path.encode() == paths.readiness


def test_with_no_daemon_up_an_eventsource_gets_200_and_retry_never_a_5xx(
        tmp_path: Path) -> None:
    """Every daemon down at once (restarting, draining): HAProxy's own 503 would end every
    browser's EventSource for good. An SSE request gets `200 text/event-stream` with `retry:`
    that ends, so the browser comes back; other requests still get the 503."""
    proxy = start_haproxy(tmp_path, free_port(), [free_port(), free_port()])
    try:
        wait_until(lambda: all(r["status"] == "DOWN" for r in proxy.show_stat().values()), 20,
                   what=lambda: f"not all DOWN: {proxy.show_stat()}")
        with SseClient(proxy.port, "/events") as stream:
            assert stream.status == 200
            assert stream.headers["content-type"] == "text/event-stream"
            assert stream.headers["cache-control"] == "no-store"
            # the whole answer (a browser reconnects once its body ended)
            body = b"retry:5000\n: no server is up: try later\n\n"
            assert int(stream.headers["content-length"]) == len(body)
            assert stream.next_event(2) is None
            assert stream.retry == 5000
            assert stream.comment_lines == ["no server is up: try later"]
        conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=10)
        conn.request("GET", "/index.html")
        assert conn.getresponse().status == 503
        conn.close()
    finally:
        proxy.stop()


def test_tls_with_http2_the_proxy_protocol_and_a_bound_on_old_processes() -> None:
    """What tests/e2e/test_haproxy_tls.py relies on, named: TLS on :443 offering h2 first, a
    PROXY protocol v2 header on every connection to a daemon, and old processes stopped after
    a reload."""
    text = CFG.read_text()
    assert re.search(r"^\s+bind :443 ssl crt \S+ alpn h2,http/1\.1$", text, re.MULTILINE)
    (servers,) = re.findall(r"^\s+default-server (.+)$", text, re.MULTILINE)
    assert "send-proxy-v2" in servers.split()
    assert re.search(r"^\s+hard-stop-after \d+s$", text, re.MULTILINE)
