"""The OTLP exporter. Against a real OTLP/HTTP receiver: a daemon streaming a Kafka topic pushes
its metrics (the Prometheus page's, under Zilla's dotted names) and its events (as log records);
with the collector down it keeps streaming and says so once per interval. Its parts on their own:
options, the once-per-interval report on an injected clock, the bounded snapshot and log queues,
and the SDK's log lines kept out of the daemon's log."""

from __future__ import annotations

import logging
import re
import signal
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from twisted.internet.testing import MemoryReactorClock

from ssekd.dev.broker import Broker, free_port
from ssekd.telemetry.events import EventLog
from ssekd.telemetry.metrics import Metrics
from ssekd.telemetry.otlp import (
    ExportHealth,
    MetricsPusher,
    OtlpExporter,
    OtlpSpec,
    WorkingFor,
    capture_sdk_logging,
    spec,
)
from tests.support.broker import Kafka
from tests.support.otlp import Receiver
from tests.support.static_site import write_site
from tests.support.telemetry import run_telemetryd
from tests.support.wait import wait_until

ATTRIBUTES = ("telemetry:\n  exporters:\n",
              "telemetry:\n  attributes: {service.namespace: example}\n  exporters:\n")


def otlp_exporter(location: str, interval: float = 1, extra: str = "") -> str:
    return ("    otlp0:\n      type: otlp\n      options:\n"
            f"        interval: {interval}\n{extra}"
            f"        endpoint:\n          protocol: http\n          location: {location}\n")


@pytest.mark.broker
@pytest.mark.daemon
def test_receiver_gets_stream_metrics_and_events_as_log_records(kafka: Kafka,
                                                                kafka_broker: Broker,
                                                                tmp_path: Path) -> None:
    receiver = Receiver().start()
    t = run_telemetryd(tmp_path, kafka_broker.bootstrap, otlp_exporter(receiver.location),
                       replace=ATTRIBUTES)
    try:
        streams_and_events_reach_the_receiver(kafka, t, receiver)
    finally:
        t.daemon.stop()
        receiver.stop()


def streams_and_events_reach_the_receiver(kafka: Kafka, t: Any, receiver: Receiver) -> None:
    topic = kafka.topic(2)
    clients = []
    try:
        clients = [t.open(f"/events/{topic}") for _ in range(3)]
        assert all(c.status == 200 for c in clients)
        for i in range(10):
            kafka.produce(topic, b"event %d" % i, partition=i % 2)
        kafka.flush()
        for c in clients:
            assert sorted(e.data for e in c.events(10)) == [f"event {i}" for i in range(10)]
        # Zilla's dotted name, the namespace and binding on the point, the attributes on the
        # resource; and the same figure the Prometheus page shows
        wait_until(lambda: receiver.value("stream.active.sent", binding="sse",
                                          namespace="test") == 3, 10,
                   what=lambda: f"stream.active.sent: {receiver.latest('stream.active.sent')}")
        metric, resource = receiver.latest("stream.active.sent") or (None, {})
        assert metric is not None and metric.WhichOneof("data") == "gauge"
        assert resource["service.namespace"] == "example"
        # each process (each worker of a daemon) is an instance of its own
        wait_until(lambda: len(receiver.instances("stream.active.sent")) == processes(t.daemon),
                   10, what=lambda: f"instances: {list(receiver.instances('stream.active.sent'))}")
        page = [line for line in t.scrape().splitlines()
                if line.startswith("stream_active_sent{") and 'binding="sse"' in line]
        assert len(page) == 1 and page[0].endswith(" 3.0"), page
        sent = receiver.latest("stream.data.sent")
        assert sent is not None
        assert sent[0].unit == "bytes" and sent[0].sum.is_monotonic
        assert (receiver.value("stream.data.sent", binding="sse") or 0) > 0
        duration = receiver.latest("http.duration")
        assert duration is not None and duration[0].WhichOneof("data") == "histogram"
        for p in duration[0].histogram.data_points:
            assert sum(p.bucket_counts) == p.count
            assert len(p.bucket_counts) == len(p.explicit_bounds) + 1
        # every metric of the page is pushed (process ones included), nothing else
        def pushed() -> set[str]:
            return {m.name for r in receiver.metrics[-1:] for rm in r.resource_metrics
                    for sm in rm.scope_metrics for m in sm.metrics}

        def on_page() -> int:
            return sum(line.startswith("# TYPE ") for line in t.scrape().splitlines())
        wait_until(lambda: len(pushed()) == on_page(), 10,
                   what=lambda: f"pushed {sorted(pushed())}, {on_page()} on the page")
        assert {"stream.active.sent", "stream.opens.sent", "http.active.requests",
                "process.resident.memory"} <= pushed()

        # the events, as log records: body `namespace:binding detail`, name in an attribute
        def started() -> bool:
            return any(r.attributes.get("event.name") == "ENGINE_STARTED"
                       for r in receiver.records())
        wait_until(started, 10, what=lambda: f"records: {list(receiver.records())}")
        record = next(r for r in receiver.records()
                      if r.attributes.get("event.name") == "ENGINE_STARTED")
        assert record.body.startswith("test:ssekd ") and "pid" in record.body
        assert record.resource["service.namespace"] == "example"
        assert abs(record.time_unix_nano / 1e9 - time.time()) < 60
        assert all(ct == "application/x-protobuf" for _, ct in receiver.requests)
    finally:
        for c in clients:
            c.close()
    wait_until(lambda: receiver.value("stream.active.sent", binding="sse") == 0, 10)


@pytest.mark.broker
@pytest.mark.daemon
@pytest.mark.parametrize("collector,cause", [
    ("down", r"\[Errno 111\] Connection refused"),
    ("silent", r"timed out \(\w+\)"),
])
def test_collector_down_streaming_goes_on_one_failure_event_per_interval(
        kafka: Kafka, kafka_broker: Broker, tmp_path: Path, collector: str, cause: str) -> None:
    """`down`: nothing listens, every post is refused. `silent`: a socket that takes the
    connection and never answers, so every post waits for its timeout."""
    silent = socket.create_server(("127.0.0.1", 0), backlog=1000) if collector == "silent" \
        else None
    port = silent.getsockname()[1] if silent is not None else free_port()
    t = run_telemetryd(tmp_path, kafka_broker.bootstrap,
                       otlp_exporter(f"http://127.0.0.1:{port}"))
    topic = kafka.topic(1)
    client = t.open(f"/events/{topic}")

    def reported() -> int:
        return t.daemon.output().count("OTLP_EXPORT_FAILED")

    try:
        t.daemon.wait_output("OTLP_EXPORT_FAILED", 15)
        start = time.monotonic()
        before = reported()
        received = 0
        for round_ in range(6):  # six reports while streaming goes on
            for i in range(20):
                kafka.produce(topic, b"r%d-%d" % (round_, i))
            kafka.flush()
            received += len(client.events(20))
            wait_until(lambda: reported() > before + round_, 10)
        elapsed = time.monotonic() - start
        assert received == 120
        out = t.daemon.output()
        failures = [line for line in out.splitlines() if "OTLP_EXPORT_FAILED" in line]
        # one report per interval at most (1 s here), from each process that exports
        assert len(failures) - before <= processes(t.daemon) * (elapsed + 1), (elapsed, failures)
        # where, what and why, in one line
        assert re.search(r"test:otlp0 \[.*\] OTLP_EXPORT_FAILED http://127\.0\.0\.1:\d+/v1/"
                         r"metrics and http://127\.0\.0\.1:\d+/v1/logs: .*\d+ metrics exports? "
                         r"failed: " + cause + "$", failures[-1]), failures[-1]
        # the SDK's own lines (a warning per retry, tracebacks) stay out of the daemon's log
        assert "Traceback" not in out
        noise = [line for line in out.splitlines() if ("export" in line.lower() or
                                                       "opentelemetry" in line)
                 and "OTLP_EXPORT_FAILED" not in line
                 # Twisted's line for each port opened (the metrics ports of workers)
                 and not re.search(r"\[-\] ExporterSite (starting|stopping) on ", line)]
        assert noise == []

        # the collector comes back: exports resume and that is said once
        if silent is not None:
            silent.close()
        receiver = Receiver(port=port).start()
        try:
            t.daemon.wait_output("OTLP_EXPORT_RECOVERED", 15, count=processes(t.daemon))
            wait_until(lambda: receiver.value("stream.active.sent", binding="sse") == 1, 10)
            assert t.daemon.output().count("OTLP_EXPORT_RECOVERED") == processes(t.daemon)
        finally:
            receiver.stop()
    finally:
        client.close()
        t.daemon.stop()
        if silent is not None:
            silent.close()


@pytest.mark.daemon
def test_signals_and_per_signal_paths_and_a_reload_that_changes_them(
        tmp_path: Path, run_daemon: Any, port: int) -> None:
    receiver = Receiver(metrics_path="/base/custom/m", logs_path="/elsewhere/l").start()
    config = write_site(tmp_path)
    site = config.read_text()
    overrides = ("          overrides: {metrics: custom/m, logs: /elsewhere/l}\n")

    def write(signals: str) -> None:
        config.write_text(site + otlp_exporter(f"{receiver.location}/base/", 0.5,
                                               f"        signals: [{signals}]\n") + overrides)

    write("metrics")
    daemon = run_daemon(config, env={"HTTP_PORT": str(port)}, wait_ports=[port])
    try:
        # metrics only, posted to the override resolved against the location's path
        wait_until(lambda: len(receiver.metrics) >= 3, 10)
        assert receiver.logs == []
        assert {p for p, _ in receiver.requests} == {"/base/custom/m"}
        # a reload to logs only: the exporter is replaced, metrics stop
        write("logs")
        daemon.signal(signal.SIGHUP)
        daemon.wait_output("CONFIG_RELOADED")
        metrics_after_reload = len(receiver.metrics)

        def reloaded() -> bool:
            return any(r.attributes.get("event.name") == "CONFIG_RELOADED"
                       for r in receiver.records())
        wait_until(reloaded, 10, what=lambda: f"records: {list(receiver.records())}")
        assert len(receiver.metrics) == metrics_after_reload
        assert {p for p, _ in receiver.requests} == {"/base/custom/m", "/elsewhere/l"}
        # a reload that changes nothing of the exporter keeps it (its threads go on)
        threads = daemon_threads(daemon)
        config.write_text(config.read_text().replace("name: test", "name: test  # again"))
        daemon.signal(signal.SIGHUP)
        wait_until(lambda: daemon.output().count("CONFIG_RELOADED") == 2, 10)
        assert daemon_threads(daemon) == threads
    finally:
        receiver.stop()


@pytest.mark.daemon
def test_a_stop_sends_the_last_figures_and_the_queued_events(tmp_path: Path, run_daemon: Any,
                                                             port: int) -> None:
    receiver = Receiver().start()
    config = write_site(tmp_path)
    # an interval far longer than the test: whatever arrives was sent by the stop
    config.write_text(config.read_text() + otlp_exporter(receiver.location, 3600))
    daemon = run_daemon(config, env={"HTTP_PORT": str(port)}, wait_ports=[port])
    try:
        daemon.wait_output("ENGINE_STARTED")
        assert receiver.requests == []
        exporting = processes(daemon)
        started = time.monotonic()
        assert daemon.stop() == 0
        assert time.monotonic() - started < 10
        assert len(receiver.metrics) == exporting  # one last export from each
        assert receiver.value("http.active.requests", binding="http0") == 0
        # the events since the exporter started (the sockets open just before it)
        names = [r.attributes["event.name"] for r in receiver.records()]
        assert names == ["ENGINE_STARTED"] * exporting, names
    finally:
        receiver.stop()


def processes(daemon: Any) -> int:
    """How many processes of `daemon` export: each worker exports on its own (a parent of
    workers does not), else the one daemon."""
    return len(daemon.worker_pids()) or 1


def daemon_threads(daemon: Any) -> set[str]:
    """The ids of the daemon's threads (from /proc): an exporter replaced starts new ones."""
    return {p.name for p in Path(f"/proc/{daemon.process.pid}/task").iterdir()}


# -- the parts ------------------------------------------------------------------------------------


def test_options_defaults_and_zilla_style_url_resolution() -> None:
    s = spec("o", {"endpoint": {"location": "http://collector:4318"}})
    assert s == OtlpSpec("o", 30.0, frozenset({"metrics", "logs"}),
                         "http://collector:4318/v1/metrics", "http://collector:4318/v1/logs")
    s = spec("o", {"interval": 2.5, "signals": ["logs"],
                   "endpoint": {"protocol": "http", "location": "https://c.example/base/",
                                "overrides": {"metrics": "m", "logs": "http://other:1/in"}}})
    assert (s.interval, s.signals) == (2.5, frozenset({"logs"}))
    # a relative path resolves against the location, a whole URL replaces it
    assert (s.metrics_url, s.logs_url) == ("https://c.example/base/m", "http://other:1/in")
    assert s.timeout == 2.5 and spec("o", {"endpoint": {"location": "http://c"}}).timeout == 10


class _Reactor(MemoryReactorClock):
    """The injected clock, plus `callFromThread` kept for the test to run."""

    def __init__(self) -> None:
        super().__init__()
        self.from_threads: list[tuple[Callable[..., Any], tuple[Any, ...]]] = []

    def callFromThread(self, f: Callable[..., Any], *args: Any) -> None:  # noqa: N802
        self.from_threads.append((f, args))


def _exporter(reactor: _Reactor, signals: frozenset[str], location: str = "http://127.0.0.1:9",
              interval: float = 5.0) -> tuple[OtlpExporter, EventLog]:
    events = EventLog("ns", clock=reactor.seconds)
    s = OtlpSpec("o", interval, signals, f"{location}/v1/metrics", f"{location}/v1/logs")
    return OtlpExporter(s, Metrics(), events, reactor, {}), events


def test_failures_are_reported_once_per_interval_then_recovery_once() -> None:
    reactor = _Reactor()
    exporter, events = _exporter(reactor, frozenset())
    exporter.startService()

    def said() -> list[str]:
        return [line for line in events.recent if "OTLP_EXPORT" in line]

    for _ in range(7):  # many failed posts within one interval, from the exporting threads
        exporter.health.failed("logs")
    exporter.health.failed("metrics")
    exporter.health.cause("[Errno 111] Connection refused")
    exporter.health.note("Failed to export logs batch due to timeout")  # the cause wins
    reactor.advance(4.9)
    assert said() == []
    reactor.advance(0.1)
    assert len(said()) == 1
    assert "OTLP_EXPORT_FAILED" in said()[0]
    assert said()[0].endswith(": 7 logs exports failed, 1 metrics export failed: "
                              "[Errno 111] Connection refused")
    exporter.health.failed("metrics")
    reactor.advance(5)
    assert len(said()) == 2 and said()[1].endswith("1 metrics export failed")
    # an interval without failures, but without a post accepted either (a collector that
    # never answers keeps them waiting): not recovered
    reactor.advance(5)
    assert len(said()) == 2
    exporter.health.succeeded()  # a post accepted: recovered, said once
    reactor.advance(5)
    reactor.advance(5)
    assert len(said()) == 3 and "OTLP_EXPORT_RECOVERED" in said()[2]
    exporter._loop.stop()


def test_the_log_queue_is_bounded_and_what_it_drops_is_counted() -> None:
    health = ExportHealth(capacity=3)
    assert [health.queue() for _ in range(5)] == [True, True, True, False, False]
    health.taken(2)
    assert health.queue() and health.queue() and not health.queue()
    assert health.report() == ("OTLP_EXPORT_FAILED", "3 events not sent (log queue full)")


def test_a_slow_post_keeps_one_snapshot_waiting_the_newest() -> None:
    gate = threading.Event()
    posted: list[Any] = []

    def post(data: Any) -> bool:
        posted.append(data)
        gate.wait(10)
        return True

    pusher = MetricsPusher(post, ExportHealth(), "t")
    pusher.offer("first")  # type: ignore[arg-type]  # any object stands for a snapshot
    wait_until(lambda: posted == ["first"])
    for i in range(1000):  # the collector is stuck: snapshots keep coming, one waits
        pusher.offer(f"later {i}")  # type: ignore[arg-type]
    gate.set()
    pusher.stop(5)
    assert posted == ["first", "later 999"]


class _Kept(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def test_the_sdk_log_lines_go_to_the_exporter_not_the_process_log() -> None:
    capture_sdk_logging()
    capture_sdk_logging()  # once per process, however many exporters
    # what reaches the root logger reaches twistd's log (stderr); (pytest's caplog cannot tell:
    # it hooks itself onto every logger that does not propagate)
    root = _Kept()
    logging.getLogger().addHandler(root)
    health = ExportHealth()
    sdk = logging.getLogger("opentelemetry.exporter.otlp.proto.http.metric_exporter")
    try:
        with WorkingFor(health):
            sdk.error("Failed to export %s batch code: %s, reason: %s", "metrics", 404,
                      "Not Found")
            sdk.warning("Transient error, retrying")
        sdk.error("outside any exporter's work: dropped")
    finally:
        logging.getLogger().removeHandler(root)
    assert root.records == []
    health.failed("metrics")
    assert health.report() == ("OTLP_EXPORT_FAILED", "1 metrics export failed: Failed to "
                               "export metrics batch code: 404, reason: Not Found")


def test_a_collector_that_never_answers_costs_neither_the_reactor_nor_memory() -> None:
    """The real SDK against a socket that accepts and never answers: every event is handed over
    at once, what does not fit the queue is counted, and a stop ends in bounded time."""
    silent = socket.create_server(("127.0.0.1", 0), backlog=100)
    reactor = _Reactor()
    location = f"http://127.0.0.1:{silent.getsockname()[1]}"
    exporter, events = _exporter(reactor, frozenset({"logs", "metrics"}), location, interval=1)
    exporter.startService()
    try:
        start = time.monotonic()
        for i in range(10_000):
            events.emit(f"b{i % 100}", "SOMETHING_HAPPENED", f"event {i}")
        assert time.monotonic() - start < 5  # a deque append each, never a wait on the post
        reactor.advance(1)
        failed = wait_until(lambda: exporter.health.report(), 15)
        assert failed is not None and failed[0] == "OTLP_EXPORT_FAILED"
        assert re.search(r"\d+ events not sent \(log queue full\)", failed[1]), failed
        stopping = time.monotonic()
        d = exporter.stopService()
        wait_until(lambda: reactor.from_threads, 15)
        assert time.monotonic() - stopping < 12  # MAX_EXPORT_SECONDS and a margin
        for f, args in reactor.from_threads:
            f(*args)
        assert d.called
    finally:
        silent.close()
