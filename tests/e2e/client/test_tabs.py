"""sharedStream in headless Chromium against the real daemon and broker: five tabs of one origin
reading one stream cost the daemon one stream (its `stream_active_received` gauge says 1); four
of them join while records arrive and each tab has every record once, in order (the leader's
history and the live records overlap: repeats are dropped by id); the leader tab is closed
while records keep arriving, a survivor takes the stream over from the last id it saw (the
daemon counts one resume, not a start from the beginning), and every survivor has every record
once, in order. Without Web Locks, each tab is a plain stream of its own."""

from __future__ import annotations

import json
import shutil
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from ssekd.dev.broker import Broker, free_port
from tests.support.broker import Kafka
from tests.support.browser import Browser
from tests.support.daemon import start_daemon
from tests.support.streamd import WWW, write_config
from tests.support.wait import wait_until

pytestmark = [pytest.mark.browser, pytest.mark.daemon, pytest.mark.broker]

#: The page each tab loads: its sharedStream's events, as the page's handlers saw them.
PAGE = """<!doctype html>
<meta charset="utf-8"><title>tabs</title>
<script type="module">
const q = new URLSearchParams(location.search);
if (q.has("plain")) Object.defineProperty(navigator, "locks", { value: undefined });
const { sharedStream } = await import("./ssekd-client/tabs.js");
const stream = sharedStream(q.get("stream"), { retry: { min: 100, max: 1000 } });
window.tab = { got: [], states: [], stream };
stream.on("message", (e) => tab.got.push(e.data));
stream.onState((s) => tab.states.push(s));
</script>
"""


def _www(tmp_path: Path) -> Path:
    www = tmp_path / "www"
    shutil.copytree(WWW / "ssekd-client", www / "ssekd-client")
    (www / "tabs.html").write_text(PAGE)
    return www


def _metric(port: int, name: str) -> float:
    """The sum of a metric's series in the daemon's Prometheus scrape."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith((name + " ", name + "{")))


def _got(browser: Browser, tab: str) -> list[str]:
    return list(json.loads(browser.evaluate("JSON.stringify(window.tab ? tab.got : [])", tab)))


def _all_have(browser: Browser, tabs: list[str], want: list[str], timeout: float = 30) -> None:
    def done() -> bool:
        return all(sorted(_got(browser, t)) == sorted(want) for t in tabs)

    wait_until(done, timeout, interval=0.2,
               what=lambda: f"tabs have {[len(_got(browser, t)) for t in tabs]} of {len(want)}")


class Producer:
    """Records with unique values, produced now or from a thread while the test does something
    else."""

    def __init__(self, kafka: Kafka, topic: str) -> None:
        self.kafka, self.topic = kafka, topic
        self.produced: list[str] = []
        self._lock = threading.Lock()

    def __call__(self, n: int, pause: float = 0.0) -> None:
        for _ in range(n):
            with self._lock:
                value = json.dumps({"seq": len(self.produced)})
                self.produced.append(value)
            self.kafka.produce(self.topic, value.encode(), key=f"k{len(self.produced) % 7}".encode())
            if pause:
                self.kafka.flush()
                time.sleep(pause)
        self.kafka.flush()


@pytest.mark.timeout(240)
def test_five_tabs_one_stream_and_the_handover(kafka: Kafka, kafka_broker: Broker,
                                               tmp_path: Path) -> None:
    topic = kafka.topic(1)
    produce = Producer(kafka, topic)
    port, metrics = free_port(), free_port()
    config = write_config(tmp_path, kafka_broker.bootstrap, port, prometheus_port=metrics,
                          www=_www(tmp_path))
    produce(10)  # history before any tab
    daemon = start_daemon(config, wait_ports=[port, metrics])
    page = f"http://127.0.0.1:{port}/www/tabs.html?stream=/events/{topic}"
    browser = Browser(page)
    try:
        tabs = [browser.first_tab()]
        _all_have(browser, tabs, produce.produced)
        # four more join the led stream while records arrive, every 30 ms for 1.5 s: each gets
        # the history from the leader and the live records, in order, once
        joining = threading.Thread(target=produce, args=(50, 0.03))
        joining.start()
        tabs += [browser.open_tab(page) for _ in range(4)]
        joining.join()
        _all_have(browser, tabs, produce.produced)
        for t in tabs:
            assert _got(browser, t) == produce.produced  # one partition: in order
        # one stream at the daemon for five tabs, and it stays one
        wait_until(lambda: _metric(metrics, "stream_active_received") == 1, 10,
                   what=lambda: f"gauge {_metric(metrics, 'stream_active_received')}")
        time.sleep(1)
        assert _metric(metrics, "stream_active_received") == 1
        leaders = [t for t in tabs if browser.evaluate("tab.stream.leading", t)]
        assert len(leaders) == 1
        resumes = _metric(metrics, "sse_kafka_resumes_total")

        # the leader's tab closes while records arrive, every 30 ms for 2 s
        during = threading.Thread(target=produce, args=(60, 0.03))
        during.start()
        time.sleep(0.5)
        browser.close_tab(leaders[0])
        during.join()
        produce(5)
        survivors = [t for t in tabs if t != leaders[0]]
        _all_have(browser, survivors, produce.produced)
        for t in survivors:  # every record once, in order
            assert _got(browser, t) == produce.produced
        new = [t for t in survivors if browser.evaluate("tab.stream.leading", t)]
        assert len(new) == 1
        wait_until(lambda: _metric(metrics, "stream_active_received") == 1, 10,
                   what=lambda: f"gauge {_metric(metrics, 'stream_active_received')}")
        # the new leader came back with the last id it saw, not from the start
        assert _metric(metrics, "sse_kafka_resumes_total") == resumes + 1
        states: list[Any] = browser.evaluate("tab.states", new[0])
        assert states[-1] == "open"
    finally:
        browser.close()
        daemon.stop()


@pytest.mark.timeout(120)
def test_without_web_locks_each_tab_is_a_plain_stream(kafka: Kafka, kafka_broker: Broker,
                                                      tmp_path: Path) -> None:
    topic = kafka.topic(1)
    produce = Producer(kafka, topic)
    port, metrics = free_port(), free_port()
    config = write_config(tmp_path, kafka_broker.bootstrap, port, prometheus_port=metrics,
                          www=_www(tmp_path))
    produce(5)
    daemon = start_daemon(config, wait_ports=[port, metrics])
    page = f"http://127.0.0.1:{port}/www/tabs.html?plain&stream=/events/{topic}"
    browser = Browser(page)
    try:
        tabs = [browser.first_tab(), browser.open_tab(page)]
        produce(5)
        _all_have(browser, tabs, produce.produced)
        wait_until(lambda: _metric(metrics, "stream_active_received") == 2, 10)
        assert all(browser.evaluate("tab.stream.leading", t) is None for t in tabs)
    finally:
        browser.close()
        daemon.stop()
