"""The telemetry tests' daemon (the streaming test daemon with a prometheus exporter), an SSE
client that counts what it received, and a real Prometheus server (Debian's `prometheus`)
scraping it, queried over its HTTP API."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ssekd.dev.broker import free_port, port_open, stop_process
from tests.support.daemon import start_daemon
from tests.support.sse import SseClient
from tests.support.streamd import Streamd, write_config

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"

STDOUT_EXPORTER = "    stdout:\n      type: stdout\n"


@dataclass
class Telemetryd(Streamd):
    """The streaming daemon plus its metrics endpoint."""

    metrics_port: int = 0

    def scrape(self, accept: str | None = None) -> str:
        req = urllib.request.Request(f"http://127.0.0.1:{self.metrics_port}/metrics",
                                     headers={"Accept": accept} if accept else {})
        with urllib.request.urlopen(req, timeout=10) as r:
            return str(r.read().decode("utf-8"))

    def value(self, sample: str) -> float:
        """The value of one sample line, by its name and labels as printed (0 when absent)."""
        for line in self.scrape().splitlines():
            name, _, value = line.rpartition(" ")
            if name == sample:
                return float(value)
        return 0.0


def run_telemetryd(tmp: Path, bootstrap: str, extra: str = "",
                   replace: tuple[str, str] | None = None, **kw: Any) -> Telemetryd:
    """The streaming test daemon with a prometheus exporter; `extra` is added under
    `telemetry:` and `replace` = (old, new) edits the config text."""
    port, metrics_port = free_port(), free_port()
    config = write_config(tmp, bootstrap, port, **kw)
    text = config.read_text()
    if replace is not None:
        assert replace[0] in text
        text = text.replace(*replace)
    assert STDOUT_EXPORTER in text
    text = text.replace(STDOUT_EXPORTER, STDOUT_EXPORTER +
                        "    prom:\n      type: prometheus\n      options:\n"
                        f"        endpoints: [{{scheme: http, port: {metrics_port}, "
                        "path: /metrics}]\n" + extra)
    config.write_text(text)
    daemon = start_daemon(config, wait_ports=[port, metrics_port])
    return Telemetryd(daemon, port, metrics_port)


class CountingClient(SseClient):
    """An SSE client that counts the body bytes it received (what the server sent)."""

    received = 0

    def _dechunk(self) -> None:
        before = len(self._body)
        super()._dechunk()
        self.received += len(self._body) - before


@dataclass
class Prometheus:
    """A Prometheus server scraping one target every second; queried over its HTTP API."""

    process: subprocess.Popen[bytes]
    port: int
    log: Path

    def query(self, promql: str) -> list[dict[str, Any]]:
        url = (f"http://127.0.0.1:{self.port}/api/v1/query?"
               + urllib.parse.urlencode({"query": promql}))
        with urllib.request.urlopen(url, timeout=10) as r:
            body = json.loads(r.read())
        assert body["status"] == "success", body
        return list(body["data"]["result"])

    def scalar(self, promql: str) -> float | None:
        result = self.query(promql)
        return float(result[0]["value"][1]) if result else None

    def wait_for(self, promql: str, ok: Callable[[float | None], bool],
                 timeout: float = 30.0) -> float | None:
        deadline = time.monotonic() + timeout
        seen: float | None = None
        while time.monotonic() < deadline:
            seen = self.scalar(promql)
            if ok(seen):
                return seen
            time.sleep(0.2)
        raise AssertionError(f"{promql}: last {seen}\n{self.log.read_text()[-2000:]}")


def start_prometheus(tmp: Path, target_port: int) -> Prometheus:
    port = free_port()
    config = tmp / "prometheus.yml"
    config.write_text(f"""\
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: ssekd
    scrape_interval: 1s
    static_configs:
      - targets: ["127.0.0.1:{target_port}"]
""")
    log = tmp / "prometheus.log"
    out = open(log, "wb")  # noqa: SIM115 - handed to the child, closed just below
    process = subprocess.Popen(
        [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{port}"],
        stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    out.close()
    # The port opens while the TSDB is still starting, and the query API answers 503 until
    # then: wait for /-/ready, not for the port, on a loaded machine the gap is seconds.
    deadline = time.monotonic() + 30
    while not _ready(port):
        if process.poll() is not None or time.monotonic() > deadline:
            stop_process(process, 5)
            raise AssertionError(f"prometheus did not start:\n{log.read_text()}")
        time.sleep(0.1)
    return Prometheus(process, port, log)


def _ready(port: int) -> bool:
    """Whether Prometheus says it is ready to serve queries."""
    if not port_open("127.0.0.1", port):
        return False
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/-/ready", timeout=5) as r:
            return bool(r.status == 200)
    except OSError:
        return False
