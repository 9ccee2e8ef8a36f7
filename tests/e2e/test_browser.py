"""Headless Chromium loads the demo page; the server drops the stream several times (daemon
restarts on the same port); the page's EventSource reconnects by itself with its Last-Event-ID
and ends up with every produced record exactly once.

Chromium is driven over `--remote-debugging-pipe` (CDP as NUL-terminated JSON on fds 3 and 4),
which needs no websocket client."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from ssekd.broker import Broker, free_port
from tests.support.broker import Kafka
from tests.support.daemon import start_daemon
from tests.support.streamd import write_config
from tests.support.wait import wait_until

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"

# chromium is installed by `make test`
pytestmark = [pytest.mark.browser, pytest.mark.daemon, pytest.mark.broker]


class Browser:
    """Chromium with CDP over a pipe."""

    def __init__(self, url: str) -> None:
        self.profile = tempfile.mkdtemp(prefix="ssekd-chromium-")
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()

        def wire_fds() -> None:  # runs in the child, before fds not kept are closed
            a, b = os.dup(to_chrome_r), os.dup(from_chrome_w)
            os.dup2(a, 3)
            os.dup2(b, 4)

        self.proc = subprocess.Popen(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
             "--no-first-run", "--disable-background-networking", "--disable-component-update",
             "--disable-sync", f"--user-data-dir={self.profile}", "--remote-debugging-pipe",
             url],
            pass_fds=(3, 4, to_chrome_r, from_chrome_w),
            preexec_fn=wire_fds,  # noqa: PLW1509 - only dup2 calls, needed to place fds 3 and 4
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._buf = b""
        self._id = 0
        self.session: str | None = None

    def send(self, method: str, params: dict[str, Any] | None = None,
             session: str | None = None, timeout: float = 10.0) -> dict[str, Any]:
        self._id += 1
        msg: dict[str, Any] = {"id": self._id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._to_chrome, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            while b"\0" in self._buf:
                raw, _, self._buf = self._buf.partition(b"\0")
                reply = json.loads(raw)
                if reply.get("id") == self._id:
                    if "error" in reply:
                        raise AssertionError(reply["error"])
                    return dict(reply.get("result", {}))
            self._buf += os.read(self._from_chrome, 1 << 16)
        raise AssertionError(f"no CDP reply to {method}")

    def evaluate(self, expression: str) -> Any:
        if self.session is None:
            targets = self.send("Target.getTargets")["targetInfos"]
            page = next(t for t in targets if t["type"] == "page")
            self.session = self.send("Target.attachToTarget",
                                     {"targetId": page["targetId"], "flatten": True})["sessionId"]
        result = self.send("Runtime.evaluate", {"expression": expression,
                                                "returnByValue": True}, self.session)
        return result.get("result", {}).get("value")

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        os.close(self._to_chrome)
        os.close(self._from_chrome)
        shutil.rmtree(self.profile, ignore_errors=True)


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
