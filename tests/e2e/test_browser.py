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


@pytest.mark.timeout(180)
def test_one_event_source_reads_two_topics_and_resumes_both(kafka: Kafka, kafka_broker: Broker,
                                                            tmp_path: Path) -> None:
    """Several topics on one stream (an ssekd addition): a browser's EventSource on
    `/many/a,b` listens to each topic by name; the daemon restarts under it twice, and its
    automatic reconnects (with the several-topic Last-Event-ID) give every record of both
    topics once."""
    a, b = kafka.topic(2), kafka.topic(1)
    port = free_port()
    config = write_config(tmp_path, kafka_broker.bootstrap, port, retry=100)
    produced: dict[str, list[str]] = {a: [], b: []}

    def produce(n: int) -> None:
        for i in range(n):
            topic = (a, b)[i % 2]
            value = f"{topic}-{len(produced[topic])}"
            kafka.produce(topic, value.encode(), key=b"k%d" % (i % 3))
            produced[topic].append(value)
        kafka.flush()

    produce(10)
    daemon = start_daemon(config, wait_ports=[port])
    browser = Browser(f"http://127.0.0.1:{port}/www/style.css")
    try:
        # the script goes into the page once it is there (same origin as the stream)
        _wait(browser, "location.pathname + ' ' + document.readyState",
              "/www/style.css complete")
        browser.evaluate(f"""(() => {{
            window.got = {{}}; window.opens = 0;
            const es = new EventSource('/many/{a},{b}');
            es.onopen = () => window.opens++;
            for (const t of ['{a}', '{b}']) {{
                window.got[t] = [];
                es.addEventListener(t, e => window.got[t].push(e.data));
            }}
            es.onmessage = e => (window.unnamed = (window.unnamed || 0) + 1);
            return true;
        }})()""")
        total = f"window.got['{a}'].length + window.got['{b}'].length"
        _wait(browser, total, 10)
        for _ in range(2):
            daemon.stop()  # ends the stream: the page reconnects with its last id
            produce(6)
            daemon = start_daemon(config, wait_ports=[port])
            produce(4)
            _wait(browser, total, len(produced[a]) + len(produced[b]))
        got = json.loads(browser.evaluate("JSON.stringify(window.got)"))
        assert sorted(got[a]) == sorted(produced[a]) and sorted(got[b]) == sorted(produced[b])
        assert browser.evaluate("window.opens") >= 3
        assert browser.evaluate("window.unnamed || 0") == 0, "every event is named by its topic"
    finally:
        browser.close()
        daemon.stop()
