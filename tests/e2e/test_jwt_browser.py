"""The guarded demo page in headless Chromium: 6-second tokens and `challenge: 3`, so the page
renews its token every three seconds or so, while records keep coming until it renewed four
times (about 12 s: the first token and two renewed ones ran out meanwhile); it must show
every one of them exactly once, say "renewed", and never lose the stream. Without a way to
renew, the same page shows "expired" once the token runs out."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from urllib.parse import quote

import pytest

from ssekd.dev.broker import Broker, free_port
from tests.support.broker import Kafka
from tests.support.browser import Browser
from tests.support.daemon import start_daemon
from tests.support.jwt import JwksServer, ec_key, wait_keys_loaded, write_config

pytestmark = [pytest.mark.browser, pytest.mark.daemon, pytest.mark.broker]


def _wait(browser: Browser, expr: str, done: object, timeout: float = 20.0) -> object:
    deadline = time.monotonic() + timeout
    value = None
    while time.monotonic() < deadline:
        value = browser.evaluate(expr)
        if value == done:
            return value
        time.sleep(0.1)
    raise AssertionError(f"{expr} = {value!r}, wanted {done!r}")


@pytest.mark.timeout(180)
@pytest.mark.broker
def test_guarded_page_streams_across_renewals_and_misses_nothing(
        kafka_broker: Broker, tmp_path: Path) -> None:
    kafka = Kafka(kafka_broker.bootstrap)
    topic = kafka.topic(3, prefix="jwt-page")
    key = ec_key()
    jwks = JwksServer([key]).up()
    port = free_port()
    daemon = start_daemon(write_config(tmp_path, port, kafka_broker.bootstrap, jwks.url,
                                       challenge=3), wait_ports=[port])
    produced: list[str] = []
    stop = threading.Event()

    def produce() -> None:
        while not stop.wait(0.2):
            i = len(produced)
            value = json.dumps({"key": f"k{i % 5}", "seq": i})
            kafka.produce(topic, value.encode(), key=f"k{i % 5}".encode())
            kafka.flush()
            produced.append(value)

    renew = quote(f"{jwks.token_url}?sub=alice&scope=read&ttl=6", safe="")
    page = (f"http://127.0.0.1:{port}/www/index.html?stream=/events/{topic}"
            f"&token={key.token(ttl=6)}&renew={renew}")
    wait_keys_loaded(daemon)
    browser = Browser(page)
    producer = threading.Thread(target=produce, daemon=True)
    try:
        _wait(browser, "window.ssekd && window.ssekd.opens", 1)
        producer.start()
        # four renewals (about 12 s): the first token and the first two renewed ones ran out
        _wait(browser, "window.ssekd.renewals >= 4", True, timeout=30)
        stop.set()
        producer.join(5)
        _wait(browser, "window.ssekd.received.length", len(produced), timeout=10)
        stats = json.loads(browser.evaluate("JSON.stringify(window.ssekd)"))
        assert [r["data"] for r in stats["received"]] == produced, "every record, once, in order"
        assert len(produced) >= 40  # 5 a second for the 12 s four renewals take at least
        assert stats["renewals"] >= 4, stats  # a 6 s token renewed ~3 s before it expires
        assert stats["refusedRenewals"] == 0
        assert stats["opens"] == 1 and stats["reopens"] == 0, "the stream itself never dropped"
        assert "expired" not in stats["states"]
        assert browser.evaluate("document.getElementById('state').textContent") == "renewed"
        assert jwks.requests.count("/jwks.json") >= 1
    finally:
        stop.set()
        browser.close()
        daemon.stop()
        jwks.down()
    assert "GUARD_JWT_AUTHORIZATION_FAILED" not in daemon.output()


@pytest.mark.timeout(120)
@pytest.mark.broker
def test_without_renewal_the_page_shows_expired(kafka_broker: Broker, tmp_path: Path) -> None:
    key = ec_key()
    jwks = JwksServer([key]).up()
    port = free_port()
    daemon = start_daemon(write_config(tmp_path, port, kafka_broker.bootstrap, jwks.url,
                                       challenge=2), wait_ports=[port])
    browser = Browser(f"http://127.0.0.1:{port}/www/index.html?stream=/events/none"
                      f"&token={key.token(ttl=10)}")
    try:
        # The challenge comes 2 s before `exp`: the token lives long enough for a browser
        # started on a loaded machine (seen taking over 4 s) to be streaming by then.
        _wait(browser, "window.ssekd && window.ssekd.challenges", 1, timeout=20)
        _wait(browser, "document.getElementById('state').textContent", "expired", timeout=20)
    finally:
        browser.close()
        daemon.stop()
        jwks.down()


@pytest.mark.timeout(120)
@pytest.mark.broker
def test_a_page_opened_late_or_without_a_token_gets_a_fresh_one(kafka_broker: Broker,
                                                                 tmp_path: Path) -> None:
    """The link `make run` printed, opened after its token expired, and the page opened with
    only the way to renew: both fetch a token and stream (before: a red "expired", "0 events",
    "Waiting for events…"). With neither, the page says it needs a token."""
    kafka = Kafka(kafka_broker.bootstrap)
    topic = kafka.topic(1, prefix="jwt-late")
    for i in range(3):
        kafka.produce(topic, json.dumps({"key": f"k{i}", "seq": i}).encode(), key=f"k{i}".encode())
    kafka.flush()
    key = ec_key()
    jwks = JwksServer([key]).up()
    port = free_port()
    daemon = start_daemon(write_config(tmp_path, port, kafka_broker.bootstrap, jwks.url,
                                       challenge=3), wait_ports=[port])
    wait_keys_loaded(daemon)
    renew = quote(f"{jwks.token_url}?sub=alice&scope=read&ttl=60", safe="")
    page = f"http://127.0.0.1:{port}/www/index.html?stream=/events/{topic}"
    pages = {"expired": f"{page}&token={key.token(ttl=-30)}&renew={renew}",
             "no token": f"{page}&renew={renew}"}
    try:
        for what, url in pages.items():
            browser = Browser(url)
            try:
                _wait(browser, "window.ssekd && window.ssekd.received.length", 3)
                stats = json.loads(browser.evaluate("JSON.stringify(window.ssekd)"))
                assert stats["reopens"] == 1 and stats["opens"] == 1, (what, stats)
                assert browser.evaluate("document.getElementById('state').textContent") == \
                    "open", what
            finally:
                browser.close()
        browser = Browser(page)
        try:
            _wait(browser, "document.getElementById('state').textContent", "needs a token",
                  timeout=10)
            assert "needs a token" in browser.evaluate("document.getElementById('log')"
                                                       ".textContent")
        finally:
            browser.close()
    finally:
        daemon.stop()
        jwks.down()
