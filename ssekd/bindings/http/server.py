"""The http server binding at run time: a Twisted `Site` whose root routes each request to an exit.

The same Site serves HTTP/1.1 and HTTP/2 (its protocol switches to our HTTP/2 connection
when TLS negotiates `h2`, see `h2c.py`); CORS and routing happen here, once, before the exit sees the request.

Routes and guards: the first route whose `when` matches decides (then `exit`), and the request
must meet its `guarded` roles. Without credentials for the guard it is `401`, with credentials
the guard refused `403` (`503` while the guard cannot check), and with good credentials that lack
the roles `404`, as Zilla answers: the answer does not tell a client which roles a path wants.
Zilla would try the later routes (and `exit`) first; ssekd does not let a request that fails a
guarded route reach another one. The sessions a request has are its own (the http binding's
`authorization`) and its connection's (a tls server's client certificate,
`ConnectionInfo.sessions`, see `h2c.connection_sessions`); a route guarded by a guard whose
credentials the connection brings and no request carries (an x509 guard) is `404` without them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from twisted.internet import defer
from twisted.internet.interfaces import IProtocol
from twisted.logger import Logger
from twisted.web import http
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET, Request, Site

from ssekd.bindings.http import h2c
from ssekd.bindings.http.access import AccessLog
from ssekd.bindings.http.authorization import (
    Authorization,
    Renewals,
    Verdicts,
    answer_refusal,
    is_renewal,
    settled,
)
from ssekd.bindings.http.channel import BodyCountingRequest, LimitedHTTPChannel, Limits
from ssekd.bindings.http.cors import AccessControl
from ssekd.bindings.http.h2c import SwitchingChannelProtocol, connection_sessions
from ssekd.bindings.http.health import HealthPaths
from ssekd.bindings.http.request_end import RequestWatcher, when_over
from ssekd.bindings.http.roles import HttpBinding, HttpContext, RedactsPaths, TemporaryRefusals
from ssekd.bindings.http.routing import Condition, head_headers, match_any, request_headers
from ssekd.bindings.http.validation import Refused, Requests, refusal_body, retry_after, settle
from ssekd.deferred_answer import answer_later
from ssekd.spi.connection import ConnectionInfo, QuicSession, QuicTransport
from ssekd.spi.guard import CertificateGuard, Refusal, Renewal, Session
from ssekd.spi.workers import Siblings
from ssekd.telemetry.attributes import BindingAttributes
from ssekd.telemetry.events import EventLog
from ssekd.telemetry.metrics import Gauge, Metrics
from ssekd.telemetry.redact import redact_uri

SERVER_NAME = b"ssekd"
@dataclass(frozen=True)
class HttpRoute:
    conditions: tuple[Condition, ...]
    exit: HttpBinding
    #: guard name -> roles a request must have (`guarded`).
    guarded: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


#: What routing decided for a request: the exit, the captures and the `guarded` roles of the
#: first route that matches; None when none does and there is no default exit (`404`).
Routed = tuple[HttpBinding, dict[str, str], Mapping[str, tuple[str, ...]]] | None
_log = Logger()

#: A request's `http_route` until routing has decided it.
NOT_ROUTED: Any = object()


#: Attributes of a request held in slots rather than in its `__dict__`: ours, and the public
#: ones Twisted sets on every request that streams. CPython shares one key table among the
#: instances of a class while, over all of them, at most 30 attribute names are set; a request
#: that streams set 31 (Twisted's, ours and Componentized's), so the 31st (`chunked`, set at
#: the first write) gave every request a private dict: 1.7 KB of an idle stream's 8.6 KB,
#: measured with tracemalloc (bench/idle_memory.py). In slots they leave a dozen names to the
#: dict, room for the rarer ones (sessions, HEAD, TLS) to stay shared. None of them is one
#: Twisted deletes (`content`, `channel`): a deleted slot would not fall back to the class's
#: default as a deleted dict entry does.
_SLOTTED = ("answered_by", "sse_stream", "http_route", "access_began", "body_dropped",
            "end_watchers", "http_began",
            "producer", "streamingProducer", "finished", "code", "code_message", "clientproto",
            "uri", "method", "startedWriting", "chunked", "sentLength", "queued", "notifications",
            "cookies", "received_cookies", "etag", "lastModified", "args")


class SsekdRequest(BodyCountingRequest):
    """No default `Content-Type`: an empty 404 or 304 should not claim to be HTML.

    `http_route`: the route decided when the request's head came in (`HttpRoot.takes_body`),
    carried to `HttpRoot.render` so that a request is matched against the routes once."""

    __slots__ = _SLOTTED
    defaultContentType = None
    end_watchers: tuple[RequestWatcher, ...]
    http_began: float

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # a slot shadows the class attribute Twisted reads as the default: set it here
        for name, value in _SLOT_DEFAULTS:
            setattr(self, name, value)
        super().__init__(*args, **kwargs)

    # -- request_end: watchers told where Twisted fires notifyFinish's Deferreds -------------

    def watch_end(self, watcher: RequestWatcher) -> None:
        """See `request_end.when_over`."""
        self.end_watchers = (*self.end_watchers, watcher)

    def finish(self) -> None:
        super().finish()
        # Twisted fires the Deferreds of notifyFinish in `finish` once the request is done
        # with (not queued: HTTP/1.1 requests have not been since Twisted 16.3)
        if self.finished and not self.queued:
            self._over(None)

    def connectionLost(self, reason: Any) -> None:
        super().connectionLost(reason)
        self._over(reason)

    def _over(self, result: Any) -> None:
        watchers, self.end_watchers = self.end_watchers, ()
        for watcher in watchers:
            try:
                watcher.request_over(self, result)
            except Exception:  # as an error in a Deferred's callback: said, not raised
                _log.failure("a request's end watcher failed")


#: Each slotted name's default: Twisted's class attribute, or ours.
_SLOT_DEFAULTS = tuple((name, getattr(BodyCountingRequest, name)) for name in _SLOTTED
                       if hasattr(BodyCountingRequest, name)) + (("http_route", NOT_ROUTED),
                                                                  ("end_watchers", ()))


class HttpStats:
    """Zilla's http metrics of one binding: every request counts from `render` to its end.

    With `telemetry.attributes` (`ssekd.telemetry.attributes`) each request counts in the series
    of its own labels: the request's from its arrival, the response's added to what is measured
    once it is answered."""

    def __init__(self, metrics: Metrics, binding: str, clock: Any,
                 attributes: BindingAttributes | None = None) -> None:
        self.clock = clock  # an IReactorTime
        self.metrics = metrics
        self.binding = binding
        self.attributes = attributes if attributes else None
        if self.attributes is None:  # else every series has labels: none is made without them
            self.active = metrics.gauge("http.active.requests", binding)
            self.request_size = metrics.histogram("http.request.size", binding)
            self.response_size = metrics.histogram("http.response.size", binding)
            self.duration = metrics.histogram("http.duration", binding)

    def started(self, request: Request) -> None:
        req: Any = request  # twisted.web is untyped for mypy
        length = req.getHeader(b"content-length")
        size = float(length) if length and length.isdigit() else 0.0
        if self.attributes is None:
            self.active.value += 1
            self.request_size.observe(size)
            req.http_began = self.clock.seconds()
            when_over(req, self)
            return
        labels = self.attributes.of_request(req)
        active = self.metrics.gauge("http.active.requests", self.binding, attributes=labels)
        active.value += 1
        self.metrics.histogram("http.request.size", self.binding, attributes=labels).observe(size)
        req.notifyFinish().addBoth(self._finished_labelled, req, self.clock.seconds(), labels,
                                   active)

    def request_over(self, request: Any, result: object) -> None:
        """Finished or cut off: either way the request is over (the failure is not ours). The
        request carries when it began (`http_began`): no closure or Deferred per request."""
        self.active.value -= 1
        self.response_size.observe(float(request.sentLength))
        self.duration.observe((self.clock.seconds() - request.http_began) * 1000.0)

    def _finished_labelled(self, _: object, request: Any, began: float,
                           labels: dict[str, str], active: Gauge) -> None:
        assert self.attributes is not None
        active.value -= 1
        labels = {**labels, **self.attributes.of_response(request)}
        self.metrics.histogram("http.response.size", self.binding, attributes=labels).observe(
            float(request.sentLength))
        self.metrics.histogram("http.duration", self.binding, attributes=labels).observe(
            (self.clock.seconds() - began) * 1000.0)


class HttpRoot(Resource):
    """The only resource of the Site: every request is routed by its headers, not by a tree."""

    isLeaf = True

    def __init__(self, name: str, routes: Sequence[HttpRoute], default: HttpBinding | None,
                 cors: AccessControl, events: EventLog,
                 authorization: Authorization | None = None,
                 stats: HttpStats | None = None, health: HealthPaths | None = None,
                 siblings: Siblings | None = None, clock: Any = None,
                 requests: Requests | None = None) -> None:
        super().__init__()
        #: `options.requests`: what requests must be before an exit sees them (validation/).
        self.requests = requests
        self.stats = stats
        self.health = health
        self.name = name
        self.routes = list(routes)
        self.default = default
        self.cors = cors
        self.events = events
        self.authorization = authorization
        #: The renewal requests, whose reach includes the daemon's other workers (`siblings`).
        self.renewals = (Renewals(name, authorization, siblings) if authorization is not None
                         else None)
        #: The answered event of each request (its clock: the stats' when none is given).
        self.access = AccessLog(name, events, clock if clock is not None else
                                (stats.clock if stats is not None else None), self.logged)
        #: The exits whose paths may carry secrets of their own, for `logged`.
        exits = [r.exit for r in self.routes] + ([default] if default is not None else [])
        self.redactors = list({id(e): e for e in exits if isinstance(e, RedactsPaths)}.values())
        if stats is not None and stats.attributes is not None:
            stats.attributes.redact = self.logged  # a path label shows no more than a log line

    #: `options.alt-svc` as the header's value (`h3=":7443"; ma=86400`), or None: not sent.
    alt_svc: bytes | None = None

    def render(self, request: Request) -> bytes | int:
        request.setHeader(b"server", SERVER_NAME)
        if self.alt_svc is not None:
            request.setHeader(b"alt-svc", self.alt_svc)
        if self.health is not None:
            probe = self.health.answer(request)
            if probe is not None:
                return probe
        if self.stats is not None:
            self.stats.started(request)
        if self.access.on:
            self.access.watch(request, getattr(request, "access_began", None)
                              or self.access.clock.seconds())
        headers = request_headers(request)
        if self.events.stdout is not None:
            self.events.emit(self.name, "BINDING_HTTP_REQUEST_ACCEPTED",
                             f"- {headers[':method']} {headers[':scheme']}://"
                             f"{headers[':authority']}{self.logged(headers[':path'])}")
        origin = request.getHeader(b"origin")
        if origin is not None:
            if not self.cors.allows(origin.decode("latin-1"), headers[":scheme"],
                                    headers[":authority"]):
                request.setResponseCode(http.FORBIDDEN)
                return b""
            if self.cors.cross_origin and self.cors.is_preflight(request):
                return self.cors.answer_preflight(request, origin)
        renewals = self.renewals
        if renewals is not None and is_renewal(request):
            if origin is not None:
                self.cors.decorate(request, origin)
            return self._settle(request, renewals.authorization.verdicts(request),
                                lambda verdicts: renewals.answer(request, verdicts))
        found = self._routed(request, headers)
        if found is None:
            request.setResponseCode(http.NOT_FOUND)
            return b""
        target, params, guarded = found
        req: Any = request
        req.answered_by = exit_label(target)
        if origin is not None:
            self.cors.decorate(request, origin)
        verdicts = self.authorization.verdicts(request) if self.authorization else {}
        return self._settle(request, verdicts,
                            lambda verdicts: self._dispatch(request, target, params, guarded,
                                                            verdicts))

    def logged(self, uri: str) -> str:
        """`uri` as a log line may show it: credentials, JWT-shaped text and what an exit
        says is secret in its paths hidden."""
        for exit_ in self.redactors:
            uri = exit_.redact_path(uri)
        if self.authorization is not None:
            return self.authorization.redact(uri)
        return redact_uri(uri)

    # -- authorization --------------------------------------------------------------------

    def _settle(self, request: Request, verdicts: Verdicts,
                then: Callable[[Mapping[str, Session | Refusal]], bytes | int]) -> bytes | int:
        """`then(verdicts)` now, or - when a guard is still fetching keys - once it answers,
        finishing the request with what `then` returns."""
        if not any(isinstance(v, defer.Deferred) for v in verdicts.values()):
            return then(verdicts)  # type: ignore[arg-type]  # no Deferred left
        answer_later(request, settled(verdicts).addCallback(then), self.logged)
        return NOT_DONE_YET

    def _split(self, request: Request,
               verdicts: Mapping[str, Session | Refusal]) -> HttpContext:
        ctx = HttpContext(binding=self.name)
        if self.authorization is not None:
            ctx.credential_query = self.authorization.query_names
            ctx.credential_headers = self.authorization.header_names
        ctx.sessions.update(connection_sessions(request))
        for guard, verdict in verdicts.items():
            if isinstance(verdict, Refusal):
                ctx.refusals[guard] = verdict
            else:
                ctx.sessions[guard] = verdict
        return ctx

    def _dispatch(self, request: Request, target: HttpBinding, params: Mapping[str, str],
                  guarded: Mapping[str, tuple[str, ...]],
                  verdicts: Mapping[str, Session | Refusal]) -> bytes | int:
        ctx = self._split(request, verdicts)
        ctx.params = params
        denied = ctx.authorize(guarded)
        if denied is not None:
            return self._refuse(request, target, ctx, *denied)
        # a lease renews the request's own tokens, never its connection's certificate
        own = {g: s for g, s in ctx.sessions.items() if g in verdicts}
        if own and self.authorization is not None:
            ctx.lease = self.authorization.lease(request, own)
        if self.requests is None:
            return target.render(request, ctx)
        verdict = self._validate(request)
        if verdict is None:
            return target.render(request, ctx)
        if isinstance(verdict, Refused):
            return self._invalid(request, target, verdict)

        def settled_(refused: Refused | None) -> bytes | int:
            if refused is None:
                return target.render(request, ctx)
            return self._invalid(request, target, refused)
        answer_later(request, verdict.addCallback(settled_), self.logged)
        return NOT_DONE_YET

    # -- validation (`options.requests`) ----------------------------------------------------

    def _validate(self, request: Request) -> Refused | None | defer.Deferred[Refused | None]:
        """Whether the request is what its entry of `options.requests` says: None (it is, or
        no entry names it), the `Refused` answer, or a Deferred of either while a catalog is
        asked for a schema."""
        assert self.requests is not None
        req: Any = request  # twisted.web is untyped for mypy
        method = bytes(req.method).decode("latin-1")
        path = bytes(req.uri).decode("latin-1")
        content_type = req.getHeader(b"content-type")
        try:
            entry = self.requests.select(
                method, path, content_type.decode("latin-1") if content_type else None)
        except Refused as refused:
            return refused
        if entry is None:
            return None
        pairs = [(name.decode("latin-1"), value)
                 for name, values in req.requestHeaders.getAllRawHeaders() for value in values]
        body = b""
        if entry.content is not None and req.content is not None:
            req.content.seek(0)
            body = req.content.read()
            req.content.seek(0)  # the exit reads it again

        def check() -> None:
            entry.check_head(path, pairs)
            entry.check_content(body)
        return settle(check, self.access.clock or _reactor())

    def _invalid(self, request: Request, target: HttpBinding, refused: Refused) -> bytes:
        """A request its entry refuses: its status and a line saying why (validation/)."""
        if self.events.stdout is not None:
            req: Any = request
            self.events.emit(self.name, "BINDING_HTTP_REQUEST_INVALID",
                             f"- {bytes(req.method).decode('latin-1')} "
                             f"{self.logged(bytes(req.uri).decode('latin-1'))}: "
                             f"{refused.status} {refused.reason}")
        if refused.status == http.SERVICE_UNAVAILABLE:
            if isinstance(target, TemporaryRefusals):
                return target.answer_unavailable(request, refused.reason,
                                                 float(retry_after(refused)))
            request.setHeader(b"Retry-After", retry_after(refused))
        request.setResponseCode(refused.status)
        body = refusal_body(refused)
        request.setHeader(b"content-type", b"text/plain; charset=utf-8")
        request.setHeader(b"content-length", b"%d" % len(body))
        return body

    def _refuse(self, request: Request, target: HttpBinding, ctx: HttpContext, guard: str,
                refusal: Refusal) -> bytes:
        """A request its route's `guarded` does not let through (module docstring)."""
        runtime = self.authorization.guards.get(guard) if self.authorization else None
        if guard in ctx.sessions or isinstance(runtime, CertificateGuard):
            # Good credentials without the roles, or none from a guard whose credentials come
            # with the connection (a client certificate): no route for it, as in Zilla.
            if guard in ctx.sessions and runtime is not None:
                runtime.report(refusal.reason)
            request.setResponseCode(http.NOT_FOUND)
            return b""
        return answer_refusal(request, target, guard, refusal, self.authorization)

    def renew_for_sibling(self, host: str, tokens: Mapping[str, str]
                          ) -> defer.Deferred[dict[str, Renewal]]:
        """A renewal that a sibling worker got from client `host` (`Renewals.for_sibling`)."""
        if self.renewals is None:
            return defer.succeed({})
        return self.renewals.for_sibling(host, tokens)

    def takes_body(self, request: Request, method: bytes, uri: bytes) -> bool:
        """Whether the exit this request head routes to reads request bodies (`BodyRoutes`).
        The route is carried on the request (`http_route`) for `render`.

        No route (`404`) takes none, and CORS does not matter here: a refused origin gets its
        `403` from `render` like any request whose body is not read."""
        found = self._route(head_headers(request, method, uri))
        req: Any = request  # twisted.web is untyped for mypy
        req.http_route = found
        if self.access.on:
            req.access_began = self.access.clock.seconds()
        if found is None:
            return False
        if self.requests is not None:
            content_type = req.getHeader(b"content-type")
            if self.requests.reads_body(method.decode("latin-1"), uri.decode("latin-1"),
                                        content_type.decode("latin-1") if content_type
                                        else None):
                return True  # checked before the exit sees the request, whatever it reads
        return found[0].takes_body

    def refused(self, request: Request, status: int, method: bytes = b"", uri: bytes = b"",
                version: bytes = b"") -> None:
        """A request the connection answered `status` before it reached `render` (a body over
        `limits.body-bytes`): its answered event (`BodyRoutes`), with the method and target
        the connection read."""
        self.access.refused(request, status, getattr(request, "access_began", None), method,
                            uri, version)

    def _routed(self, request: Request, headers: dict[str, str]) -> Routed:
        """The route decided when the head came in, else (the channel did not ask: no body
        was announced) decided now from `headers`."""
        req: Any = request
        found: Routed = getattr(req, "http_route", NOT_ROUTED)
        if found is NOT_ROUTED:
            return self._route(headers)
        req.http_route = NOT_ROUTED  # not held for the life of a stream
        return found

    def _route(self, headers: dict[str, str]) -> Routed:
        """The exit, captures and `guarded` roles of the first route matching `headers`, else
        the default exit (unguarded)."""
        for route in self.routes:
            params = match_any(route.conditions, headers)
            if params is not None:
                return route.exit, params, route.guarded
        if self.default is None:
            return None
        return self.default, {}, {}


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
        return h2c.protocol_for(self.site, self.versions, conn)

    def quic_session(self, conn: ConnectionInfo, transport: QuicTransport) -> QuicSession:
        """HTTP/3 over a connection a quic server accepted (`h3.H3Session`): the same site,
        routes and limits as the connections `build_protocol` takes. Imported here: a daemon
        without a quic binding never loads aioquic."""
        from ssekd.bindings.http.h3 import H3Session
        return H3Session(self.site, self.site.limits, conn, transport, routes=self.site.root)

    def renew_for_sibling(self, host: str, tokens: Mapping[str, str]
                          ) -> defer.Deferred[dict[str, Renewal]]:
        """See `HttpRoot.renew_for_sibling` (`ssekd.workers.siblings` calls it)."""
        return self.site.root.renew_for_sibling(host, tokens)


def _reactor() -> Any:
    from twisted.internet import reactor
    return reactor


def exit_label(target: object) -> str:
    """The name of the binding an http route leads to, for the access event."""
    for attribute in ("name", "binding"):
        value = getattr(target, attribute, None)
        if isinstance(value, str) and value:
            return value
    return type(target).__name__
