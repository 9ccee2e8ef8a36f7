"""http client (docs/config-reference.md): requests to the upstream its exit (a tcp client, or a
tls client for `https`) connects to.

Two uses. An sse client's event streams (`get`): each gets an HTTP/1.1 connection of its own
(Twisted's `Agent`, no pool), since a stream lives long and an idle pooled connection would only
hold a socket. And an http server's routes (`render`, the http client as a reverse proxy, as in
Zilla's http.proxy): any method, path and query, the request's end-to-end headers and body, and
the upstream's status, headers and body back (`proxying.Relay`), over a bounded pool:

- HTTP/2 (`upstream_h2`) when the tls client's ALPN negotiates `h2` (with `h2` among
  `versions`), or when `versions` is `[h2]` alone (prior knowledge, over TLS or cleartext, as
  Zilla does); requests share a connection.
- over cleartext with both `versions` (Zilla's default), a new connection's first request
  offers `Upgrade: h2c` (`upstream_h2c`): HTTP/2 from then on when the upstream switches,
  HTTP/1.1 for good when it declines;
- HTTP/1.1 otherwise, on persistent connections (`Agent` with `HTTPConnectionPool`): at most
  `MAX_H1_CONNECTIONS` requests at once, later ones wait their turn.

Over TLS, HTTP/1.1 connections never offer `h2` by ALPN (the upstream could pick it); a server
that answers an `h2` offer without choosing it is remembered as HTTP/1.1.

The request body goes up once the http server has read it whole (its `limits.body-bytes`
bounds it): Twisted's server hands a request on only then. Responses stream back as they come.

Headers: the request's own, less the hop-by-hop ones (`exchange.HOP_BY_HOP`); `Host` (HTTP/1.1)
or `:authority` (HTTP/2) is the client's, as Zilla passes it on; `overrides` are set on every
request, `:authority` among them replacing it. For `get`, `Host` is the tcp client's
`host:port` unless `overrides` say otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from io import BytesIO
from typing import Any

from twisted.application.service import Service
from twisted.internet import error
from twisted.internet.defer import CancelledError, Deferred, DeferredSemaphore
from twisted.internet.protocol import Factory
from twisted.internet.protocol import Protocol as TwistedProtocol
from twisted.python.failure import Failure
from twisted.web.client import (
    Agent,
    FileBodyProducer,
    HTTPConnectionPool,
    ResponseDone,
    ResponseFailed,
    ResponseNeverReceived,
)
from twisted.web.http import PotentialDataLoss
from twisted.web.http_headers import Headers
from twisted.web.server import NOT_DONE_YET, Request

from ssekd.bindings.http.exchange import ResponseSink, UpstreamRequest, end_to_end
from ssekd.bindings.http.proxying import Relay
from ssekd.bindings.http.response_check import ResponseCheck
from ssekd.bindings.http.roles import HttpContext
from ssekd.bindings.http.upstream_h2 import H2Pool, H2Upstream
from ssekd.bindings.http.upstream_h2c import H2cUpgrades
from ssekd.spi.connection import Connector, NegotiatingConnector
from ssekd.telemetry.events import EventLog

#: HTTP/1.1 requests in flight at once toward one upstream (each holds a connection).
MAX_H1_CONNECTIONS = 32
#: Idle HTTP/1.1 connections kept for the next requests.
MAX_IDLE_H1_CONNECTIONS = 8
#: HTTP/2 connections to one upstream (another opens when its stream limit is reached).
MAX_H2_CONNECTIONS = 4
#: Seconds the upstream has to connect and answer a request's head before the client gets `504`.
ANSWER_TIMEOUT = 60.0


def authority(host: str, port: int, secure: bool) -> str:
    """`host:port` as a `Host` header writes it: IPv6 in brackets, the scheme's port left out."""
    shown = f"[{host}]" if ":" in host else host
    return shown if port == (443 if secure else 80) else f"{shown}:{port}"


class _Quiet:
    """An endpoint that connects its factories with `noisy` off: Agent's factory would log two
    lines per upstream connection (starting, stopping), the relay's events say what matters."""

    def __init__(self, endpoint: Any) -> None:
        self.endpoint = endpoint

    def connect(self, factory: Any) -> Deferred[Any]:
        factory.noisy = False
        d: Deferred[Any] = self.endpoint.connect(factory)
        return d


class _OneEndpoint:
    """Agent's endpoint factory: every URI goes where the exit connects (the URI only carries
    the path and the `Host`), over HTTP/1.1."""

    def __init__(self, client: HttpClient) -> None:
        self.client = client

    def endpointForURI(self, uri: Any) -> Any:
        return _Quiet(self.client.h1_endpoint())


class HttpClient(Service):
    """Runtime of an http client: `get` for an sse client's streams, `render` for an http
    server's routes (module docstring). A service so that stopping it (shutdown, or a reload
    that replaces it) closes its pooled upstream connections."""

    #: Answers end when the upstream's do; none is held open by the client itself.
    max_idle: float | None = None
    #: Any method, with its body.
    takes_body = True

    def __init__(self, name: str, reactor: Any, connector: Connector,
                 overrides: Mapping[str, str], versions: Sequence[str] = ("http/1.1",),
                 events: EventLog | None = None,
                 response_check: ResponseCheck | None = None) -> None:
        assert connector.address is not None  # checked when built
        self.name = name
        self.binding = name  # Service.name is Optional; events need the binding's name
        self.reactor = reactor
        self.connector = connector
        self.events = events if events is not None else EventLog(name)
        #: Checks responses before they are relayed (`response_check`); None: none is held.
        self.response_check = response_check
        host, port = connector.address
        scheme = "https" if connector.secure else "http"
        self.scheme = scheme
        self.host = overrides.get(":authority") or authority(host, port, connector.secure)
        self.authority_override = overrides.get(":authority")
        self.origin = f"{scheme}://{authority(host, port, connector.secure)}"
        self.headers = {k: v for k, v in overrides.items() if not k.startswith(":")}
        self.versions = tuple(versions)
        offered = connector.alpn if isinstance(connector, NegotiatingConnector) else ()
        #: ALPN offers of HTTP/1.1 connections: never `h2`.
        self._h1_offer = tuple(p for p in offered if p != "h2")
        self._alpn_offers_h2 = "h2" in offered
        self.h2: H2Pool | None = None
        self.h2c: H2cUpgrades | None = None
        if "h2" in self.versions:
            prior = self.versions == ("h2",)
            if prior or (connector.secure and self._alpn_offers_h2):
                self.h2 = H2Pool(self._connect_h2, scheme.encode("ascii"), prior,
                                 MAX_H2_CONNECTIONS)
            elif not connector.secure:
                self.h2c = H2cUpgrades(self._connect_h2, self._declined, MAX_H2_CONNECTIONS)
        #: Set when the upstream answered an `h2` offer without choosing it.
        self.speaks_h1_only = False
        stream_pool = HTTPConnectionPool(reactor, persistent=False)
        self._stream_agent = Agent.usingEndpointFactory(reactor, _OneEndpoint(self),
                                                        pool=stream_pool)
        pool = self._agent_pool = HTTPConnectionPool(reactor, persistent=True)
        pool.maxPersistentPerHost = MAX_IDLE_H1_CONNECTIONS
        # Twisted sends a request again, once, only when a reused connection turned out closed
        # before it was answered, and only an idempotent one without a body: kept.
        self._agent = Agent.usingEndpointFactory(reactor, _OneEndpoint(self), pool=pool)
        self._h1_slots = DeferredSemaphore(MAX_H1_CONNECTIONS)

    # -- connections -----------------------------------------------------------------------

    def h1_endpoint(self) -> Any:
        """Where HTTP/1.1 connections go: over TLS, offering no `h2`."""
        connector = self.connector
        if isinstance(connector, NegotiatingConnector) and self._alpn_offers_h2:
            return connector.endpoint_offering(self._h1_offer)
        return connector.endpoint()

    def _connect_h2(self, factory: Factory[Any]) -> Deferred[Any]:
        d: Deferred[Any] = self.connector.endpoint().connect(factory)
        return d

    # -- an sse client's streams -----------------------------------------------------------

    def get(self, target: str, headers: Mapping[str, str]) -> Deferred[Any]:
        raw = Headers()
        for name, value in {**headers, **self.headers}.items():
            raw.setRawHeaders(name.encode("latin-1"), [value.encode("latin-1")])
        raw.setRawHeaders(b"Host", [self.host.encode("latin-1")])
        d: Deferred[Any] = self._stream_agent.request(
            b"GET", (self.origin + target).encode("ascii"), raw)
        return d

    # -- an http server's requests (HttpBinding) -------------------------------------------

    def render(self, request: Request, ctx: HttpContext) -> bytes | int:
        req: Any = request  # twisted.web is untyped for mypy
        upstream = self.upstream_request(req)
        describe = f"{upstream.method.decode('latin-1')} {self.origin}" \
                   f"{upstream.path.decode('latin-1')}"
        relay = Relay(self.binding, request, upstream.method.decode("latin-1"),
                      upstream.path.decode("latin-1"), self.events, self.response_check,
                      describe)
        self.send(upstream, relay)
        return NOT_DONE_YET

    def upstream_request(self, request: Any) -> UpstreamRequest:
        """What goes upstream for downstream `request` (module docstring)."""
        raw = [(bytes(n).lower(), bytes(v)) for n, vs in request.requestHeaders.getAllRawHeaders()
               for v in vs]
        host = next((v for n, v in raw if n == b"host"), None)
        # `Expect: 100-continue` was the http server's to answer: the body is in already
        kept = [(n, v) for n, v in end_to_end(raw)
                if n not in (b"host", b"content-length", b"expect")]
        if self.headers:
            names = {k.lower().encode("latin-1") for k in self.headers}
            kept = [(n, v) for n, v in kept if n not in names]
            kept += [(k.lower().encode("latin-1"), v.encode("latin-1"))
                     for k, v in self.headers.items()]
        if self.authority_override:
            authority_ = self.authority_override.encode("latin-1")
        elif host:
            authority_ = host
        else:
            authority_ = self.host.encode("latin-1")
        content = request.content
        body = b""
        if content is not None:
            content.seek(0)
            body = content.read()
        return UpstreamRequest(bytes(request.method), bytes(request.uri), authority_,
                               tuple(kept), body)

    def send(self, upstream: UpstreamRequest, relay: Relay) -> None:
        """Start `upstream` over HTTP/2 or HTTP/1.1 (module docstring); `relay` hears the
        answer, or `504` after `ANSWER_TIMEOUT` without a response head."""
        sink = _Timed(relay, self.reactor, ANSWER_TIMEOUT)
        if self.h2 is not None and not self.speaks_h1_only:
            acquired = self.h2.acquire()
            sink.pending = acquired

            def start(connection: H2Upstream | None) -> None:
                sink.pending = None
                if sink.over:
                    return
                if connection is None:  # ALPN chose HTTP/1.1
                    self.speaks_h1_only = True
                    self._send_h1(upstream, sink, relay)
                    return
                relay.attach(connection.start(upstream, sink))

            acquired.addCallbacks(start, lambda f: sink.failed(why(f)))
            return
        if self.h2c is not None and not self.speaks_h1_only:
            connection = self.h2c.with_room()
            if connection is not None:
                relay.attach(connection.start(upstream, sink))
                return
            if self.h2c.can_attempt():
                relay.attach(self.h2c.attempt(upstream, sink, lambda f: sink.failed(why(f))))
                return
        self._send_h1(upstream, sink, relay)

    def _declined(self) -> None:
        """The cleartext upstream answered an `Upgrade: h2c` offer without switching."""
        self.speaks_h1_only = True

    def _send_h1(self, upstream: UpstreamRequest, sink: _Timed, relay: Relay) -> None:
        slot = self._h1_slots.acquire()
        sink.pending = slot
        sink.release = self._h1_slots.release

        def go(_: object) -> None:
            sink.pending = None
            sink.holding = True
            if sink.over:
                sink.let_go()
                return
            headers = Headers()
            for name, value in upstream.headers:
                headers.addRawHeader(name, value)
            headers.setRawHeaders(b"host", [upstream.authority])
            body = None
            if upstream.body or upstream.method in (b"POST", b"PUT", b"PATCH"):
                body = FileBodyProducer(BytesIO(upstream.body), cooperator=_Immediate())
            d = self._agent.request(upstream.method, (self.origin).encode("ascii")
                                    + upstream.path, headers, body)
            call = H1Call(d, sink, upstream.method == b"HEAD")
            relay.attach(call)

        slot.addCallbacks(go, lambda f: sink.failed(why(f)))

    def stopService(self) -> Deferred[None] | None:
        super().stopService()
        if self.h2 is not None:
            self.h2.close()
        if self.h2c is not None:
            self.h2c.close()
        closed: Deferred[None] = self._agent_pool.closeCachedConnections()
        return closed


class _Immediate:
    """A cooperator for `FileBodyProducer` that writes the whole body at once: it is in
    memory already (the http server read it), so there is nothing to spread over turns."""

    def cooperate(self, iterator: Any) -> Any:
        for _ in iterator:
            pass
        return _Done()


class _Done:
    def whenDone(self) -> Deferred[None]:
        d: Deferred[None] = Deferred()
        d.callback(None)
        return d

    def pause(self) -> None:
        pass

    def resume(self) -> None:
        pass

    def stop(self) -> None:
        pass


class _Timed:
    """A `ResponseSink` in front of the relay: `504` when the head takes over `timeout`
    seconds, and the HTTP/1.1 slot given back once the answer is over."""

    def __init__(self, relay: Relay, reactor: Any, timeout: float) -> None:
        self.relay = relay
        self.over = False
        self.pending: Deferred[Any] | None = None
        self.holding = False
        self.release: Any = None
        self._timer: Any = reactor.callLater(timeout, self._timed_out)
        relay.request.notifyFinish().addBoth(lambda _: self._gone())

    def _gone(self) -> None:
        if self.pending is not None:
            pending, self.pending = self.pending, None
            self.over = True
            pending.cancel()
        self._stop_timer()
        if self.relay.done:
            self.over = True
            self.let_go()

    def _stop_timer(self) -> None:
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = None

    def _timed_out(self) -> None:
        self._timer = None
        call = self.relay.call
        if call is not None:
            call.cancel()
        self.failed("timeout")

    def let_go(self) -> None:
        if self.holding and self.release is not None:
            self.holding = False
            self.release()

    def head(self, status: int, headers: list[tuple[bytes, bytes]]) -> None:
        self._stop_timer()
        if not self.over:
            self.relay.head(status, headers)

    def data(self, chunk: bytes) -> None:
        if not self.over:
            self.relay.data(chunk)

    def end(self) -> None:
        self._stop_timer()
        if not self.over:
            self.over = True
            self.relay.end()
        self.let_go()

    def failed(self, why: str) -> None:
        self._stop_timer()
        if not self.over:
            self.over = True
            self.relay.failed(why)
        self.let_go()


class _H1Body(TwistedProtocol):
    """Reads one HTTP/1.1 response body into a sink (`IResponse.deliverBody`); its transport
    is the connection's producer (pause, resume, stop)."""

    transport: Any

    def __init__(self, sink: ResponseSink) -> None:
        self.sink: ResponseSink | None = sink

    def dataReceived(self, data: bytes) -> None:
        if self.sink is not None:
            self.sink.data(data)

    def connectionLost(self, reason: Failure = Failure(ResponseDone())) -> None:
        sink, self.sink = self.sink, None
        if sink is None:
            return
        if reason.check(ResponseDone, PotentialDataLoss):
            sink.end()  # PotentialDataLoss: a body ended by closing the connection
        else:
            sink.failed("reset")


class H1Call:
    """One request on an HTTP/1.1 connection (an `UpstreamCall`)."""

    def __init__(self, sent: Deferred[Any], sink: ResponseSink, head_request: bool = False) -> None:
        self.head_request = head_request
        self.sent: Deferred[Any] | None = sent
        self.sink = sink
        self.body: _H1Body | None = None
        sent.addCallbacks(self._response, self._failed)

    def _response(self, response: Any) -> None:
        self.sent = None
        headers = [(bytes(n), bytes(v)) for n, vs in response.headers.getAllRawHeaders()
                   for v in vs]
        # Twisted keeps the framing headers to itself: the length it read is passed on, so the
        # client gets the body framed as the upstream framed it (not chunked).
        if isinstance(response.length, int) and not self.head_request:
            headers.append((b"content-length", str(response.length).encode("ascii")))
        self.sink.head(int(response.code), headers)
        self.body = _H1Body(self.sink)
        response.deliverBody(self.body)

    def _failed(self, reason: Failure) -> None:
        self.sent = None
        if not reason.check(CancelledError):
            self.sink.failed(why(reason))

    def pause(self) -> None:
        if self.body is not None and self.body.transport is not None:
            self.body.transport.pauseProducing()

    def resume(self) -> None:
        if self.body is not None and self.body.transport is not None:
            self.body.transport.resumeProducing()

    def cancel(self) -> None:
        if self.sent is not None:
            sent, self.sent = self.sent, None
            sent.cancel()
        elif self.body is not None:
            body, self.body = self.body, None
            body.sink = None
            if body.transport is not None:
                body.transport.stopProducing()


def why(reason: Failure) -> str:
    """A short reason for a failed upstream request, for the event: `refused`, `unreachable`,
    `timeout`, `tls` or `reset`."""
    failures = [reason]
    if reason.check(ResponseNeverReceived, ResponseFailed):
        failures = list(getattr(reason.value, "reasons", ())) or failures
    for failure in failures:
        if failure.check(error.ConnectionRefusedError):
            return "refused"
        if failure.check(error.TimeoutError, error.TCPTimedOutError):
            return "timeout"
        if failure.check(error.DNSLookupError, error.NoRouteError):
            return "unreachable"
        if type(failure.value).__module__.startswith(("OpenSSL", "service_identity")):
            return "tls"
    return "reset"
