"""The Prometheus exporter: a metrics page on its own listener (SPEC §10).

Each `options.endpoints[]` entry of a `type: prometheus` exporter is one socket (`host`, default
127.0.0.1 so that nothing is exposed beyond the machine unless the config says so; `port`;
`path`, default `/metrics`). Only GET and HEAD are answered (anything else is `405` with
`Allow`); another path is `404`. A scraper that asks for `application/openmetrics-text` in
`Accept` gets OpenMetrics, any other the classic text format.

The page is rendered on the reactor thread: the metrics are plain numbers the reactor alone
writes, and a scrape costs O(series), not O(streams) (see `ssekd.telemetry.metrics`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client.exposition import choose_encoder
from twisted.web import http
from twisted.web.resource import Resource
from twisted.web.server import Request, Site

from ssekd.telemetry.metrics import Metrics

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PATH = "/metrics"


@dataclass(frozen=True)
class Endpoint:
    """One socket of a prometheus exporter."""

    host: str
    port: int
    path: str


def endpoints(exporters: Iterable[tuple[str, Mapping[str, Any]]]) -> list[Endpoint]:
    """The endpoints of the `(type, options)` exporters that are prometheus ones."""
    found = []
    for type_, options in exporters:
        if type_ != "prometheus":
            continue
        for e in options.get("endpoints", ()):
            found.append(Endpoint(str(e.get("host", DEFAULT_HOST)), int(e["port"]),
                                  str(e.get("path", DEFAULT_PATH))))
    return found


class MetricsPage(Resource):
    """The only resource of an exporter's Site."""

    isLeaf = True

    def __init__(self, metrics: Metrics, path: str) -> None:
        super().__init__()
        self.metrics = metrics
        self.path = path.encode("utf-8")

    def render(self, request: Request) -> bytes:
        req: Any = request  # twisted.web is untyped for mypy
        if refused(req, self.path):
            return b""
        accept = req.getHeader(b"accept")
        encode, content_type = choose_encoder(accept.decode("latin-1") if accept else "")
        body: bytes = encode(self.metrics.registry)
        req.setHeader(b"Content-Type", content_type.encode("latin-1"))
        req.setHeader(b"Cache-Control", b"no-store")
        return body


def refused(req: Any, path: bytes) -> bool:
    """Answer a request for another path (`404`) or with a method other than GET and HEAD
    (`405`): True when the metrics page must not be served."""
    if req.path != path:
        req.setResponseCode(http.NOT_FOUND)
        return True
    if req.method not in (b"GET", b"HEAD"):
        req.setResponseCode(http.NOT_ALLOWED)
        req.setHeader(b"Allow", b"GET, HEAD")
        return True
    return False


class ExporterSite(Site):
    """No access log lines for scrapes (one every few seconds would drown the events)."""

    def log(self, request: Any) -> None:
        pass


def site(metrics: Metrics, endpoint: Endpoint, reactor: Any) -> ExporterSite:
    s = ExporterSite(MetricsPage(metrics, endpoint.path), reactor=reactor)
    s.displayTracebacks = False
    s.noisy = False
    return s
