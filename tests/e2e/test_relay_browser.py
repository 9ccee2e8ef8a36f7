"""Headless Chromium loads the demo page from the SSE relay, its stream pointed at the relay,
which relays an upstream ssekd serving the topic. The upstream is killed and started again, then
the relay itself is restarted: the page ends up with every record exactly once, in one table."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ssekd.dev.broker import Broker
from tests.support.broker import Kafka
from tests.support.browser import Browser
from tests.support.daemon import start_daemon
from tests.support.relay import relay_config, write_upstream
from tests.support.wait import wait_until

# chromium is installed by `make test`
pytestmark = [pytest.mark.browser, pytest.mark.daemon, pytest.mark.broker]


def _wait(browser: Browser, expr: str, want: Any, timeout: float = 30.0) -> None:
    wait_until(lambda: browser.evaluate(expr) == want, timeout, interval=0.1,
               what=lambda: f"{expr} = {browser.evaluate(expr)!r}, wanted {want!r}")


@pytest.mark.timeout(180)
def test_demo_page_through_the_relay_survives_upstream_and_relay_restarts(
        kafka: Kafka, kafka_broker: Broker, tmp_path: Path) -> None:
    topic = kafka.topic(1)
    produced: list[str] = []

    def produce(n: int) -> None:
        for _ in range(n):
            i = len(produced)
            value = json.dumps({"key": f"k{i % 5}", "seq": i})
            kafka.produce(topic, value.encode(), key=f"k{i % 5}".encode())
            produced.append(value)
        kafka.flush()

    upstream = write_upstream(tmp_path, kafka_broker.bootstrap)
    upstream.start()
    config, port = relay_config(tmp_path, upstream.port)
    relay = start_daemon(config, wait_ports=[port])
    produce(10)
    browser = Browser(f"http://127.0.0.1:{port}/www/index.html?stream=/events/{topic}")
    try:
        _wait(browser, "window.ssekd && window.ssekd.received.length", 10)
        upstream.kill()  # the relay's upstream drops; the page's stream to the relay stays
        produce(5)
        upstream.start()
        produce(5)
        _wait(browser, "window.ssekd.received.length", len(produced))
        assert browser.evaluate("window.ssekd.opens") == 1
        relay.stop()  # the page's stream ends; it reconnects to the new relay with its last id
        produce(5)
        relay = start_daemon(config, wait_ports=[port])
        produce(5)
        _wait(browser, "window.ssekd.received.length", len(produced))
        stats = json.loads(browser.evaluate("JSON.stringify(window.ssekd)"))
        assert [r["data"] for r in stats["received"]] == produced  # each once, in order
        assert stats["opens"] >= 2
        assert browser.evaluate("document.getElementById('stream').textContent") == \
            f"/events/{topic}"
        assert browser.evaluate("document.querySelectorAll('#rows tr').length") == 5
    finally:
        browser.close()
        relay.stop()
        upstream.stop()
