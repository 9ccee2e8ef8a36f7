"""The http server binding at run time: a Twisted `Site` whose root routes each request to an exit.

The same Site serves HTTP/1.1 and HTTP/2 (its protocol switches to our `BatchingH2Connection`
when TLS negotiates `h2`, see `h2.py`); CORS and routing happen here, once, before the exit sees the request.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from twisted.internet.interfaces import IProtocol
from twisted.web import http
from twisted.web.resource import Resource
from twisted.web.server import Request, Site

from ssekd.bindings.api import ConnectionInfo, HttpBinding, HttpContext
from ssekd.bindings.http import h2c
from ssekd.bindings.http.channel import BodyCountingRequest, LimitedHTTPChannel, Limits
from ssekd.bindings.http.cors import AccessControl
from ssekd.bindings.http.h2 import SwitchingChannelProtocol
from ssekd.bindings.http.routing import Condition, head_headers, match_any, request_headers
from ssekd.telemetry.events import EventLog
from ssekd.telemetry.metrics import Metrics

SERVER_NAME = b"ssekd"


@dataclass(frozen=True)
class HttpRoute:
    conditions: tuple[Condition, ...]
    exit: HttpBinding


class SsekdRequest(BodyCountingRequest):
    """No default `Content-Type`: an empty 404 or 304 should not claim to be HTML."""

    defaultContentType = None


class HttpStats:
    """Zilla's http metrics of one binding: every request counts from `render` to its end."""

    def __init__(self, metrics: Metrics, binding: str, clock: Any) -> None:
        self.clock = clock  # an IReactorTime
        self.active = metrics.gauge("http.active.requests", binding)
        self.request_size = metrics.histogram("http.request.size", binding)
        self.response_size = metrics.histogram("http.response.size", binding)
        self.duration = metrics.histogram("http.duration", binding)

    def started(self, request: Request) -> None:
        self.active.value += 1
        req: Any = request  # twisted.web is untyped for mypy
        length = req.getHeader(b"content-length")
        self.request_size.observe(float(length) if length and length.isdigit() else 0.0)
        req.notifyFinish().addBoth(self._finished, req, self.clock.seconds())

    def _finished(self, _: object, request: Any, began: float) -> None:
        """Finished or cut off: either way the request is over (the failure is not ours)."""
        self.active.value -= 1
        self.response_size.observe(float(request.sentLength))
        self.duration.observe((self.clock.seconds() - began) * 1000.0)


class HttpRoot(Resource):
    """The only resource of the Site: every request is routed by its headers, not by a tree."""

    isLeaf = True

    def __init__(self, name: str, routes: Sequence[HttpRoute], default: HttpBinding | None,
                 cors: AccessControl, events: EventLog,
                 stats: HttpStats | None = None) -> None:
        super().__init__()
        self.stats = stats
        self.name = name
        self.routes = list(routes)
        self.default = default
        self.cors = cors
        self.events = events

    def render(self, request: Request) -> bytes | int:
        request.setHeader(b"server", SERVER_NAME)
        if self.stats is not None:
            self.stats.started(request)
        headers = request_headers(request)
        if self.events.stdout is not None:
            self.events.emit(self.name, "BINDING_HTTP_REQUEST_ACCEPTED",
                             f"- {headers[':method']} {headers[':scheme']}://"
                             f"{headers[':authority']}{headers[':path']}")
        origin = request.getHeader(b"origin")
        if origin is not None:
            if not self.cors.allows(origin.decode("latin-1"), headers[":scheme"],
                                    headers[":authority"]):
                request.setResponseCode(http.FORBIDDEN)
                return b""
            if self.cors.cross_origin and self.cors.is_preflight(request):
                return self.cors.answer_preflight(request, origin)
        found = self._route(headers)
        if found is None:
            request.setResponseCode(http.NOT_FOUND)
            return b""
        target, params = found
        if origin is not None:
            self.cors.decorate(request, origin)
        return target.render(request, HttpContext(binding=self.name, params=params))

    def takes_body(self, request: Request, method: bytes, uri: bytes) -> bool:
        """Whether the exit this request head routes to reads request bodies (`BodyRoutes`).

        No route (`404`) takes none, and CORS does not matter here: a refused origin gets its
        `403` from `render` like any request whose body is not read."""
        found = self._route(head_headers(request, method, uri))
        return found is not None and found[0].takes_body

    def _route(self, headers: dict[str, str]) -> tuple[HttpBinding, dict[str, str]] | None:
        """The exit and captures of the first route matching `headers`, else the default exit."""
        for route in self.routes:
            params = match_any(route.conditions, headers)
            if params is not None:
                return route.exit, params
        if self.default is None:
            return None
        return self.default, {}


class HttpSite(Site):
    """A Site whose HTTP/1.1 channels carry our limits."""

    requestFactory = SsekdRequest

    def __init__(self, root: HttpRoot, limits: Limits, reactor: Any) -> None:
        super().__init__(root, timeout=limits.idle_timeout, reactor=reactor)
        self.root = root
        self.limits = limits
        self.displayTracebacks = False

    def protocol(self) -> Any:
        # Same shape as Twisted's default (a proxy that can become HTTP/2 after ALPN), but with
        # our HTTP/1.1 channel inside and our HTTP/2 connection (one write per turn) after ALPN.
        return SwitchingChannelProtocol(LimitedHTTPChannel(self.limits, self.root))

    def log(self, request: Any) -> None:
        """Access lines are events (see HttpRoot.render), not Twisted's common log format."""


class HttpServer:
    """Runtime of an http server binding."""

    def __init__(self, name: str, site: HttpSite, versions: tuple[str, ...]) -> None:
        self.name = name
        self.site = site
        self.versions = versions

    def build_protocol(self, conn: ConnectionInfo) -> IProtocol | None:
        """HTTP/1.1 or HTTP/2 as TLS negotiated, or as the first bytes say in cleartext."""
        return h2c.protocol_for(self, conn)
