"""An OTLP/HTTP receiver for the tests: a real HTTP server on loopback that decodes what it is
posted with the `opentelemetry-proto` package (as a collector would) and keeps it."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue


def value_of(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


def attributes(kvs: Any) -> dict[str, Any]:
    return {kv.key: value_of(kv.value) for kv in kvs if isinstance(kv, KeyValue)}


@dataclass
class LogRecord:
    """One received log record, flattened."""

    body: str
    attributes: dict[str, Any]
    resource: dict[str, Any]
    time_unix_nano: int


@dataclass
class Receiver:
    """Posts to `/v1/metrics` and `/v1/logs` (or the paths given) are decoded and kept."""

    metrics_path: str = "/v1/metrics"
    logs_path: str = "/v1/logs"
    port: int = 0
    metrics: list[ExportMetricsServiceRequest] = field(default_factory=list)
    logs: list[ExportLogsServiceRequest] = field(default_factory=list)
    #: Every request seen: (path, content type).
    requests: list[tuple[str, str]] = field(default_factory=list)

    def start(self) -> Receiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                receiver.requests.append((self.path, self.headers.get("Content-Type", "")))
                reply: Any
                if self.path == receiver.metrics_path:
                    receiver.metrics.append(ExportMetricsServiceRequest.FromString(body))
                    reply = ExportMetricsServiceResponse()
                elif self.path == receiver.logs_path:
                    receiver.logs.append(ExportLogsServiceRequest.FromString(body))
                    reply = ExportLogsServiceResponse()
                else:
                    self.send_error(404)
                    return
                data = reply.SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    @property
    def location(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # -- reading what came ------------------------------------------------------------------------

    def latest(self, name: str) -> tuple[Any, dict[str, Any]] | None:
        """The newest received metric named `name` and its resource's attributes."""
        for request in reversed(list(self.metrics)):
            for rm in request.resource_metrics:
                for sm in rm.scope_metrics:
                    for m in sm.metrics:
                        if m.name == name:
                            return m, attributes(rm.resource.attributes)
        return None

    def instances(self, name: str) -> dict[str, Any]:
        """service.instance.id -> the newest metric named `name` that instance sent (each worker
        of a daemon exports on its own)."""
        found: dict[str, Any] = {}
        for request in list(self.metrics):
            for rm in request.resource_metrics:
                instance = str(attributes(rm.resource.attributes).get("service.instance.id"))
                for sm in rm.scope_metrics:
                    for m in sm.metrics:
                        if m.name == name:
                            found[instance] = m
        return found

    def value(self, name: str, **match: str) -> float | None:
        """The sum of the newest `name` points whose attributes include `match`, over the
        instances that sent it."""
        found = self.instances(name)
        if not found:
            return None
        total = 0.0
        for metric in found.values():
            kind = metric.WhichOneof("data")
            for p in getattr(metric, kind).data_points:
                attrs = attributes(p.attributes)
                if all(attrs.get(k) == v for k, v in match.items()):
                    total += p.count if kind == "histogram" else \
                        getattr(p, p.WhichOneof("value"))
        return total

    def records(self) -> Iterator[LogRecord]:
        for request in list(self.logs):
            for rl in request.resource_logs:
                resource = attributes(rl.resource.attributes)
                for sl in rl.scope_logs:
                    for r in sl.log_records:
                        yield LogRecord(str(value_of(r.body)), attributes(r.attributes),
                                        resource, r.time_unix_nano)
