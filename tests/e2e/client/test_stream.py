"""ssekd-client's `openStream` (www/ssekd-client/stream.js) in headless Chromium against a real
daemon and broker: a reload resumes from the id kept in sessionStorage with nothing lost or
twice; a daemon restart and ssekd's "try later" refusal (a 200 that ends) are survived; a token
provider renews a guarded stream on its challenge before `exp`, and refreshes a refused token
once; and 200 streams dropped at once by a restart come back spread over the backoff window,
not in the same instant."""

from __future__ import annotations

import json
import statistics
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.serialization import Encoding

from ssekd.dev.broker import Broker, free_port
from ssekd.dev.certs import issue, make_ca, write_store
from tests.support import zilla_config as zc
from tests.support.broker import Kafka
from tests.support.browser import Browser, trust_ca
from tests.support.daemon import start_daemon
from tests.support.jwt import JwksServer, ec_key, wait_keys_loaded
from tests.support.jwt import write_config as write_jwt_config
from tests.support.pki import PASSWORD
from tests.support.sse import SseClient
from tests.support.streamd import config as stream_config
from tests.support.streamd import write_config
from tests.support.wait import wait_until

pytestmark = [pytest.mark.browser, pytest.mark.daemon, pytest.mark.broker]

CLIENT = "/www/ssekd-client/stream.js"


def _wait(browser: Browser, expr: str, want: Any, timeout: float = 20.0) -> None:
    wait_until(lambda: browser.evaluate(expr) == want, timeout, interval=0.1,
               what=lambda: f"{expr} = {browser.evaluate(expr)!r}, wanted {want!r}")


def _load_client(browser: Browser) -> None:
    """Import stream.js into the page (a page of the daemon's origin) as `window.client`."""
    _wait(browser, "location.pathname + ' ' + document.readyState", "/www/style.css complete")
    browser.evaluate(f"import('{CLIENT}').then(m => {{ window.client = m; }}, "
                     "e => { window.loadError = String(e); })")
    _wait(browser, "Boolean(window.client || window.loadError)", True)
    assert browser.evaluate("window.loadError || null") is None


def _page(port: int, scheme: str = "http") -> str:
    return f"{scheme}://127.0.0.1:{port}/www/style.css"


class Producer:
    """Records into `topic`, numbered, keyed over five keys; `produced` in order."""

    def __init__(self, kafka: Kafka, topic: str) -> None:
        self.kafka, self.topic = kafka, topic
        self.produced: list[str] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __call__(self, n: int) -> None:
        for _ in range(n):
            i = len(self.produced)
            value = json.dumps({"key": f"k{i % 5}", "seq": i})
            self.kafka.produce(self.topic, value.encode(), key=f"k{i % 5}".encode())
            self.produced.append(value)
        self.kafka.flush()

    def start(self, every: float = 0.05) -> None:
        def run() -> None:
            while not self._stop.wait(every):
                self(1)
        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)


# What a test page runs: one stream whose events are appended to sessionStorage (so the record
# of what the page got survives its reloads), its states and the URLs it asked.
OPEN = """(() => {
    const log = JSON.parse(sessionStorage.getItem('test:got') || '[]');
    window.states = []; window.urls = []; window.infos = []; window.comments = [];
    window.got = log;
    window.s = client.openStream(%(url)s, {
        retry: %(retry)s,
        transport: (u, init) => {
            const query = new URL(u, location.href).searchParams.get('lastEventId');
            window.urls.push([(init.headers || {})['last-event-id'] || null, query]);
            return fetch(u, init);
        },
    });
    s.on('message', e => { log.push(e.data); sessionStorage.setItem('test:got', JSON.stringify(log)); });
    s.on(':', e => window.comments.push(e.data));
    s.onState((st, info) => { window.states.push(st); window.infos.push(info); });
    return true;
})()"""


def _open(browser: Browser, url: str, retry: str = "{min: 100, max: 2000}") -> None:
    browser.evaluate(OPEN % {"url": json.dumps(url), "retry": retry})


@pytest.fixture
def streamd(kafka_broker: Broker, tmp_path: Path) -> Iterator[tuple[Path, int]]:
    port = free_port()
    yield write_config(tmp_path, kafka_broker.bootstrap, port, retry=200), port


@pytest.mark.timeout(120)
def test_a_reload_resumes_with_nothing_lost_or_twice(kafka: Kafka, streamd: tuple[Path, int]
                                                     ) -> None:
    """Records keep coming while the page reloads: the new page's first request carries the id
    the old page stored (as ?lastEventId= and Last-Event-ID), and the two pages together got
    every record once. Without the stored id the new page would start over (every record
    again)."""
    config, port = streamd
    topic = kafka.topic(3)
    produce = Producer(kafka, topic)
    produce(10)
    daemon = start_daemon(config, wait_ports=[port])
    browser = Browser(_page(port))
    try:
        _load_client(browser)
        _open(browser, f"/events/{topic}")
        _wait(browser, "window.got.length", 10)
        stored = browser.evaluate(f"sessionStorage.getItem('ssekd:last-id:/events/{topic}')")
        assert stored and stored == browser.evaluate("s.lastEventId")
        assert browser.evaluate("window.urls") == [[None, None]]
        produce.start()
        time.sleep(0.5)
        browser.evaluate("window.before = true; location.reload()")
        _wait(browser, "window.before === undefined", True)
        _load_client(browser)
        _open(browser, f"/events/{topic}")
        time.sleep(0.5)
        produce.stop()
        _wait(browser, "window.got.length", len(produce.produced))
        got = browser.evaluate("JSON.parse(sessionStorage.getItem('test:got'))")
        assert sorted(got) == sorted(produce.produced)
        assert len(set(got)) == len(got), "nothing twice"
        (header, query), = browser.evaluate("window.urls")  # one connection, with the id
        assert query and header == query
    finally:
        produce.stop()
        browser.close()
        daemon.stop()


@pytest.mark.timeout(180)
def test_a_daemon_restart_is_survived(kafka: Kafka, streamd: tuple[Path, int]) -> None:
    """The daemon stops (its streams end with a finished 200) and stays down a moment (the
    reconnects meet refused connections), twice: the stream comes back on its own each time
    with its last id, and has every record once."""
    config, port = streamd
    topic = kafka.topic(3)
    produce = Producer(kafka, topic)
    produce(10)
    daemon = start_daemon(config, wait_ports=[port])
    browser = Browser(_page(port))
    try:
        _load_client(browser)
        _open(browser, f"/events/{topic}")
        _wait(browser, "window.got.length", 10)
        for _ in range(2):
            daemon.stop()
            produce(7)
            time.sleep(1.0)  # down: connection attempts fail meanwhile
            daemon = start_daemon(config, wait_ports=[port])
            produce(3)
            _wait(browser, "window.got.length", len(produce.produced))
        got = browser.evaluate("window.got")
        assert sorted(got) == sorted(produce.produced)
        assert len(set(got)) == len(got)
        reasons = [i.get("reason") for i in browser.evaluate("window.infos")]
        assert "the stream ended" in reasons and "network error" in reasons, reasons
        assert browser.evaluate("s.state") == "open"
        urls = browser.evaluate("window.urls")
        assert all(header and header == query for header, query in urls[1:]), \
            "every reconnect sent its last id"
    finally:
        browser.close()
        daemon.stop()


@pytest.mark.timeout(120)
def test_a_try_later_refusal_is_retried(kafka: Kafka, kafka_broker: Broker, tmp_path: Path
                                        ) -> None:
    """ssekd's temporary refusal, as a deploy's drain or a limit gives it: a 200 holding
    `retry:` and `: try later: ...` that ends at once. The stream waits (the server's retry: as
    the backoff's base, doubling while refused), asks again, and streams once there is room.
    EventSource would do the same; an error status would have ended it for good."""
    topic = kafka.topic(1)
    produce = Producer(kafka, topic)
    produce(5)
    port = free_port()
    node = stream_config(kafka_broker.bootstrap, port, retry=150)
    node["bindings"]["sse"]["options"]["limits"] = {"streams": 1}
    config = zc.write(tmp_path / "zilla-limit.yaml", node)
    daemon = start_daemon(config, wait_ports=[port])
    hog = SseClient(port, f"/events/{topic}")  # takes the one stream there is room for
    browser = Browser(_page(port))
    try:
        _load_client(browser)
        _open(browser, f"/events/{topic}", retry="{min: 5000, max: 1000}")
        wait_until(lambda: browser.evaluate("window.urls.length") >= 3, 20,
                   what="three tries while refused")
        comments = browser.evaluate("window.comments")
        assert any(c.startswith("try later") for c in comments), comments
        assert browser.evaluate("window.got.length") == 0
        delays = [i["delay"] for i in browser.evaluate("window.infos") if "delay" in i]
        # the server's retry: (150 ms) is the base, not retry.min (5 s); retry.max caps it
        assert delays and all(0 <= d <= 1000 for d in delays), delays
        hog.close()
        _wait(browser, "window.got.length", 5)
        produce(3)
        _wait(browser, "window.got.length", 8)
        assert browser.evaluate("window.got") == produce.produced
        assert browser.evaluate("s.state") == "open"
    finally:
        browser.close()
        daemon.stop()


# -- guarded streams ---------------------------------------------------------------------------

TOKEN_PAGE = """(() => {
    window.got = []; window.states = []; window.tokens = 0; window.gets = 0; window.posts = 0;
    window.s = client.openStream(%(url)s, {
        storage: null,
        token: async () => { window.tokens++;
            const r = await fetch(%(token_url)s + (window.tokens === 1 ? %(first)s : %(later)s));
            return (await r.text()).trim(); },
        transport: (u, init) => { if ((init.method || 'GET') === 'GET') window.gets++; else window.posts++;
                                  return fetch(u, init); },
    });
    s.on('message', e => window.got.push(e.data));
    s.onState((st, info) => window.states.push([st, info]));
})()"""


@pytest.mark.timeout(180)
def test_a_challenge_renews_before_exp_with_a_fresh_token(kafka_broker: Broker,
                                                          tmp_path: Path) -> None:
    """6-second tokens, challenged 3 s before `exp`: the provider is called for each
    challenge and the renewal POST is accepted (204), so the one stream lives past the first
    tokens' `exp` (12 s and more) and gets every record once, without reconnecting. The
    token goes in `Authorization: Bearer` (the route reads it there or from access_token)."""
    kafka = Kafka(kafka_broker.bootstrap)
    topic = kafka.topic(2, prefix="client-jwt")
    produce = Producer(kafka, topic)
    key = ec_key()
    jwks = JwksServer([key]).up()
    port = free_port()
    daemon = start_daemon(write_jwt_config(tmp_path, port, kafka_broker.bootstrap, jwks.url,
                                           challenge=3), wait_ports=[port])
    wait_keys_loaded(daemon)
    browser = Browser(_page(port))
    try:
        _load_client(browser)
        ttl = json.dumps("?sub=alice&scope=read&ttl=6")
        browser.evaluate(TOKEN_PAGE % {"url": json.dumps(f"/events/{topic}"),
                                       "token_url": json.dumps(jwks.token_url),
                                       "first": ttl, "later": ttl})
        _wait(browser, "s.state", "open")
        opened = time.monotonic()
        produce.start(0.2)
        wait_until(lambda: browser.evaluate(
            "window.states.filter(([st, i]) => i.renewed === true).length") >= 4, 30,
            what=lambda: f"four renewals: {browser.evaluate('JSON.stringify(window.states)')}")
        produce.stop()
        assert time.monotonic() - opened > 9, "lived past the first tokens' exp"
        _wait(browser, "window.got.length", len(produce.produced))
        assert browser.evaluate("window.got") == produce.produced
        assert browser.evaluate("window.gets") == 1, "the stream itself never dropped"
        assert browser.evaluate("window.tokens") >= 5  # the first, and one per challenge
        assert browser.evaluate("window.posts") >= 4
        assert not browser.evaluate(
            "window.states.some(([st, i]) => i.renewed === false)")
    finally:
        produce.stop()
        browser.close()
        daemon.stop()
        jwks.down()
    assert "GUARD_JWT_AUTHORIZATION_FAILED" not in daemon.output()


@pytest.mark.timeout(120)
def test_a_refused_token_is_refreshed_once_else_the_stream_says_why(kafka_broker: Broker,
                                                                    tmp_path: Path) -> None:
    """An expired first token: the stream is refused (403), the provider is asked once more,
    and the fresh token streams. A provider that only gives expired tokens: one refresh,
    then "closed" with the status and why - no loop. Without a provider: 401, closed."""
    kafka = Kafka(kafka_broker.bootstrap)
    topic = kafka.topic(1, prefix="client-jwt-late")
    Producer(kafka, topic)(3)
    key = ec_key()
    jwks = JwksServer([key]).up()
    port = free_port()
    daemon = start_daemon(write_jwt_config(tmp_path, port, kafka_broker.bootstrap, jwks.url),
                          wait_ports=[port])
    wait_keys_loaded(daemon)
    browser = Browser(_page(port))
    url, token_url = json.dumps(f"/events/{topic}"), json.dumps(jwks.token_url)
    expired, fresh = json.dumps("?ttl=-30"), json.dumps("?ttl=60")
    try:
        _load_client(browser)
        browser.evaluate(TOKEN_PAGE % {"url": url, "token_url": token_url,
                                       "first": expired, "later": fresh})
        _wait(browser, "window.got.length", 3)
        assert browser.evaluate("[window.tokens, window.gets]") == [2, 2]

        browser.evaluate("s.close()")
        browser.evaluate(TOKEN_PAGE % {"url": url, "token_url": token_url,
                                       "first": expired, "later": expired})
        _wait(browser, "s.state", "closed")
        time.sleep(0.5)
        assert browser.evaluate("[window.tokens, window.gets]") == [2, 2]
        assert browser.evaluate("s.info") == {"reason": "the token was refused", "status": 403}

        browser.evaluate(f"window.bare = client.openStream({url}, {{storage: null}})")
        _wait(browser, "bare.state", "closed")
        assert browser.evaluate("bare.info") == {"reason": "a token is needed", "status": 401}
    finally:
        browser.close()
        daemon.stop()
        jwks.down()


# -- the reconnect spread ----------------------------------------------------------------------

SPREAD = """(() => {
    window.streams = [];
    for (let i = 0; i < %(n)d; i++) {
        const st = {opens: [], waits: [], events: 0};
        const s = client.openStream(%(url)s, {storage: null, retry: {min: 1000, max: 8000}});
        s.on('message', () => st.events++);
        s.onState((state, info) => {
            if (state === 'open') st.opens.push(Date.now());
            if (state === 'waiting') st.waits.push([Date.now(), info.delay]);
        });
        window.streams.push(st);
    }
})()"""


REOPENED = "window.streams.filter(s => s.opens.length >= 2).length"
LAGGARDS = "JSON.stringify(window.streams.filter(s => s.opens.length < 2))"


def _percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


@pytest.mark.timeout(240)
def test_streams_dropped_at_once_come_back_spread(kafka: Kafka, kafka_broker: Broker,
                                                  tmp_path: Path) -> None:
    """200 streams in one page over HTTP/2 (TLS, the test CA trusted), all dropped by one
    daemon restart: their reconnects are spread over the backoff window (full jitter, the
    server's retry: 1000 ms as base), not all in the same 100 ms, as EventSource's fixed
    retry: would bring them. The figures go to bench/results/client_reconnect_spread.json."""
    n = 200
    topic = kafka.topic(1)
    Producer(kafka, topic)(2)
    ca = make_ca("ssekd client test CA")
    store = tmp_path / "keys.p12"
    write_store(store, "localhost", issue(ca, ["localhost", "127.0.0.1"]), PASSWORD)
    ca_pem = tmp_path / "ca.pem"
    ca_pem.write_bytes(ca.cert.public_bytes(Encoding.PEM))
    port = free_port()
    node = zc.sse_stack(
        port, kafka_broker.bootstrap, name="spread", www=Path(__file__).resolve().parents[3] / "www",
        tls=zc.tls_server("server", alpn=["h2", "http/1.1"]),
        vaults={"server": zc.keys_vault(store, PASSWORD)},
        http=zc.http_server(limits={"h2-streams": 400}),
        sse=zc.sse_server(retry=1000), routes=[zc.sse_route("/events/{topic}")])
    config = zc.write(tmp_path / "zilla-spread.yaml", node)
    daemon = start_daemon(config, wait_ports=[port])
    browser = Browser(_page(port, "https"), env=trust_ca(tmp_path / "home", ca_pem))
    try:
        _load_client(browser)
        assert browser.evaluate(
            "performance.getEntriesByType('navigation')[0].nextHopProtocol") == "h2"
        browser.evaluate(SPREAD % {"n": n, "url": json.dumps(f"/events/{topic}")})
        _wait(browser, "window.streams.filter(s => s.events === 2).length", n, timeout=60)
        dropped = time.time() * 1000
        daemon.stop()
        time.sleep(0.5)
        daemon = start_daemon(config, wait_ports=[port])
        back = time.time() * 1000
        # ">= 2": a stream may open a third time (reconnected while the old daemon was still
        # going away, then cut by its exit); what counts here is that every stream came back
        wait_until(lambda: browser.evaluate(REOPENED) == n, 60, interval=0.1,
                   what=lambda: f"not reopened: {browser.evaluate(LAGGARDS)}")
        streams = browser.evaluate("window.streams")
        first_delays = [s["waits"][0][1] for s in streams]
        reopened = [s["opens"][1] - back for s in streams]
        tries = [len(s["waits"]) for s in streams]
        # the first attempts: spread over [0, 1000) ms by the jitter alone
        assert all(0 <= d < 1000 for d in first_delays)
        assert _percentile(first_delays, 90) - _percentile(first_delays, 10) > 500
        # the reconnects: not all in the same 100 ms (EventSource's would be)
        busiest = max(sum(1 for r in reopened if start <= r < start + 100) for start in reopened)
        assert busiest < n / 4, f"{busiest} of {n} came back in the same 100 ms"
        figures = {
            "streams": n, "protocol": "h2", "server_retry_ms": 1000,
            "daemon_down_ms": round(back - dropped),
            "first_delay_ms": {p: _percentile(first_delays, p) for p in (10, 50, 90)},
            "reopened_after_daemon_back_ms": {p: round(_percentile(reopened, p))
                                              for p in (10, 50, 90)},
            "reopened_spread_p90_p10_ms": round(_percentile(reopened, 90)
                                                - _percentile(reopened, 10)),
            "busiest_100ms": busiest, "tries_mean": statistics.mean(tries),
            "opened_more_than_twice": sum(1 for s in streams if len(s["opens"]) > 2),
        }
        _write_figures("client_reconnect_spread", figures)
        print(json.dumps(figures))
    finally:
        browser.close()
        daemon.stop()


def _write_figures(name: str, figures: dict[str, Any]) -> None:
    from bench.common import write_result
    write_result(name, figures)
