"""Headless Chromium reads twelve streams from the daemon over HTTP/3 (issue 42), then keeps them
through a daemon restart.

The daemon listens for TCP (tls -> http) and for QUIC on the same port number, both exiting to
one http server. Chromium is forced onto QUIC for the origin (it would not take an `Alt-Svc`
hint from a certificate of a test CA, see `tests.support.browser`), so the page, its script and
its twelve EventSources all travel over QUIC, which the page's resource timing confirms
(`nextHopProtocol` `h3`). Twelve is more than the six connections per host Chromium opens over
HTTP/1.1: all twelve streams open at once only because they share one multiplexed connection.

Then the daemon stops and starts again on the same ports with the page left open: each
EventSource reconnects on its own, over a new QUIC connection, with its Last-Event-ID, and ends
up with every record of its topic once and in order, those produced while the daemon was down
included."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.serialization import Encoding

from ssekd.dev.broker import Broker, free_port
from ssekd.dev.certs import issue, make_ca, write_store
from tests.support import zilla_config as zc
from tests.support.broker import Kafka
from tests.support.browser import Browser, trust_ca
from tests.support.daemon import Daemon, start_daemon
from tests.support.wait import wait_until

# chromium is installed by `make test`
pytestmark = [pytest.mark.browser, pytest.mark.daemon, pytest.mark.broker]

STREAMS = 12
PASSWORD = "h3-test-store-pw"

#: The page: one EventSource per topic of `?topics=a,b,...`, each keeping what it received, its
#: event ids, and how often it opened. `protocols()` lists every request the page made that got
#: a response (navigation and resources) with the protocol it went over.
PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>ssekd over HTTP/3</title>
<script src="h3.js" defer></script></head>
<body><p id="state">loading</p></body></html>
"""
SCRIPT = """'use strict';
const topics = new URLSearchParams(location.search).get('topics').split(',');
window.streams = {};
for (const topic of topics) {
  const s = {got: [], ids: [], opens: 0, errors: 0};
  const es = new EventSource('/events/' + encodeURIComponent(topic));
  es.onopen = () => s.opens++;
  es.onerror = () => s.errors++;
  es.onmessage = (e) => { s.got.push(e.data); s.ids.push(e.lastEventId); };
  window.streams[topic] = s;
}
window.protocols = () => performance.getEntriesByType('navigation')
  .concat(performance.getEntriesByType('resource'))
  .filter((e) => e.responseStart > 0)
  .map((e) => [new URL(e.name).pathname, e.nextHopProtocol]);
document.getElementById('state').textContent = 'started';
"""


def _udp_bound(port: int) -> bool:
    """Whether a socket is bound to UDP `port` on 127.0.0.1, read from /proc/net/udp rather
    than by binding it ourselves: a probe bind could take the port the daemon is about to bind."""
    want = f"0100007F:{port:04X}"
    for line in Path("/proc/net/udp").read_text().splitlines()[1:]:
        if line.split()[1] == want:
            return True
    return False


def _free_tcp_and_udp_port() -> int:
    """A port number free for TCP and for UDP, so the daemon can serve h2 and h3 on one number
    as real deployments do (443/tcp and 443/udp)."""
    for _ in range(20):
        port = free_port()
        if not _udp_bound(port):
            return port
    raise AssertionError("no port free for both TCP and UDP")


def _config(folder: Path, bootstrap: str, port: int) -> Path:
    """tcp -> tls -> http (static page + sse -> sse-kafka -> kafka), and quic on the same port
    number exiting to the same http server; the vault holds the `localhost` key."""
    ca = make_ca("ssekd h3 test CA")
    store = folder / "keys.p12"
    write_store(store, "localhost", issue(ca, ["localhost", "127.0.0.1"]), PASSWORD)
    (folder / "ca.pem").write_bytes(ca.cert.public_bytes(Encoding.PEM))
    www = folder / "www"
    www.mkdir()
    (www / "h3.html").write_text(PAGE)
    (www / "h3.js").write_text(SCRIPT)
    quic: zc.Node = {"type": "quic", "kind": "server", "vault": "server",
                     "options": {"host": "127.0.0.1", "port": port, "keys": ["localhost"],
                                 "alpn": ["h3"], "limits": {"streams": 100}},
                     "exit": "http"}
    config = zc.sse_stack(
        port, bootstrap, name="h3browser", www=www,
        tls=zc.tls_server("server", sni=["localhost"], alpn=["h2", "http/1.1"]),
        vaults={"server": zc.keys_vault(store, "${{env.KEYSTORE_PASSWORD}}")},
        routes=[zc.sse_route("/events/{topic}")],
        sse=zc.sse_server(options={"retry": 100}),
        extra={"quic": quic})
    return zc.write(folder / "zilla.yaml", config)


def _start(config: Path, port: int) -> Daemon:
    daemon = start_daemon(config, env={"KEYSTORE_PASSWORD": PASSWORD}, wait_ports=[port])
    try:
        wait_until(lambda: _udp_bound(port), 20,
                   what=lambda: f"daemon did not bind UDP {port}:\n{daemon.output()}")
    except AssertionError:
        daemon.stop()
        raise
    return daemon


def _wait(browser: Browser, daemon: Daemon, expr: str, want: Any, timeout: float = 30.0) -> None:
    """Wait until `expr` is `want` in the page; a failure tells where the page is (a QUIC
    connection that failed leaves it at `chrome-error://`) and what the daemon said."""
    wait_until(lambda: browser.evaluate(expr) == want, timeout, interval=0.1,
               what=lambda: f"{expr} = {browser.evaluate(expr)!r}, wanted {want!r}; page at "
                            f"{browser.evaluate('location.href')!r}; daemon output:\n"
                            f"{daemon.output()[-4000:]}")


@pytest.mark.timeout(240)
def test_twelve_event_sources_over_h3_survive_a_daemon_restart(
        kafka: Kafka, kafka_broker: Broker, tmp_path: Path) -> None:
    topics = [kafka.topic(1) for _ in range(STREAMS)]  # one partition each: one order each
    port = _free_tcp_and_udp_port()
    config = _config(tmp_path, kafka_broker.bootstrap, port)
    produced: dict[str, list[str]] = {t: [] for t in topics}

    def produce(n: int) -> None:
        for _ in range(n):
            for t in topics:
                value = f"{t}#{len(produced[t])}"
                kafka.produce(t, value.encode(), key=b"k%d" % (len(produced[t]) % 3))
                produced[t].append(value)
        kafka.flush()

    def received() -> dict[str, Any]:
        return dict(json.loads(browser.evaluate("JSON.stringify(window.streams)")))

    def total() -> int:
        return sum(len(s["got"]) for s in received().values())

    def counts() -> dict[str, tuple[int, int, int]]:
        return {t: (len(s["got"]), s["opens"], s["errors"]) for t, s in received().items()}

    def wait_all(timeout: float = 30.0) -> None:
        want = sum(len(v) for v in produced.values())
        wait_until(lambda: total() >= want, timeout, interval=0.1,
                   what=lambda: f"{total()} of {want} events; (received, opens, errors) by "
                                f"topic: {counts()}\ndaemon output:\n{daemon.output()[-4000:]}")

    produce(10)
    daemon = _start(config, port)
    origin = f"localhost:{port}"
    browser = Browser(f"https://{origin}/www/h3.html?topics={','.join(topics)}",
                      env=trust_ca(tmp_path / "home", tmp_path / "ca.pem"),
                      quic_origins=[origin])
    try:
        _wait(browser, daemon, "document.readyState + ' ' + document.getElementById('state').textContent",
              "complete started")
        # every stream is open at once: over HTTP/1.1 Chromium would hold six of them back
        _wait(browser, daemon, "Object.values(window.streams).filter(s => s.opens === 1).length",
              STREAMS)
        wait_all()
        produce(5)  # live records, to the streams now open
        wait_all()
        protocols = browser.evaluate("window.protocols()")
        assert ["/www/h3.html", "h3"] in protocols, protocols
        assert ["/www/h3.js", "h3"] in protocols, protocols
        assert {p for _, p in protocols} == {"h3"}, protocols

        daemon.stop()  # ends every stream: each EventSource reconnects with its last id
        produce(7)  # records produced while the daemon is down
        daemon = _start(config, port)
        produce(3)  # and after it is back
        wait_all()

        streams = received()
        for t in topics:
            # each once and in order: a reconnect without its Last-Event-ID would start over
            assert streams[t]["got"] == produced[t], t
            assert streams[t]["opens"] >= 2, (t, streams[t])  # it reconnected by itself
            assert len(set(streams[t]["ids"])) == len(produced[t]) and all(streams[t]["ids"])
        # the streams that the restart ended are now resources with timing: over h3, each
        protocols = browser.evaluate("window.protocols()")
        streamed = [p for path, p in protocols if path.startswith("/events/")]
        assert len(streamed) >= STREAMS and set(streamed) == {"h3"}, protocols
        assert {p for _, p in protocols} == {"h3"}, protocols
    finally:
        browser.close()
        daemon.stop()
