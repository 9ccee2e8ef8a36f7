"""The demo page says what it shows: in headless Chromium, five seconds after it opens on what
`make run` serves (from a clean clone), the screenshot has the caption (the topic, the
producer's rate, that every 25th record is a delete), the live chart and rows whose values are
columns (times as times, not epoch seconds). A delete fades its row out instead of making it
vanish, and when the stream drops and comes back the page says it resumed, with its
Last-Event-ID.

`SSEKD_SCREENSHOT=docs/demo-page.png` makes the first test also write its screenshot there,
40 s of records later (the chart's minute half full): that is how the README's picture is made."""

from __future__ import annotations

import base64
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from ssekd.dev.broker import Broker, free_port
from tests.support.broker import Kafka
from tests.support.browser import Browser
from tests.support.checkout import ROOT, Ports, clean_clone, venv_is_current
from tests.support.daemon import start_daemon
from tests.support.launched import launch
from tests.support.streamd import write_config
from tests.support.wait import wait_until

pytestmark = [pytest.mark.browser, pytest.mark.daemon]

#: Counts the canvas pixels something was drawn on, inside the plot (right of the y labels).
DRAWN = """(() => { const c = document.getElementById('chart');
  const d = c.getContext('2d').getImageData(60, 0, c.width - 60, c.height - 30).data;
  let n = 0; for (let i = 3; i < d.length; i += 4) if (d[i] > 0) n++; return n; })()"""


def _wait(browser: Browser, expr: str, want: Any, timeout: float = 20.0) -> None:
    wait_until(lambda: browser.evaluate(expr) == want, timeout, interval=0.1,
               what=lambda: f"{expr} = {browser.evaluate(expr)!r}, wanted {want!r}")


def screenshot(browser: Browser, path: Path, width: int = 1200, height: int = 860) -> bytes:
    browser.evaluate("1")  # attach
    browser.send("Emulation.setDeviceMetricsOverride",
                 {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
                 browser.session)
    time.sleep(0.5)  # a redraw of the chart at the new size
    png = base64.b64decode(browser.send("Page.captureScreenshot", {"format": "png"},
                                        browser.session)["data"])
    path.write_bytes(png)
    return png


@pytest.mark.timeout(180)
def test_the_demo_page_explains_itself(tmp_path: Path) -> None:
    ports = Ports.free()
    clone = clean_clone(tmp_path / "ssekd", ports)
    assert venv_is_current(clone), "make setup first: make run here must not install"
    run = launch("make run", clone)
    browser = None
    try:
        run.wait_output("Ctrl-C stops", timeout=60)
        if os.environ.get("SSEKD_SCREENSHOT"):
            time.sleep(40)  # for the README's picture: the chart's minute half full, deletes
        browser = Browser(f"http://localhost:{ports[7114]}/")
        time.sleep(5)
        png = screenshot(browser, tmp_path / "demo-page.png")
        assert png.startswith(b"\x89PNG") and len(png) > 20_000
        if os.environ.get("SSEKD_SCREENSHOT"):
            shutil.copy(tmp_path / "demo-page.png", ROOT / os.environ["SSEKD_SCREENSHOT"])
        caption = browser.evaluate("document.getElementById('caption').innerText")
        for words in ("Kafka topic events", "two records a second",
                      "every 25th record is a delete", "Last-Event-ID"):
            assert words in " ".join(caption.split()), caption
        assert browser.evaluate("document.getElementById('topic').textContent") == "events"
        assert browser.evaluate(DRAWN) > 500, "the chart has lines"
        assert browser.evaluate("window.ssekd.chartField") == "temperature"
        legend = browser.evaluate("document.getElementById('legend').children.length")
        assert legend >= 3
        headers = browser.evaluate(
            "[...document.querySelectorAll('#columns th')].map(th => th.textContent)")
        assert headers == ["key", "temperature", "seq", "at", "event id", "updated"]
        rows = browser.evaluate("[...document.querySelectorAll('#rows tr')].map("
                                "tr => [...tr.cells].map(td => td.textContent))")
        assert len(rows) >= 3
        for key, temperature, seq, at, *_ in rows:
            assert key.startswith("sensor-") and float(temperature) and seq.isdigit()
            assert ":" in at and "." not in at, f"a time, not epoch seconds: {at}"
        rate = browser.evaluate("document.getElementById('rate').textContent")
        assert rate.endswith("records/s") and 0.5 < float(rate.split()[0]) < 5, rate
        assert browser.evaluate("document.getElementById('state').textContent") == "open"
    finally:
        if browser is not None:
            browser.close()
        run.interrupt()


@pytest.mark.broker
@pytest.mark.timeout(120)
def test_a_delete_fades_its_row_and_a_resume_is_shown(kafka: Kafka, kafka_broker: Broker,
                                                      tmp_path: Path) -> None:
    topic = kafka.topic(1)
    port = free_port()
    config = write_config(tmp_path, kafka_broker.bootstrap, port, retry=100)
    for i in range(5):
        kafka.produce(topic, json.dumps({"key": f"k{i}", "level": i + 0.5}).encode(),
                      key=f"k{i}".encode())
    kafka.flush()
    daemon = start_daemon(config, wait_ports=[port])
    browser = Browser(f"http://127.0.0.1:{port}/www/index.html?stream=/events/{topic}")
    try:
        _wait(browser, "window.ssekd && window.ssekd.received.length", 5)
        kafka.produce(topic, None, key=b"k2")  # a tombstone
        kafka.flush()
        _wait(browser, "window.ssekd.faded.join()", "k2")
        row = "[...document.querySelectorAll('#rows tr')].find(tr => tr.cells[0]" \
              ".textContent === 'k2')"
        assert browser.evaluate(f"{row}.classList.contains('deleted')")
        time.sleep(1)
        opacity = float(browser.evaluate(f"getComputedStyle({row}).opacity"))
        assert opacity < 0.9, "fading, not gone at once"
        _wait(browser, f"!!{row}", False, timeout=10)  # then gone
        assert browser.evaluate("document.getElementById('counts').textContent") == \
            "6 events, 4 keys, 1 deletes"
        last = browser.evaluate("window.ssekd.received.at(-1).id")
        daemon.stop()  # the stream ends; the browser reconnects with its Last-Event-ID
        daemon = start_daemon(config, wait_ports=[port])
        _wait(browser, "window.ssekd.resumes.length", 1)
        assert browser.evaluate("window.ssekd.resumes[0].lastEventId") == last
        line = browser.evaluate("document.querySelector('#log .resume').textContent")
        assert f"with Last-Event-ID {last}" in line
        kafka.produce(topic, json.dumps({"key": "k9", "level": 9.5}).encode(), key=b"k9")
        kafka.flush()
        _wait(browser, "window.ssekd.received.length", 7)  # nothing twice
    finally:
        browser.close()
        daemon.stop()
