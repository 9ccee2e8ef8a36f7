"""The prometheus exporter's page: methods, paths, formats, labels, and the cost of a scrape."""

from __future__ import annotations

import http.client
import textwrap
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from twisted.internet.defer import Deferred
from twisted.internet.testing import MemoryReactorClock
from twisted.web.test.requesthelper import DummyRequest

from ssekd.bindings.http.roles import HttpContext
from ssekd.bindings.sse.roles import StreamRequest
from ssekd.bindings.sse.server import SseServer
from ssekd.dev.broker import free_port
from ssekd.engine import Engine
from ssekd.telemetry.events import EventLog
from ssekd.telemetry.metrics import METRICS, Metrics, exported_name
from ssekd.telemetry.prometheus import MetricsPage
from tests.support.http import curl
from tests.support.static_site import CONFIG as SITE_CONFIG
from tests.support.static_site import write_site
from tests.support.telemetry import Telemetryd


def _request(t: Telemetryd, method: str, path: str = "/metrics",
             headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", t.metrics_port, timeout=10)
    conn.request(method, path, headers=headers or {})
    r = conn.getresponse()
    body = r.read()
    conn.close()
    return r.status, {k.lower(): v for k, v in r.getheaders()}, body


@pytest.mark.broker
@pytest.mark.daemon
def test_get_and_head_only(telemetryd: Telemetryd) -> None:
    status, headers, body = _request(telemetryd, "GET")
    assert status == 200 and headers["content-type"].startswith("text/plain")
    assert b"# TYPE stream_active_sent gauge" in body
    status, headers, body = _request(telemetryd, "HEAD")
    assert status == 200 and body == b""
    for method in ("POST", "PUT", "DELETE", "OPTIONS"):
        status, headers, _ = _request(telemetryd, method)
        assert status == 405 and headers["allow"] == "GET, HEAD", method
    assert _request(telemetryd, "GET", "/other")[0] == 404


@pytest.mark.broker
@pytest.mark.daemon
def test_openmetrics_when_asked(telemetryd: Telemetryd) -> None:
    status, headers, body = _request(
        telemetryd, "GET", headers={"Accept": "application/openmetrics-text; version=1.0.0"})
    assert status == 200
    assert headers["content-type"].startswith("application/openmetrics-text")
    text = body.decode()
    assert text.endswith("# EOF\n")
    assert "# UNIT stream_data_sent_bytes bytes" in text
    assert "# UNIT http_duration_milliseconds milliseconds" in text


def test_names_follow_zillas_rule() -> None:
    """Dots to `_`, the unit, `_total` for counters (SPEC §10's own example first)."""
    assert exported_name(METRICS["stream.data.sent"]) == "stream_data_sent_bytes_total"
    assert exported_name(METRICS["stream.active.sent"]) == "stream_active_sent"
    assert exported_name(METRICS["stream.opens.received"]) == "stream_opens_received_total"
    assert exported_name(METRICS["http.duration"]) == "http_duration_milliseconds"
    assert exported_name(METRICS["http.request.size"]) == "http_request_size_bytes"
    assert exported_name(METRICS["http.active.requests"]) == "http_active_requests"


class _Request:
    """What SseServer.render and SseStream use of a Twisted request (Twisted's DummyRequest
    drives a registered producer in a loop, which an SSE stream never ends)."""

    method = b"GET"
    path = uri = b"/events"
    sentLength = 0

    def __init__(self) -> None:
        self.finished: Deferred[None] = Deferred()

    def getHeader(self, name: bytes) -> bytes | None:
        return None

    def setHeader(self, name: bytes, value: bytes) -> None: ...

    def setResponseCode(self, code: int) -> None: ...

    def registerProducer(self, producer: object, streaming: bool) -> None: ...

    def notifyFinish(self) -> Deferred[None]:
        return self.finished

    def write(self, data: bytes) -> None: ...

    def unregisterProducer(self) -> None: ...

    def finish(self) -> None:
        self.finished.callback(None)


class _Source:
    """A stream source that keeps every stream open and writes nothing."""

    def open(self, request: StreamRequest, sink: Any) -> Any:
        return self

    def pause(self) -> None: ...

    def resume(self) -> None: ...

    def close(self) -> None: ...


def test_a_scrape_with_ten_thousand_streams_takes_under_100_ms() -> None:
    metrics = Metrics("ns")
    metrics.configure("ns", None, {"env": "test"}, {}, ["sse"])
    clock = MemoryReactorClock()
    sse = SseServer("sse", _Source(), clock, EventLog("ns"), metrics=metrics)
    for _ in range(10_000):
        sse.render(_Request(), HttpContext("http"))
    assert len(sse.streams) == 10_000
    page = MetricsPage(metrics, "/metrics")
    best = float("inf")
    for _ in range(5):
        req = DummyRequest([b"metrics"])
        req.path = b"/metrics"
        began = time.perf_counter()
        body = page.render(req)
        best = min(best, time.perf_counter() - began)
    assert b'stream_active_sent{binding="sse",env="test",namespace="ns"} 10000.0' in body
    assert best < 0.1, f"scrape took {best * 1000:.1f} ms"


def test_stream_counts_pauses_and_who_closed() -> None:
    """A full client buffer pauses the stream (counted); the server ending a stream is a
    `closes.sent`, the client going away a `closes.received`."""
    metrics = Metrics("ns")
    metrics.configure("ns", None, {}, {}, ["sse"])
    sse = SseServer("sse", _Source(), MemoryReactorClock(), EventLog("ns"), metrics=metrics)
    ended, gone = _Request(), _Request()
    sse.render(ended, HttpContext("http"))
    sse.render(gone, HttpContext("http"))
    first, second = list(sse.streams)
    first.pauseProducing()
    first.resumeProducing()
    first.pauseProducing()
    assert metrics.counter("sse.pauses", "sse").value == 2
    first.end()
    gone.finished.errback(ConnectionError("client went away"))
    assert metrics.counter("stream.closes.sent", "sse").value == 1
    assert metrics.counter("stream.closes.received", "sse").value == 1
    assert metrics.gauge("stream.active.sent", "sse").value == 0
    assert metrics.counter("stream.opens.sent", "sse").value == 2


def test_exporter_sockets_follow_reloads_and_metrics_survive_them(tmp_path: Path) -> None:
    """The exporter's socket is one more of the engine's: kept when its port stays (its page
    then reads the same metrics), closed and opened when it moves; the selection is the new
    config's."""
    config = tmp_path / "zilla.yaml"
    text = ("name: t\nbindings:\n"
            "  tcp0: {type: tcp, kind: server, options: {host: 127.0.0.1, port: 7001}, "
            "exit: http0}\n"
            "  http0: {type: http, kind: server, exit: map0}\n"
            "  map0: {type: http-filesystem, kind: proxy, exit: fs0}\n"
            "  fs0: {type: filesystem, kind: server, options: {location: .}}\n"
            "telemetry:\n  metrics: [http.*]\n  exporters:\n"
            "    prom: {type: prometheus, options: {endpoints: [{port: 9464}]}}\n")
    config.write_text(text)
    reactor = MemoryReactorClock()
    engine = Engine(config, reactor=reactor, events=EventLog("t"), print_events=False)
    engine.startService()
    assert sorted(engine.listening_ports()) == [("127.0.0.1", 7001), ("127.0.0.1", 9464)]
    engine.metrics.gauge("http.active.requests", "http0").value = 3
    config.write_text(text.replace("metrics: [http.*]", "metrics: [http.active.*]"))
    assert engine.reload()
    assert sorted(p[0] for p in reactor.tcpServers) == [7001, 9464]  # nothing reopened
    page = _render(engine)
    assert 'http_active_requests{binding="http0",namespace="t"} 3.0' in page
    assert "http_duration_milliseconds" not in page
    config.write_text(text.replace("port: 9464", "port: 9465"))
    assert engine.reload()
    assert sorted(engine.listening_ports()) == [("127.0.0.1", 7001), ("127.0.0.1", 9465)]
    assert "http_duration_milliseconds_count" in _render(engine)


def _render(engine: Engine) -> str:
    """The page the engine's exporter socket serves, rendered as a GET would be."""
    assert engine.graph is not None
    [spec] = engine.graph.exporter_specs
    site: Any = spec.factory
    req = DummyRequest([b"metrics"])
    req.path = b"/metrics"
    return str(site.resource.render(req).decode())


@pytest.mark.daemon
def test_telemetry_metrics_attributes_and_per_binding_selection(tmp_path: Path,
                                                                run_daemon: Any,
                                                                port: int) -> None:
    metrics_port = free_port()
    config = write_site(tmp_path)
    text = config.read_text().replace(
        "    kind: server\n    options:\n      limits:",
        "    kind: server\n    telemetry: {metrics: [http.duration, http.active.*]}\n"
        "    options:\n      limits:", 1)
    text = text.replace("telemetry:\n  exporters:\n", textwrap.dedent(f"""\
        telemetry:
          attributes: {{service.namespace: example}}
          metrics: [http.*, stream.*]
          exporters:
            prom:
              type: prometheus
              options: {{endpoints: [{{scheme: http, host: 127.0.0.1, port: {metrics_port},
                                      path: /scrape}}]}}
        """))
    config.write_text(text)
    assert text != SITE_CONFIG
    run_daemon(config, env={"HTTP_PORT": str(port)}, wait_ports=[port, metrics_port])
    assert curl(f"http://127.0.0.1:{port}/index.html")[0] == 200
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/scrape", timeout=10) as r:
        page = r.read().decode()
    assert 'http_duration_milliseconds_count{binding="http0",namespace="test",' \
           'service_namespace="example"} 1.0' in page
    assert "http_active_requests{" in page
    assert "http_request_size_bytes" not in page  # http.* kept, but http0 asked for less
    assert "process_cpu_seconds_total" not in page  # not among telemetry.metrics
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10)
    assert e.value.code == 404

