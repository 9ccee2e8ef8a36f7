"""http-kafka proxy at run time: the first route whose `when` matches the method and path, its
`guarded` roles, then its capability (`produce.Producing`, `fetch.Fetching`).

No route matches: `404`. A route's `guarded: {guard: [roles]}` needs a session of that guard
(from the http binding's `authorization`) with every listed role: none `401`, an invalid token or
a missing role `403`, a guard that cannot check tokens yet `503` with `Retry-After`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from twisted.application.service import Service
from twisted.web import http
from twisted.web.server import NOT_DONE_YET, Request

from ssekd.bindings.http.roles import HttpContext
from ssekd.bindings.http.routing import request_headers
from ssekd.bindings.http_kafka.exchange import Exchange
from ssekd.bindings.http_kafka.fetch import Fetching, FetchWith
from ssekd.bindings.http_kafka.produce import ProduceWith, Producing, Settings
from ssekd.bindings.http_kafka.waits import KafkaExit
from ssekd.patterns import Pattern
from ssekd.spi.guard import Guard
from ssekd.telemetry.events import EventLog

#: Seconds a client is told to wait when a guard cannot check tokens yet.
RETRY_AFTER_GUARD = 5.0


@dataclass(frozen=True)
class When:
    """One `when` item: a method (None: any) and a path pattern (None: any)."""

    method: str | None
    path: Pattern | None

    def match(self, method: str, path: str) -> dict[str, str] | None:
        if self.method is not None and self.method != method:
            return None
        if self.path is None:
            return {}
        found = self.path.match(path)
        return None if found is None else {k: unquote(v) for k, v in found.items()}


@dataclass(frozen=True)
class HttpKafkaRoute:
    when: tuple[When, ...]
    exit: str
    with_: ProduceWith | FetchWith
    guarded: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def redact(self, uri: str) -> str:
        """`uri` fit for a log line: an async location's token hidden."""
        return self.with_.redact(uri) if isinstance(self.with_, ProduceWith) else uri

    def match(self, method: str, path: str) -> dict[str, str] | None:
        if not self.when:
            return {}
        for w in self.when:
            found = w.match(method, path)
            if found is not None:
                return found
        return None


class HttpKafkaProxy(Service):
    """Runtime of an `http-kafka` binding of kind `proxy` (an exit of the http server). As a
    service it makes the producers its routes write with when it starts: a producer connects
    (and an idempotent one gets its producer id) in about a second, which the first write
    would otherwise wait."""

    #: Requests carry bodies (produce), bounded by the http binding's `limits.body-bytes`.
    takes_body = True
    #: The option that bounds how long a response stays quiet (see `max_idle`).
    idle_option = "max-wait"

    def __init__(self, name: str, routes: tuple[HttpKafkaRoute, ...],
                 exits: Mapping[str, KafkaExit], settings: Settings, events: EventLog,
                 guards: Mapping[str, Guard], producing: Producing, fetching: Fetching) -> None:
        self.binding = name
        self.routes = routes
        self.exits = exits
        self.settings = settings
        self.events = events
        self.guards = dict(guards)
        self.producing = producing
        self.fetching = fetching

    def startService(self) -> None:
        super().startService()
        for route in self.routes:
            w = route.with_
            if isinstance(w, ProduceWith):
                literal = [] if "${" in w.topic else [w.topic]
                self.exits[route.exit].warm(w.acks, literal)

    def redact_path(self, uri: str) -> str:
        """`uri` as the http binding's access event may show it: the token of any async
        location hidden (locations.py), whichever route it belongs to."""
        for route in self.routes:
            uri = route.redact(uri)
        return uri

    @property
    def max_idle(self) -> float:
        """A response waits quietly for `max-wait` seconds at most (a reply, `Prefer: wait`):
        the http binding in front must not close an idle connection sooner."""
        return self.settings.max_wait

    def render(self, request: Request, ctx: HttpContext) -> bytes | int:
        req: Any = request  # twisted.web is untyped for mypy
        method = req.method.decode("latin-1")
        path = req.path.decode("latin-1")
        for route in self.routes:
            params = route.match(method, path)
            if params is None:
                continue
            refused = self._refused(request, ctx, route, method, path)
            if refused is not None:
                return refused
            exchange = Exchange(request, route.redact)
            exit_ = self.exits[route.exit]
            try:
                if isinstance(route.with_, ProduceWith):
                    self.producing.handle(exchange, ctx, route.with_, exit_, params,
                                          request_headers(request))
                else:
                    self.fetching.handle(exchange, ctx, route.with_, exit_, params)
            except Exception:  # noqa: BLE001 - a bug answers 500, it never kills the reactor
                from twisted.python.failure import Failure
                exchange.failed(Failure())
            return NOT_DONE_YET
        self.events.emit(self.binding, "BINDING_HTTP_KAFKA_NO_ROUTE", f"{method} {path}")
        req.setResponseCode(http.NOT_FOUND)
        return b""

    def _refused(self, request: Request, ctx: HttpContext, route: HttpKafkaRoute,
                 method: str, path: str) -> bytes | None:
        if not route.guarded:
            return None
        denied = ctx.authorize(route.guarded)
        if denied is None:
            return None
        guard, refusal = denied
        if not refusal.reported and guard in self.guards:
            self.guards[guard].report(f"{method} {route.redact(path)}: {refusal.reason}")
        req: Any = request
        if refusal.status == http.SERVICE_UNAVAILABLE:
            retry = refusal.retry_after or RETRY_AFTER_GUARD
            req.setHeader(b"retry-after", str(math.ceil(retry)).encode())
        elif refusal.status == http.UNAUTHORIZED:
            req.setHeader(b"www-authenticate", b"Bearer")
        req.setResponseCode(refusal.status)
        return b""
