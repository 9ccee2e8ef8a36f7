"""The channel between the worker processes of one daemon, so that with workers it behaves for a
client as one process would where the client's requests land on different workers.

Each worker already serves its metrics page on a private Unix socket, `worker-<n>.sock` in a
folder only the daemon's user may enter (see `ssekd.workers.supervisor`), for its parent to scrape. The same
socket answers its siblings:

- `POST /siblings/renew` `{"binding", "host", "tokens"}`: an HTTP/1.1 renewal that reached
  another worker (a browser sends it on a connection of its own, which the kernel may give to any
  worker). This worker checks the tokens with its own guards, renews the HTTP/1.1 streams client
  `host` holds on that http binding, and answers per guard what it renewed or why not. It never
  forwards the renewal again, and reports nothing: the worker that answers the client does.
- `POST /siblings/keys` `{"guard", "kids"}`: that guard of a sibling loaded a key set with other
  key ids; this worker's guard fetches its own (see `ssekd.guards.jwt`).

A worker finds its siblings as the other `worker-*.sock` files of its folder, at each use (a
worker the parent restarts keeps its path). A sibling that does not answer within `TIMEOUT`
(starting, restarting, dead) renewed nothing. Tokens travel only over these sockets, in request
bodies, and are never logged. A daemon without workers has no siblings and none of this.
"""

from __future__ import annotations

import glob
import json
import os
from collections.abc import Callable, Collection, Mapping
from io import BytesIO
from typing import Any, Protocol, runtime_checkable

from twisted.internet import defer
from twisted.internet.endpoints import UNIXClientEndpoint
from twisted.logger import Logger
from twisted.web import http
from twisted.web.client import Agent, FileBodyProducer, readBody
from twisted.web.http_headers import Headers
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET, Request, Site

from ssekd.deferred_answer import answer_later
from ssekd.graph import Graph
from ssekd.health import Health
from ssekd.heartbeats import HEARTBEAT_PATH
from ssekd.spi.guard import Refusal, Renewal
from ssekd.telemetry.metrics import Metrics
from ssekd.telemetry.prometheus import ExporterSite, MetricsPage

log = Logger()

RENEW = b"/siblings/renew"
KEYS = b"/siblings/keys"
#: Seconds a sibling has to answer: a renewal's client waits that long at most for a stuck one.
TIMEOUT = 2.0
#: The workers' sockets in their folder (`ssekd.workers.supervisor` names them).
SOCKETS = "worker-*.sock"

#: Send one request to a sibling: (its socket, path, JSON body) -> the response body; fails on
#: anything but `200`.
Post = Callable[[str, bytes, bytes], "defer.Deferred[bytes]"]


@runtime_checkable
class SiblingRenewals(Protocol):
    """A binding that renews leases for a sibling (the http server)."""

    def renew_for_sibling(self, host: str, tokens: Mapping[str, str]
                          ) -> defer.Deferred[dict[str, Renewal]]: ...


@runtime_checkable
class SiblingKeys(Protocol):
    """A guard that follows the key sets its siblings load (the jwt guard)."""

    def sibling_loaded(self, kids: Collection[str]) -> None: ...


class ThisWorker(Protocol):
    """Where a sibling's request is answered: this worker's current graph (the engine's), and
    its health, which the parent's heartbeat reaches (`ssekd.heartbeats`)."""

    @property
    def graph(self) -> Graph | None: ...

    @property
    def health(self) -> Health: ...


# -- asking the siblings ------------------------------------------------------------------------


class _OneSocket:
    """Agent endpoint factory: every URI goes to one Unix socket."""

    def __init__(self, reactor: Any, path: str) -> None:
        self.reactor = reactor
        self.path = path

    def endpointForURI(self, uri: Any) -> UNIXClientEndpoint:  # noqa: N802 - Twisted's name
        return UNIXClientEndpoint(self.reactor, self.path, timeout=TIMEOUT)


def unix_post(reactor: Any) -> Post:
    """`Post` with Twisted's Agent over the sibling's Unix socket: never blocks the reactor."""

    def post(socket: str, path: bytes, body: bytes) -> defer.Deferred[bytes]:
        agent = Agent.usingEndpointFactory(reactor, _OneSocket(reactor, socket))
        d: defer.Deferred[Any] = agent.request(
            b"POST", b"http://sibling" + path,
            Headers({b"content-type": [b"application/json"]}), FileBodyProducer(BytesIO(body)))

        def read(response: Any) -> defer.Deferred[bytes]:
            if response.code != http.OK:
                raise ValueError(f"sibling answered {response.code}")
            body: defer.Deferred[bytes] = readBody(response)
            return body
        return d.addCallback(read)
    return post


def renewals_of(body: bytes) -> dict[str, Renewal]:
    """A sibling's answer to a renewal: guard -> what it did there."""
    found: dict[str, Renewal] = {}
    for guard, r in json.loads(body).items():
        status, reason = r.get("status"), r.get("reason")
        refusal = Refusal(int(status), str(reason)) if status is not None else None
        found[str(guard)] = Renewal(int(r["renewed"]), refusal, int(r["reach"]))
    return found


def renewals_body(renewals: Mapping[str, Renewal]) -> bytes:
    """The answer to a sibling's renewal (see `renewals_of`)."""
    return json.dumps({g: {"renewed": r.renewed, "reach": r.reach,
                           "status": r.refusal.status if r.refusal else None,
                           "reason": r.refusal.reason if r.refusal else None}
                       for g, r in renewals.items()}).encode()


class UnixSiblings:
    """`api.Siblings` of a worker whose own socket is `own`: the other `worker-*.sock` beside it."""

    def __init__(self, reactor: Any, own: str, post: Post | None = None) -> None:
        self.reactor = reactor
        self.own = os.path.abspath(own)
        self.post = post or unix_post(reactor)

    def sockets(self) -> list[str]:
        """The sockets of the other workers, as they are now."""
        folder = os.path.dirname(self.own)
        return sorted(p for p in glob.glob(os.path.join(glob.escape(folder), SOCKETS))
                      if p != self.own)

    def renew(self, binding: str, host: str, tokens: Mapping[str, str]
              ) -> defer.Deferred[list[Mapping[str, Renewal]]]:
        body = json.dumps({"binding": binding, "host": host, "tokens": dict(tokens)}).encode()
        asks = [self._ask(s, RENEW, body) for s in self.sockets()]

        def answers(bodies: list[bytes | None]) -> list[Mapping[str, Renewal]]:
            found: list[Mapping[str, Renewal]] = []
            for b in bodies:
                if b is None:
                    continue  # it did not answer (in time): it renewed nothing
                try:
                    found.append(renewals_of(b))
                except (ValueError, TypeError, KeyError, AttributeError):
                    log.warn("a sibling's answer to a renewal is unreadable")
            return found
        return defer.gatherResults(asks).addCallback(answers)

    def keys_changed(self, guard: str, kids: Collection[str]) -> None:
        body = json.dumps({"guard": guard, "kids": sorted(kids)}).encode()
        for s in self.sockets():
            self._ask(s, KEYS, body)

    def _ask(self, socket: str, path: bytes, body: bytes) -> defer.Deferred[bytes | None]:
        """POST to one sibling; None when it does not answer (in time)."""
        d: defer.Deferred[Any] = self.post(socket, path, body)
        d.addTimeout(TIMEOUT, self.reactor)
        return d.addErrback(lambda _: None)


# -- answering them -----------------------------------------------------------------------------


class SiblingPage(Resource):
    """The root of a worker's Unix-socket site: the metrics page for the parent's scrapes, its
    heartbeat (`ssekd.heartbeats`), and the requests of the sibling workers."""

    isLeaf = True

    def __init__(self, metrics: Resource, local: ThisWorker) -> None:
        super().__init__()
        self.metrics = metrics
        self.local = local

    def render(self, request: Request) -> bytes | int:
        req: Any = request  # twisted.web is untyped for mypy
        if req.path == HEARTBEAT_PATH:
            # answered by this reactor: that it answers is the heartbeat
            self.local.health.supervised()
            req.setHeader(b"content-type", b"application/json")
            return json.dumps({"lag_ms": round(self.local.health.lag * 1000.0, 1)}).encode()
        if req.path not in (RENEW, KEYS):
            answer: bytes | int = self.metrics.render(request)
            return answer
        if req.method != b"POST":
            req.setResponseCode(http.NOT_ALLOWED)
            req.setHeader(b"Allow", b"POST")
            return b""
        try:
            asked = json.loads(req.content.read())
            if req.path == RENEW:
                return self._renew(req, str(asked["binding"]), str(asked["host"]),
                                   {str(g): str(t) for g, t in asked["tokens"].items()})
            return self._keys(str(asked["guard"]), [str(k) for k in asked["kids"]], req)
        except (ValueError, TypeError, KeyError, AttributeError):
            req.setResponseCode(http.BAD_REQUEST)
            return b""

    def _renew(self, req: Any, binding: str, host: str, tokens: Mapping[str, str]) -> bytes | int:
        graph = self.local.graph
        runtime = graph.runtimes.get(binding) if graph is not None else None
        if not isinstance(runtime, SiblingRenewals):
            return renewals_body({})
        answer: defer.Deferred[bytes | int] = runtime.renew_for_sibling(host, tokens).addCallback(
            renewals_body)
        answer_later(req, answer)
        return NOT_DONE_YET

    def _keys(self, name: str, kids: list[str], req: Any) -> bytes:
        graph = self.local.graph
        guard = graph.guards.get(name) if graph is not None else None
        if isinstance(guard, SiblingKeys):
            guard.sibling_loaded(kids)
        return b""


def site(metrics: Metrics, local: ThisWorker, reactor: Any) -> Site:
    """A worker's Unix-socket site: `/metrics` and the sibling endpoints."""
    s = ExporterSite(SiblingPage(MetricsPage(metrics, "/metrics"), local), reactor=reactor)
    s.displayTracebacks = False
    s.noisy = False
    return s
