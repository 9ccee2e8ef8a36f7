"""Headless Chromium loads the demo page; the server drops the stream several times (daemon
restarts on the same port); the page's EventSource reconnects by itself with its Last-Event-ID
and ends up with every produced record exactly once.

Chromium is driven over `--remote-debugging-pipe` (CDP as NUL-terminated JSON on fds 3 and 4),
which needs no websocket client."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ssekd.dev.broker import Broker, free_port
from tests.support.broker import Kafka
from tests.support.browser import Browser
from tests.support.daemon import start_daemon
from tests.support.streamd import write_config
from tests.support.wait import wait_until

# chromium is installed by `make test`
pytestmark = [pytest.mark.browser, pytest.mark.daemon, pytest.mark.broker]


def _wait(browser: Browser, expr: str, want: Any, timeout: float = 20.0) -> None:
    wait_until(lambda: browser.evaluate(expr) == want, timeout, interval=0.1,
               what=lambda: f"{expr} = {browser.evaluate(expr)!r}, wanted {want!r}")


@pytest.mark.timeout(180)
def test_page_reconnects_with_last_event_id(kafka: Kafka, kafka_broker: Broker,
                                            tmp_path: Path) -> None:
    topic = kafka.topic(3)
    port = free_port()
    config = write_config(tmp_path, kafka_broker.bootstrap, port, retry=100)
    produced: list[str] = []

    def produce(n: int) -> None:
        for _ in range(n):
            i = len(produced)
            value = json.dumps({"key": f"k{i % 5}", "seq": i})
            kafka.produce(topic, value.encode(), key=f"k{i % 5}".encode())
            produced.append(value)
        kafka.flush()

    produce(10)
    daemon = start_daemon(config, wait_ports=[port])
    browser = Browser(f"http://127.0.0.1:{port}/www/index.html?stream=/events/{topic}")
    try:
        _wait(browser, "window.ssekd && window.ssekd.received.length", 10)
        for round_ in range(3):
            daemon.stop()  # ends the stream with a finished 200: the browser will reconnect
            produce(7)  # records produced while the page is disconnected
            daemon = start_daemon(config, wait_ports=[port])
            produce(3)
            _wait(browser, "window.ssekd.received.length", len(produced))
        state = browser.evaluate("JSON.stringify(window.ssekd)")
        stats = json.loads(state)
        got = [r["data"] for r in stats["received"]]
        # each once: a reconnect without its Last-Event-ID would replay from the start
        assert sorted(got) == sorted(produced)
        assert stats["opens"] >= 4  # it reconnected on its own each time
        assert browser.evaluate("document.getElementById('state').textContent") == "open"
        rows = browser.evaluate("document.querySelectorAll('#rows tr').length")
        assert rows == 5  # latest value per key
    finally:
        browser.close()
        daemon.stop()
