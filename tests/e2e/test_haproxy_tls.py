"""A browser behind HAProxy as deploy/haproxy/haproxy.cfg has it: TLS on HAProxy's :443 (a
certificate of a test CA the browser trusts), HTTP/2 to the browser by ALPN, and the PROXY
protocol (`send-proxy-v2`) to the daemon, which trusts only HAProxy's address.

Headless Chromium opens 12 EventSources on one page. Over HTTP/1.1 it would hold 6
connections to a host at most, and the 7th stream would wait; all 12 stream at once here, over
one HTTP/2 connection. The daemon sees the browser's own address, 127.0.0.1, while HAProxy
connects from 127.0.0.2: it counts the 12 streams under it (with `connections-per-ip: 20`, only
8 more connections from 127.0.0.1 are taken while the page is open, and 20 once it is closed),
and its access events for the 12 streams name one address and port, the browser's one
connection."""

from __future__ import annotations

import re
import socket
import time
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.serialization import Encoding

from ssekd.dev.broker import free_port
from ssekd.dev.certs import issue, make_ca
from tests.support.broker import Kafka
from tests.support.browser import Browser, trust_ca
from tests.support.daemon import start_daemon
from tests.support.haproxy import BALANCER, TRUST_BALANCER, start_haproxy
from tests.support.pki import write_pem
from tests.support.streamd import write_config
from tests.support.wait import wait_until

pytestmark = [pytest.mark.daemon, pytest.mark.broker, pytest.mark.browser]

STREAMS = 12
PER_IP = 20

PAGE = """<!doctype html>
<meta charset="utf-8"><title>12 streams</title>
<script>
  const topic = new URLSearchParams(location.search).get("topic");
  window.streams = [];
  for (let i = 0; i < COUNT; i++) {
    const seen = {open: false, data: [], errors: 0};
    const source = new EventSource(`/events/${topic}`);
    source.onopen = () => { seen.open = true; };
    source.onmessage = (event) => { seen.data.push(event.data); };
    source.onerror = () => { seen.errors++; };
    window.streams.push(seen);
  }
</script>
""".replace("COUNT", str(STREAMS))


def hold_until_refused(port: int) -> list[socket.socket]:
    """Open one connection more than the daemon's per-address limit from 127.0.0.1, and keep
    those it keeps: it closes one over the limit at once, unanswered."""
    opened = [socket.create_connection(("127.0.0.1", port), timeout=5,
                                       source_address=("127.0.0.1", 0))
              for _ in range(PER_IP + 1)]
    time.sleep(0.5)
    held = []
    for s in opened:
        s.setblocking(False)
        try:
            closed = s.recv(1, socket.MSG_PEEK) == b""
        except BlockingIOError:
            closed = False  # open, nothing said: kept
        except ConnectionResetError:
            closed = True
        if closed:
            s.close()
        else:
            held.append(s)
    return held


def test_twelve_eventsources_over_one_http2_connection_and_the_daemon_sees_the_browser(
        kafka: Kafka, tmp_path: Path) -> None:
    topic = kafka.topic(1)
    www = tmp_path / "www"
    www.mkdir()
    (www / "page.html").write_text(PAGE)
    port = free_port()
    config = write_config(tmp_path, kafka.bootstrap, port, health=True, www=www,
                          tcp_options=f"{TRUST_BALANCER}, limits: {{connections-per-ip: {PER_IP}}}")
    # one process: the per-address count is each worker's own (docs/operations.md, Workers)
    daemon = start_daemon(config, wait_ports=[port], extra_args=["--workers", "1"])
    ca = make_ca("haproxy e2e CA")
    certificate = write_pem(tmp_path / "ssekd.pem", issue(ca, ["localhost", "127.0.0.1"]))
    ca_pem = tmp_path / "ca.pem"
    ca_pem.write_bytes(ca.cert.public_bytes(Encoding.PEM))
    tls_port = free_port()
    proxy = start_haproxy(tmp_path, free_port(), [port], tls_port, certificate)
    browser = None
    held: list[socket.socket] = []
    try:
        wait_until(lambda: proxy.status("ssekd1") == "UP", 20,
                   what=lambda: f"not UP: {proxy.show_stat()}")
        browser = Browser(f"https://127.0.0.1:{tls_port}/www/page.html?topic={topic}",
                          env=trust_ca(tmp_path / "home", ca_pem))

        def opened() -> int:
            return int(browser.evaluate(
                "(window.streams || []).filter(s => s.open).length") or 0)

        wait_until(lambda: opened() == STREAMS, 30,
                   what=lambda: f"{opened()} of {STREAMS} open:\n{daemon.output()[-3000:]}")
        assert browser.evaluate(
            "performance.getEntriesByType('navigation')[0].nextHopProtocol") == "h2"
        markers = kafka.mark(topic)

        def delivered() -> int:
            return int(browser.evaluate(
                f"window.streams.filter(s => s.data.includes({markers[0]!r})).length"))

        wait_until(lambda: delivered() == STREAMS, 20,
                   what=lambda: f"{delivered()} of {STREAMS} streams got the event")
        assert browser.evaluate("window.streams.map(s => s.errors)") == [0] * STREAMS
        assert int(proxy.show_stat()["ssekd1"]["scur"]) >= STREAMS

        # the daemon counts the 12 streams under the browser's address, not HAProxy's
        held = hold_until_refused(port)
        assert PER_IP - STREAMS - 1 <= len(held) <= PER_IP - STREAMS, len(held)
        daemon.wait_output(f"BINDING_TCP_CONNECTION_REFUSED 127.0.0.1: connections-per-ip "
                           f"limit {PER_IP} reached")
        assert f"BINDING_TCP_CONNECTION_REFUSED {BALANCER}" not in daemon.output()
        for s in held:
            s.close()
        held = []
        browser.close()
        browser = None
        # the access events of the 12 streams name the browser: one address and port
        daemon.wait_output("BINDING_SSE_STREAM_ENDED", count=STREAMS, timeout=20)
        peers = re.findall(r"BINDING_SSE_STREAM_ENDED peer=(\S+) method=GET path=/events/",
                           daemon.output())
        assert len(peers) == STREAMS and len(set(peers)) == 1, peers
        assert peers[0].startswith("127.0.0.1:"), peers

        # closed: its streams' connections are given back (the page's own, idle in HAProxy's
        # pool, may stay until HAProxy's idle timeout)
        def taken_again() -> bool:
            nonlocal held
            for s in held:
                s.close()
            held = hold_until_refused(port)
            return len(held) >= PER_IP - 1

        wait_until(taken_again, 15, interval=0.5,
                   what=lambda: f"{len(held)} of {PER_IP} once the page closed")
    finally:
        for s in held:
            s.close()
        if browser is not None:
            browser.close()
        proxy.stop()
        daemon.stop()
