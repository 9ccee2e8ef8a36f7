"""The metrics page of a daemon that runs worker processes: the workers' pages combined.

Each worker keeps its metrics as plain numbers bumped by its reactor (see
`ssekd.telemetry.metrics`) and serves them on a private Unix socket; the parent, which owns the
configured exporter port, reads every worker's page when it is scraped and combines them, so one
scrape describes the whole daemon as one process would. How a family combines is declared with
it (`MetricDef.across`): what each worker does on its own adds up (requests, streams, bytes,
deliveries, memory); state every worker holds alike takes the largest (each worker consumes the
same partitions, so a topic's lag or cache age summed would read N times too high); limits and
start times take the smallest, and open file descriptors the largest, comparable to the
per-process limit. The parent adds its own figures (worker restarts, its own process).

Why summing in the parent rather than the alternatives: prometheus-client's multiprocess mode
keeps every value in a memory-mapped file, which puts a file write on the hot path of every
stream's write and cannot carry the gauges read by callbacks at scrape time (cache sizes,
consumer lag); per-worker labels would multiply the series by the worker count and make every
query need a `sum by`, while workers are an implementation detail of one daemon. A counter of
a worker that restarts starts again from 0, which `rate()` reads as a counter reset, as it
would for a restarted daemon.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics.parser import text_string_to_metric_families
from twisted.internet import defer
from twisted.internet.endpoints import UNIXClientEndpoint
from twisted.python.failure import Failure
from twisted.web import http
from twisted.web.client import Agent, readBody
from twisted.web.http_headers import Headers
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET, Request

from ssekd.telemetry.metrics import across_workers
from ssekd.telemetry.prometheus import refused

#: How each known family combines; others add up.
ACROSS = across_workers()
#: What the parent asks the workers for: OpenMetrics carries the units (`# UNIT`), which the
#: text format drops, so the sum can be answered in either format as one process would.
OPENMETRICS = b"application/openmetrics-text; version=1.0.0"
#: Seconds a worker has to answer the parent before its page is left out of a scrape.
WORKER_TIMEOUT = 5.0


def add_up(pages: list[str]) -> list[Metric]:
    """The families of every page (OpenMetrics text), each sample combined over the pages as
    its family declares (`ACROSS`; a `_created` time is the earliest). Order is first-seen,
    which keeps a histogram's buckets in order."""
    families: dict[str, Metric] = {}
    values: dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], float]] = {}
    for page in filter(None, pages):  # "": a worker that did not answer
        for family in text_string_to_metric_families(page):
            if family.name not in families:
                families[family.name] = Metric(family.name, family.documentation, family.type,
                                               family.unit)
            seen = values.setdefault(family.name, {})
            across = ACROSS.get(family.name, "sum")
            for s in family.samples:
                key = (s.name, tuple(sorted(s.labels.items())))
                old = seen.get(key)
                if old is None:
                    seen[key] = s.value
                elif s.name.endswith("_created") or across == "min":
                    seen[key] = min(old, s.value)
                elif across == "max":
                    seen[key] = max(old, s.value)
                else:
                    seen[key] = old + s.value
    for name, family in families.items():
        for (sample, labels), value in values[name].items():
            family.add_sample(sample, dict(labels), value)
    return list(families.values())


class _AddedUp:
    """A collector that yields families already added up."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self.families)


def render(pages: list[str], accept: str) -> tuple[bytes, str]:
    """The sum of `pages` in the format `accept` asks for: (body, content type)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_AddedUp(add_up(pages)))
    encode, content_type = choose_encoder(accept)
    return encode(registry), content_type


class _WorkerSockets:
    """Agent endpoint factory: the URI's host names the worker's socket (by index)."""

    def __init__(self, reactor: Any, sockets: Callable[[], list[str]]) -> None:
        self.reactor = reactor
        self.sockets = sockets

    def endpointForURI(self, uri: Any) -> UNIXClientEndpoint:  # noqa: N802 - Twisted's name
        return UNIXClientEndpoint(self.reactor, self.sockets()[int(uri.host.decode()[1:])],
                                  timeout=WORKER_TIMEOUT)


class SummedPage(Resource):
    """The parent's exporter page: GET every worker's page, answer their sum."""

    isLeaf = True

    def __init__(self, reactor: Any, sockets: Callable[[], list[str]], path: str,
                 own: Callable[[], str] | None = None) -> None:
        super().__init__()
        self.reactor = reactor
        self.sockets = sockets
        #: The parent's own page (OpenMetrics), combined with the workers'.
        self.own = own
        self.path = path.encode("utf-8")
        self.agent = Agent.usingEndpointFactory(reactor, _WorkerSockets(reactor, sockets))

    def render(self, request: Request) -> bytes | int:
        req: Any = request  # twisted.web is untyped for mypy
        if refused(req, self.path):
            return b""
        gone: list[bool] = []
        req.notifyFinish().addBoth(lambda _: gone.append(True))
        reads = [self._read(i) for i in range(len(self.sockets()))]
        done = defer.gatherResults(reads)
        done.addCallback(self._answer, req, gone)
        done.addErrback(self._failed, req, gone)
        return NOT_DONE_YET

    def _read(self, index: int) -> defer.Deferred[str]:
        d: defer.Deferred[Any] = self.agent.request(
            b"GET", f"http://w{index}/metrics".encode(), Headers({b"Accept": [OPENMETRICS]}))
        d.addCallback(readBody)
        d.addCallback(lambda body: body.decode("utf-8"))
        # a worker being restarted is left out of this scrape rather than failing it
        d.addErrback(lambda _: "")
        d.addTimeout(WORKER_TIMEOUT, self.reactor, onTimeoutCancel=lambda *_: "")
        return d

    def _answer(self, pages: list[str], req: Any, gone: list[bool]) -> None:
        if not any(pages):
            # no worker answered (all starting or restarting): a failed scrape, which
            # Prometheus records as `up 0`, not an empty page, which would end every series
            req.setResponseCode(http.SERVICE_UNAVAILABLE)
            req.setHeader(b"Retry-After", b"1")
            if not gone:
                req.finish()
            return
        if self.own is not None:
            pages = [*pages, self.own()]
        accept = req.getHeader(b"accept")
        body, content_type = render(pages, accept.decode("latin-1") if accept else "")
        req.setHeader(b"Content-Type", content_type.encode("latin-1"))
        req.setHeader(b"Cache-Control", b"no-store")
        if not gone:  # the scraper may have given up meanwhile
            req.write(body)
            req.finish()

    def _failed(self, failure: Failure, req: Any, gone: list[bool]) -> None:
        if not gone:
            req.setResponseCode(http.INTERNAL_SERVER_ERROR)
            req.finish()
