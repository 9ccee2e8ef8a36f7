"""The roles the http binding offers: `HttpBinding`, what an http server's exit provides (it is
handed each routed request with its `HttpContext`), `HttpClientBinding`, what an http
client provides the bindings that send requests upstream, and `HttpServerBinding`, the http
server itself: behind a tcp or tls server (HTTP/1.1, HTTP/2) and behind a quic server (HTTP/3).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from twisted.internet.defer import Deferred
from twisted.web.iweb import IResponse
from twisted.web.server import Request

from ssekd.spi.connection import QuicSessionBinding, StreamBinding
from ssekd.spi.guard import Lease, Refusal, Session


@dataclass
class HttpContext:
    """Per-request facts decided by the http binding, handed to its exit."""

    binding: str
    params: Mapping[str, str] = field(default_factory=dict)
    #: guard name -> authenticated session, when the request carried credentials for a guard
    #: named in the http binding's `options.authorization`.
    sessions: dict[str, Session] = field(default_factory=dict)
    #: guard name -> why the credentials the request carried for it were refused.
    refusals: dict[str, Refusal] = field(default_factory=dict)
    #: The lease a long-lived response holds while open (set when there are sessions).
    lease: Lease | None = None
    #: The query parameters the http binding's `authorization` reads tokens from: whatever a
    #: route says, their values are never passed on (an upstream URL) nor logged.
    credential_query: frozenset[str] = frozenset()
    #: The request headers (lower case) it reads tokens from: never copied into a record.
    credential_headers: frozenset[str] = frozenset()

    def identities(self) -> dict[str, str]:
        """guard name -> identity, for the guards whose session names one."""
        return {g: s.identity for g, s in self.sessions.items() if s.identity is not None}

    def authorize(self, guarded: Mapping[str, Collection[str]]) -> tuple[str, Refusal] | None:
        """The first guard of a route's `guarded` whose requirement this request misses, and
        why; None when it meets them all. Every listed role is required."""
        for guard, roles in guarded.items():
            session = self.sessions.get(guard)
            if session is None:
                refusal = self.refusals.get(guard) or Refusal(401, "no credentials")
                return guard, refusal
            missing = sorted(set(roles) - session.roles)
            if missing:
                return guard, Refusal(403, f"{session.identity or 'token'} lacks role(s) "
                                           f"{' '.join(missing)}")
        return None


@runtime_checkable
class TemporaryRefusals(Protocol):
    """An http exit that answers temporary refusals its own way (an SSE stream: a `200` that
    ends at once with `retry:`, so the browser comes back instead of giving up on a `503`).
    Other exits get `503` with `Retry-After`."""

    def answer_unavailable(self, request: Request, reason: str, retry_after: float) -> bytes: ...


@runtime_checkable
class HttpBinding(Protocol):
    """Answers requests routed to it by the http server.

    `render` behaves like `twisted.web.resource.Resource.render`: return the body bytes, or
    `twisted.web.server.NOT_DONE_YET` and finish the request later.
    """

    @property
    def max_idle(self) -> float | None:
        """Seconds a response of this binding may stay quiet (keepalive interval), or None when
        it holds no long-lived responses. The http binding refuses one its idle timeout would
        cut."""

    @property
    def takes_body(self) -> bool:
        """Whether requests routed here may carry a body. When False, the http binding hands a
        request that comes with one on at once, without reading the body, and closes the
        connection after the answer (HTTP/1.1) or resets the stream (HTTP/2)."""

    def render(self, request: Request, ctx: HttpContext) -> bytes | int: ...


@runtime_checkable
class RedactsPaths(Protocol):
    """An http exit whose paths may carry a secret of its own (http-kafka's async locations):
    the http binding shows a path through `redact_path` wherever it logs one."""

    def redact_path(self, uri: str) -> str: ...


@runtime_checkable
class HttpClientBinding(HttpBinding, Protocol):
    """Sends requests to one upstream HTTP server (http client): an sse client's streams
    (`get`), and, as an http server's exit, any request routed to it (`render`)."""

    @property
    def origin(self) -> str:
        """`scheme://host:port` of the upstream, for events and `Host`."""

    def get(self, target: str, headers: Mapping[str, str]) -> Deferred[IResponse]:
        """`GET target` (path and query) upstream with `headers` (after the binding's own
        `overrides`). Fires with Twisted's `IResponse` once the response headers are in, or
        fails; cancelling it before then aborts the connection."""


@runtime_checkable
class HttpServerBinding(StreamBinding, QuicSessionBinding, Protocol):
    """An http server: it takes connections a tcp or tls server accepted, and QUIC connections
    a quic server accepted, into the same routes."""
