"""The OTLP exporter (`telemetry.exporters.<name>.type: otlp`): metrics and events pushed to an
OpenTelemetry collector over OTLP/HTTP (protobuf bodies), with Zilla's options.

- `metrics`: every `interval` seconds the reactor takes a snapshot of the metrics (the Prometheus
  page's, see `ssekd.telemetry.otlp_metrics`) and hands it to a thread of this exporter, which
  posts it with the SDK's `OTLPMetricExporter`. Only the newest snapshot waits for that thread:
  a slow collector costs one snapshot of memory, never a queue that grows.
- `logs`: each event that is printed (after the event log's flood limit) becomes one log record
  (body `namespace:binding detail`, attribute `event.name`, as Zilla sends them) through the
  SDK's `BatchLogRecordProcessor`, whose thread posts them at least once per `interval`. At most
  `LOG_QUEUE` records wait for it; an event beyond that is not queued, only counted (and the
  count reported), so a collector that is down costs a bounded queue.

Nothing here waits on the reactor thread: it only appends to a queue or swaps a reference.

A collector that is down or slow must neither hurt streaming nor flood the log. The SDK reports
its failures through Python's `logging` (a line per retry); those records are captured here, not
printed, and each exporter says what went wrong at most once per `interval`, as one
`OTLP_EXPORT_FAILED` event (and `OTLP_EXPORT_RECOVERED` once it works again). Each post gives up
after `min(interval, 10)` seconds, so a stuck collector holds a thread, never the daemon.

The SDK's log API lives under `opentelemetry.sdk._logs` and the exporter's under `_log_exporter`:
that is where OpenTelemetry Python publishes them (logs are still in development there), not a
private part of another package.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import requests
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.sdk._logs import LoggerProvider, ReadableLogRecord
from opentelemetry.sdk._logs.export import (
    BatchLogRecordProcessor,
    LogRecordExporter,
    LogRecordExportResult,
)
from opentelemetry.sdk.metrics.export import MetricExportResult, MetricsData
from opentelemetry.sdk.resources import Resource
from twisted.application.service import Service
from twisted.internet import defer
from twisted.internet.task import LoopingCall
from twisted.logger import Logger

from ssekd.telemetry.events import EventLog
from ssekd.telemetry.metrics import Metrics, label_name
from ssekd.telemetry.otlp_metrics import metrics_data
from ssekd.telemetry.otlp_spec import MAX_EXPORT_SECONDS, OtlpSpec, spec, specs

__all__ = ["MAX_EXPORT_SECONDS", "OtlpExporter", "OtlpSpec", "spec", "specs"]

log = Logger()

#: Log records waiting for the collector before the oldest are dropped.
LOG_QUEUE = 2048
#: Log records posted in one request.
LOG_BATCH = 512
#: A reason longer than this is cut (an SDK message can quote a whole exception chain).
REASON_CHARS = 300


# -- what went wrong, once per interval -----------------------------------------------------------


class ExportHealth:
    """How one exporter's posts went since the last report; written by the exporting threads
    (and by the SDK's log records, see `capture_sdk_logging`), read by the reactor. It also
    counts the log records waiting for the SDK's thread, to keep that queue bounded."""

    def __init__(self, capacity: int = LOG_QUEUE) -> None:
        self._lock = threading.Lock()
        self._capacity = capacity
        self._queued = 0
        self._failures: dict[str, int] = {}
        self._reason: str | None = None
        self._cause: str | None = None
        self._dropped = 0
        self._failing = False
        self._succeeded = False

    def failed(self, signal: str) -> None:
        with self._lock:
            self._failures[signal] = self._failures.get(signal, 0) + 1

    def succeeded(self) -> None:
        """A post the collector accepted (2xx). Only that ends a failure: an interval without
        failures may only mean the posts are still waiting on a collector that never answers."""
        with self._lock:
            self._succeeded = True

    def cause(self, what: str) -> None:
        """Why a post failed, as the HTTP client saw it (`connection refused`, `HTTP 404 Not
        Found`): a better reason than the SDK's lines, which often say only that it gave up."""
        with self._lock:
            if self._cause is None:
                self._cause = what[:REASON_CHARS]

    def note(self, message: str) -> None:
        """What the SDK said while this exporter worked: the first such line of an interval is
        the reason given when the HTTP client saw no cause."""
        with self._lock:
            if self._reason is None:
                self._reason = message[:REASON_CHARS]

    def queue(self) -> bool:
        """Whether one more log record may wait for the SDK's thread; when not, it is counted
        as dropped. (The SDK's own queue would drop the oldest, and says so only once per 20
        seconds, so it cannot be counted there.)"""
        with self._lock:
            if self._queued >= self._capacity:
                self._dropped += 1
                return False
            self._queued += 1
            return True

    def taken(self, records: int) -> None:
        """The SDK's thread took `records` off its queue to post them."""
        with self._lock:
            self._queued = max(0, self._queued - records)

    @property
    def failing(self) -> bool:
        """Whether the last report was a failure (and nothing has recovered since)."""
        with self._lock:
            return self._failing

    def report(self) -> tuple[str, str] | None:
        """The event to emit for the interval just over, if any: (name, detail)."""
        with self._lock:
            failures, dropped, succeeded = self._failures, self._dropped, self._succeeded
            reason = self._cause or self._reason
            self._failures, self._reason, self._cause, self._dropped = {}, None, None, 0
            self._succeeded = False
            if failures or dropped:
                self._failing = True
                parts = [f"{n} {s} export{'s' if n > 1 else ''} failed"
                         for s, n in sorted(failures.items())]
                if dropped:
                    parts.append(f"{dropped} events not sent (log queue full)")
                return "OTLP_EXPORT_FAILED", ", ".join(parts) + (f": {reason}" if reason else "")
            if self._failing and succeeded:
                self._failing = False
                return "OTLP_EXPORT_RECOVERED", "exports succeed again"
            return None


#: The exporter whose work the current thread does, so a record of the SDK's is told to it.
_working = threading.local()
_capture_lock = threading.Lock()


class _SdkRecords(logging.Handler):
    """Takes the SDK's log records (a line per failed post or retry) away from the process's
    log: each goes to the health of the exporter the thread works for, or nowhere."""

    def emit(self, record: logging.LogRecord) -> None:
        health: ExportHealth | None = getattr(_working, "health", None)
        if health is not None:
            try:
                health.note(record.getMessage())
            except Exception:  # a record whose arguments do not format: its text is lost
                pass


def capture_sdk_logging() -> None:
    """Route the `opentelemetry` loggers' warnings and errors to `_SdkRecords` only (once per
    process): left alone they reach twistd's log as a line per retry, with tracebacks."""
    with _capture_lock:
        sdk = logging.getLogger("opentelemetry")
        if any(isinstance(h, _SdkRecords) for h in sdk.handlers):
            return
        sdk.addHandler(_SdkRecords(logging.WARNING))
        sdk.setLevel(logging.WARNING)
        sdk.propagate = False


class WatchedSession(requests.Session):
    """The HTTP session the SDK's exporters post with, telling `health` why a post failed."""

    def __init__(self, health: ExportHealth) -> None:
        super().__init__()
        self.health = health

    def request(self, *args: Any, **kwargs: Any) -> Any:
        try:
            response = super().request(*args, **kwargs)
        except Exception as e:
            self.health.cause(short_error(e))
            raise
        if response.status_code >= 300:
            self.health.cause(f"HTTP {response.status_code} {response.reason}")
        else:
            self.health.succeeded()
        return response


def short_error(e: BaseException) -> str:
    """The useful end of a requests error (`[Errno 111] Connection refused`, `Read timed out`)
    rather than its whole chain of wrapped exceptions."""
    text = str(e)
    errno = re.search(r"\[Errno -?\d+\] [^'\")]+", text)
    if errno:
        return errno[0]
    if "timed out" in text:
        return f"timed out ({type(e).__name__})"
    return f"{type(e).__name__}: {text}"


class WorkingFor:
    """`with WorkingFor(health):` the SDK's records on this thread are this exporter's (the
    threads are the SDK's or ours, so a thread-local is the only place to say so)."""

    def __init__(self, health: ExportHealth) -> None:
        self.health = health

    def __enter__(self) -> None:
        self.before = getattr(_working, "health", None)
        _working.health = self.health

    def __exit__(self, *exc: object) -> None:
        _working.health = self.before


# -- the threads ----------------------------------------------------------------------------------


class MetricsPusher:
    """A thread that posts the newest snapshot it was given; a snapshot still waiting when a
    newer one comes is replaced, so memory stays at one snapshot however slow the collector."""

    def __init__(self, post: Callable[[MetricsData], bool], health: ExportHealth,
                 name: str) -> None:
        self._post = post
        self._health = health
        self._cond = threading.Condition()
        self._pending: MetricsData | None = None
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name=f"ssekd-otlp-{name}",
                                        daemon=True)
        self._thread.start()

    def offer(self, data: MetricsData) -> None:
        with self._cond:
            self._pending = data
            self._cond.notify()

    def stop(self, timeout: float) -> None:
        """Post what is waiting (a last snapshot), then end; at most `timeout` seconds."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            with self._cond:
                while self._pending is None and not self._stopping:
                    self._cond.wait()
                data, self._pending = self._pending, None
                stopping = self._stopping
            if data is not None:
                with WorkingFor(self._health):
                    try:
                        ok = self._post(data)
                    except Exception as e:  # the SDK catches its own; this is a last guard
                        self._health.note(f"{type(e).__name__}: {e}")
                        ok = False
                if not ok:
                    self._health.failed("metrics")
            if stopping:
                return


class _WatchedLogExporter(LogRecordExporter):
    """The SDK's OTLP log exporter, with each failed post counted for the interval's report."""

    def __init__(self, inner: OTLPLogExporter, health: ExportHealth) -> None:
        self.inner = inner
        self.health = health

    def export(self, batch: Sequence[ReadableLogRecord]) -> LogRecordExportResult:
        self.health.taken(len(batch))
        with WorkingFor(self.health):
            try:
                result = self.inner.export(batch)
            except Exception as e:
                self.health.note(f"{type(e).__name__}: {e}")
                result = LogRecordExportResult.FAILURE
        if result != LogRecordExportResult.SUCCESS:
            self.health.failed("logs")
        return result

    def shutdown(self) -> None:
        with WorkingFor(self.health):
            self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


# -- the exporter ---------------------------------------------------------------------------------


def instance() -> dict[str, str | int]:
    """What tells this process's exports from another's: each worker of a daemon exports on its
    own, as each daemon does, and a collector keeps their series apart by these (OpenTelemetry's
    `service.instance.id`, unique per process; `telemetry.attributes` may set it instead)."""
    host, pid = socket.gethostname(), os.getpid()
    return {"service.instance.id": f"{host}:{pid}", "host.name": host, "process.pid": pid}


class OtlpExporter(Service):
    """One otlp exporter: a service of the engine, started and stopped with its config.

    `attributes` are the `telemetry.attributes`: they describe the resource (this process)."""

    def __init__(self, spec: OtlpSpec, metrics: Metrics, events: EventLog, reactor: Any,
                 attributes: Mapping[str, str]) -> None:
        self.spec = spec
        self.metrics = metrics
        self.events = events
        self.reactor = reactor
        self.attributes = dict(attributes)
        self.health = ExportHealth()
        self._loop = LoopingCall(self.tick)
        self._loop.clock = reactor
        self._start_ns = time.time_ns()
        self._resource = Resource.create({"service.name": "ssekd", **instance(),
                                          **self.attributes})
        self._pusher: MetricsPusher | None = None
        self._metrics_exporter: OTLPMetricExporter | None = None
        self._logs: LoggerProvider | None = None
        self._logger: Any = None

    def startService(self) -> None:
        super().startService()
        capture_sdk_logging()
        s = self.spec
        if "metrics" in s.signals:
            exporter = self._metrics_exporter = OTLPMetricExporter(
                endpoint=s.metrics_url, timeout=s.timeout, session=WatchedSession(self.health))
            self._pusher = MetricsPusher(
                lambda data: exporter.export(data) == MetricExportResult.SUCCESS,
                self.health, s.name)
        if "logs" in s.signals:
            self._logs = LoggerProvider(resource=self._resource, shutdown_on_exit=False)
            self._logs.add_log_record_processor(BatchLogRecordProcessor(
                _WatchedLogExporter(OTLPLogExporter(endpoint=s.logs_url, timeout=s.timeout,
                                                    session=WatchedSession(self.health)),
                                    self.health),
                schedule_delay_millis=s.interval * 1000, max_queue_size=LOG_QUEUE,
                max_export_batch_size=LOG_BATCH, export_timeout_millis=s.timeout * 1000))
            self._logger = self._logs.get_logger("ssekd.events")
            self.events.sinks.append(self.publish)
        self._loop.start(s.interval, now=False).addErrback(
            lambda f: log.failure("otlp exporter {name}", f, name=s.name))

    def stopService(self) -> defer.Deferred[None]:
        """Stop taking events, then post what is left (a last snapshot, queued records) on a
        thread, waiting at most `MAX_EXPORT_SECONDS`: an orderly stop sends the final counts.
        While the collector is failing, a stop waits a second at most: the process need not
        outlive a collector that is down."""
        super().stopService()
        if self.publish in self.events.sinks:
            self.events.sinks.remove(self.publish)
        if self._loop.running:
            self._loop.stop()
        pusher, exporter, logs = self._pusher, self._metrics_exporter, self._logs
        self._pusher, self._metrics_exporter, self._logs, self._logger = None, None, None, None
        if pusher is not None:
            pusher.offer(self.snapshot())
        budget = 1.0 if self.health.failing else MAX_EXPORT_SECONDS
        d: defer.Deferred[None] = defer.Deferred()

        def finish() -> None:
            deadline = time.monotonic() + budget
            if pusher is not None and exporter is not None:
                pusher.stop(budget)
                with WorkingFor(self.health):
                    exporter.shutdown()  # ends a post still retrying, closes its connections
            if logs is not None:
                # The processor's shutdown posts every queued record and may wait longer than
                # we will: it runs on a thread of its own that a stopping process abandons.
                last = threading.Thread(target=self._shutdown_logs, args=(logs,),
                                        name=f"ssekd-otlp-{self.spec.name}-logs", daemon=True)
                last.start()
                last.join(max(0.0, deadline - time.monotonic()))
            self.reactor.callFromThread(d.callback, None)

        threading.Thread(target=finish, name=f"ssekd-otlp-{self.spec.name}-stop",
                         daemon=True).start()
        return d

    def _shutdown_logs(self, logs: LoggerProvider) -> None:
        with WorkingFor(self.health):
            logs.shutdown()

    # -- on the reactor thread --------------------------------------------------------------------

    def tick(self) -> None:
        """Every interval: hand the metrics to the pusher, and say what failed since the last."""
        if self._pusher is not None:
            self._pusher.offer(self.snapshot())
        found = self.health.report()
        if found is not None:
            name, detail = found
            self.events.emit(self.spec.name, name, f"{self._target()}: {detail}")

    def snapshot(self) -> MetricsData:
        hidden = [label_name(k) for k in self.attributes]
        return metrics_data(self.metrics.registry.collect(), self._resource, hidden,
                            self._start_ns, time.time_ns())

    def publish(self, when: float, namespace: str, binding: str, name: str,
                detail: str) -> None:
        """One event as a log record (an `EventLog` sink): a deque append for the SDK's thread,
        or, with `LOG_QUEUE` records already waiting, a count of what was not sent."""
        logger = self._logger
        if logger is None or not self.health.queue():
            return
        with WorkingFor(self.health):
            try:
                logger.emit(timestamp=int(when * 1e9), observed_timestamp=time.time_ns(),
                            body=f"{namespace}:{binding} {detail}",
                            attributes={"event.name": name}, event_name=name)
            except Exception as e:  # whoever emitted the event must not see the SDK fail
                self.health.taken(1)
                self.health.note(f"{type(e).__name__}: {e}")
                self.health.failed("logs")

    def _target(self) -> str:
        s = self.spec
        urls = [u for sig, u in (("metrics", s.metrics_url), ("logs", s.logs_url))
                if sig in s.signals]
        return " and ".join(urls)
