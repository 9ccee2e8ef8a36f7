"""The binding contract: what a binding type declares, what it may use while it is built, and
what the runtime objects of each role offer the bindings that exit to them.

A binding *type* (tcp, tls, http, ...) is one module that exposes `BINDING`, a `BindingType`,
registered under the `ssekd.bindings` entry point group (see `ssekd.bindings.registry`). For each
`kind` it says, in a `KindSpec`, the JSON Schema of its `options`, of one `when` condition and of
`with`, whether it takes an `exit` and a `vault`, which `Role` its runtime object plays and which
roles its exits must play. The config loader composes the schema from these and checks every
exit's role; `ssekd.engine` builds the graph. Nothing else in the tree needs a type's name.

This module is a leaf: it imports nothing of ssekd but the config model, its errors, the event
log and the metrics (`ssekd.telemetry` leaf modules), so every binding, the engine and the
config loader can import it without an import circle.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar, runtime_checkable

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IAddress, IDelayedCall, IProtocol
from twisted.web.server import Request

from ssekd.config.errors import ConfigIssue
from ssekd.config.model import Binding, Config
from ssekd.config.model import Guard as GuardConfig
from ssekd.health import Check, Health
from ssekd.telemetry.events import EventLog
from ssekd.telemetry.metrics import Metrics

JsonSchema = Mapping[str, Any]


class Role(enum.Enum):
    """The layers of the binding graph, outermost first; each has its protocol below."""

    #: owns listening sockets (tcp server): `ListenerBinding`
    LISTENER = "listener"
    #: takes over an accepted byte stream (tls, http server): `StreamBinding`
    STREAM = "stream"
    #: answers one routed HTTP request (sse, http-filesystem): `HttpBinding`
    HTTP = "http"
    #: opens the event streams of an sse server (sse-kafka): `StreamSource`
    STREAM_SOURCE = "stream source"
    #: serves files for http-filesystem (filesystem): `FileServing`
    FILES = "files"
    #: per-topic caches that sse-kafka subscribes to (kafka cache_server, cache_client):
    #: `KafkaCache`
    KAFKA_CACHE = "kafka cache"
    #: the connection to the Kafka cluster that caches consume through (kafka client):
    #: `KafkaClientBinding`
    KAFKA_CLIENT = "kafka client"
    #: opens outbound connections (tcp client, tls client): `Connector`
    OUTBOUND = "outbound"
    #: sends requests to one upstream HTTP server (http client): `HttpClientBinding`
    HTTP_CLIENT = "http client"

    def __str__(self) -> str:
        return self.value


class Exit(enum.Enum):
    """Whether a binding (and its routes) may or must name an `exit`."""

    REQUIRED = "required"
    OPTIONAL = "optional"
    NONE = "none"


# -- the reactor and the build context ----------------------------------------------------------


class Reactor(Protocol):
    """The part of Twisted's reactor a binding may use: timers, time, and hand-over from its
    own threads. Tests pass a `twisted.internet.testing.MemoryReactorClock`."""

    def callLater(self, delay: float, callable: Callable[..., Any], *args: Any,
                  **kw: Any) -> IDelayedCall: ...

    def seconds(self) -> float: ...

    def callFromThread(self, callable: Callable[..., Any], *args: Any, **kw: Any) -> None: ...


R = TypeVar("R")


class BuildContext(Protocol):
    """What a binding's `build(ctx, binding)` may use. Exits are built on demand, once."""

    @property
    def config(self) -> Config: ...

    @property
    def reactor(self) -> Reactor: ...

    @property
    def events(self) -> EventLog: ...

    @property
    def metrics(self) -> Metrics:
        """The engine's metrics: a binding takes its instruments here, once, when built."""

    def issue(self, path: tuple[str | int, ...], message: str) -> ConfigIssue:
        """A problem at `path` of the config, with its line, to raise in a `ConfigError`."""

    def exit(self, name: str, role: type[R]) -> R:
        """The runtime object of binding `name`, built once (or kept from before a reload).

        `role` is the protocol the caller needs (e.g. `HttpBinding`); an exit that does not
        provide it is a `ConfigError` naming both bindings, never an `AttributeError` later.
        """

    def guard(self, name: str) -> Guard:
        """The runtime of guard `name` (under `guards`), built once; the config loader has
        already checked that every guard a binding names exists."""

    @property
    def health(self) -> Health:
        """The process's liveness and readiness, for bindings that answer health probes."""

    @property
    def catalogs(self) -> Mapping[str, Any]:
        """The config's schema catalogs (`catalogs.<name>`), built once per config: each an
        `ssekd.catalogs.catalog.Catalog` (typed loosely so that this contract stays a leaf)."""

    @property
    def siblings(self) -> Siblings | None:
        """The other workers of this daemon, or None in a daemon without workers."""


@dataclass(frozen=True)
class KindSpec:
    """One `kind` of a binding type: its config shape and how to build it."""

    role: Role
    build: Callable[[BuildContext, Binding], object]
    options: JsonSchema = field(default_factory=lambda: {"type": "object",
                                                         "additionalProperties": False})
    #: Schema of one item of a route's `when` list; None when this kind has no routes.
    when: JsonSchema | None = None
    #: Schema of a route's `with`; None when routes take no `with`.
    with_: JsonSchema | None = None
    exit: Exit = Exit.NONE
    #: Roles an exit of this binding may play (checked when references are resolved).
    exit_roles: tuple[Role, ...] = ()
    #: Does the binding take a `vault`?
    vault: bool = False
    #: A few words on where a binding of this kind listens or connects, from its options, for
    #: `ssekd check`'s graph (e.g. `0.0.0.0:7114`); None (or "") when there is nothing to say.
    summary: Callable[[Mapping[str, Any]], str] | None = None
    #: The (host, port) servers a binding of this kind connects to, from its options: `make run`
    #: starts the development broker on the local ones where nothing listens. None: no servers.
    connects_to: Callable[[Mapping[str, Any]], list[tuple[str, int]]] | None = None
    #: The topics a binding of this kind consumes from start-up, from its options: `make run`'s
    #: demo producer writes to them. None: none.
    bootstrap_topics: Callable[[Mapping[str, Any]], list[str]] | None = None
    #: For a composite kind (asyncapi): the bindings it stands for, written as a zilla.yaml
    #: would write them. The loader replaces the binding with them before anything is built,
    #: so `build` is never called for it; `role` and `exit_roles` are those of the composed
    #: binding that takes the composite's name (the one its neighbours reach).
    compose: Callable[[ComposeContext, Binding], Composition] | None = None
    #: The (topic, reply-to topic or None) of the records a binding of this kind writes, from
    #: its routes: `make run` starts the demo command service for the todo demo's topics.
    #: None: it writes none.
    produces: Callable[[Binding], list[tuple[str, str | None]]] | None = None


# -- composition ----------------------------------------------------------------------------------

#: A place in a file: (file, line), for errors about what a composed binding came from.
Where = tuple[Path, int | None]


@dataclass(frozen=True)
class Source:
    """Text a composite binding read through a catalog (an AsyncAPI spec), and where its lines
    are, so that a problem in it is reported at its own file and line."""

    text: str
    #: The file a problem is reported in: the schema file of a `filesystem` catalog, the config
    #: itself for an `inline` one, the subject's name for a `schema-registry` one.
    file: Path
    #: The line of `file` that the text's first line is (1 for a file of its own).
    first_line: int = 1
    #: The file to watch for changes (`--watch`), when the text is a file's.
    watch: Path | None = None


class ComposeContext(Protocol):
    """What a composite kind's `compose(ctx, binding)` may use."""

    @property
    def config(self) -> Config:
        """The config as written: composite bindings not composed yet."""

    def issue(self, path: tuple[str | int, ...], message: str) -> ConfigIssue:
        """A problem at `path` of the config as written, with its line."""

    def read(self, catalog: str, subject: str, version: str | int,
             path: tuple[str | int, ...]) -> Source:
        """The text of `subject` at `version` in catalog `catalog`. Raises `ConfigError` at
        `path` (where the config names it) when the catalog cannot give it."""


@dataclass
class Composition:
    """What a composite binding stands for: ordinary bindings (and catalogs), as a zilla.yaml
    would write them, with where each part came from."""

    #: Binding name -> the binding as zilla.yaml writes it. One has the composite's own name:
    #: the one its neighbours reach (exits to it, or the listener that starts its graph).
    bindings: dict[str, dict[str, Any]]
    #: Catalog name -> catalog entry (e.g. the message schemas of a spec, inline).
    catalogs: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: A path in the composed config -> where it came from (a spec's file and line): errors
    #: found later in a composed binding point there, not at generated text.
    where: dict[tuple[str | int, ...], Where] = field(default_factory=dict)
    #: Binding name -> what the composite says of it (`Binding.origin`), e.g. the spec
    #: operation each route stands for, read by the AsyncAPI document.
    origins: dict[str, Any] = field(default_factory=dict)
    #: Files read, for `--watch`.
    sources: list[Path] = field(default_factory=list)
    #: A line for `ssekd check`: what was composed from what.
    summary: str = ""


@dataclass(frozen=True)
class BindingType:
    """What a binding module registers: its type name and its kinds."""

    name: str
    kinds: Mapping[str, KindSpec]


# -- listener -------------------------------------------------------------------------------------


class ConnectionFactory(Protocol):
    def buildProtocol(self, addr: IAddress) -> IProtocol | None: ...


@dataclass(frozen=True)
class ListenSpec:
    """A socket a listener binding wants: `factory.buildProtocol` is called per connection."""

    host: str
    port: int
    factory: ConnectionFactory


@runtime_checkable
class ListenerBinding(Protocol):
    """Role LISTENER: a binding that owns sockets; the engine opens what it asks for."""

    def listen_specs(self) -> list[ListenSpec]: ...


# -- stream ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ConnectionInfo:
    """What the outer layers know about an accepted connection, for routing inside."""

    local: IAddress
    peer: IAddress
    secure: bool = False
    server_name: str | None = None  # TLS SNI
    alpn: str | None = None  # negotiated ALPN protocol


@runtime_checkable
class StreamBinding(Protocol):
    """Role STREAM: takes over an accepted connection (tls, http server)."""

    @property
    def versions(self) -> Collection[str] | None:
        """The ALPN protocols it speaks, or None when it takes any (tls offers only these)."""

    def build_protocol(self, conn: ConnectionInfo) -> IProtocol | None:
        """The protocol for this connection, or None to close it."""


# -- http -----------------------------------------------------------------------------------------


class Session(Protocol):
    """What a guard's authenticated session offers the bindings behind it."""

    @property
    def identity(self) -> str | None:
        """Who the credentials name (the guard's identity claim), for
        `${guarded['guard'].identity}` in a route's `with`; None when they name no one."""

    @property
    def roles(self) -> frozenset[str]:
        """The roles the credentials grant, for a route's `guarded: {guard: [roles]}`."""

    @property
    def expires_at(self) -> float | None:
        """When the credentials stop being valid (epoch seconds, the reactor's clock), or None
        when they never do: a stream they authorize ends then unless it is renewed."""


@dataclass(frozen=True)
class Refusal:
    """Why a request's credentials for one guard do not let it through.

    `status` is what the client is answered: `401` (no credentials), `403` (invalid, or not
    enough), `503` (temporary: the guard cannot check tokens now; try again in `retry_after`
    seconds). `reason` goes into the guard's failure event, never the token itself.
    """

    status: int
    reason: str
    retry_after: float | None = None
    #: Whether the guard already reported it (it reports every token it refuses as it checks).
    reported: bool = False


@dataclass(frozen=True)
class Renewal:
    """What a renewal request did with one guard's session on one worker: the leases it renewed,
    else why none (unreported: the worker that answers the client reports the one it answers)."""

    renewed: int
    refusal: Refusal | None = None
    #: How far matching got before it stopped, to answer the most telling refusal when several
    #: workers tried: 0 no stream of that guard, 1 only another identity's, 2 the identity's
    #: streams but a role dropped; -1 the token itself was refused.
    reach: int = 0


class Siblings(Protocol):
    """The other worker processes of this daemon (`ssekd.siblings`), for what one process would
    know by itself. A daemon without workers has none: `BuildContext.siblings` is None."""

    def renew(self, binding: str, host: str, tokens: Mapping[str, str]
              ) -> Deferred[list[Mapping[str, Renewal]]]:
        """Ask every sibling to renew, with `tokens` (guard -> token), the HTTP/1.1 leases that
        client `host` holds on its http binding `binding`: what each did, per guard. A sibling
        that does not answer in time renewed nothing (it is left out). Never fails."""

    def keys_changed(self, guard: str, kids: Collection[str]) -> None:
        """Tell every sibling that guard `guard` loaded a key set with other key ids: each
        fetches its own (a retired key must stop passing on every worker)."""


@runtime_checkable
class Guard(Protocol):
    """The runtime of a guard (e.g. `jwt`): checks tokens, reports refusals."""

    @property
    def challenge(self) -> float:
        """Seconds before a session expires at which its streams are asked for fresh
        credentials (0: never asked)."""

    def verify(self, token: str) -> Session | Refusal | Deferred[Session | Refusal]:
        """Check `token`: a session, a refusal, or - while the guard fetches keys a token names
        and it does not have yet - a Deferred firing with one of them. Never raises; a refusal
        is reported (event) before it is returned."""

    def report(self, reason: str) -> None:
        """Report a refusal decided outside the guard (a missing role, a renewal that reaches no
        stream) as this guard's authorization failure event."""


@dataclass(frozen=True)
class GuardType:
    """What a guard module registers (entry point group `ssekd.guards`): its type name, the
    JSON Schema file of its entry (`ssekd:guard/<name>`, shipped in `ssekd/config/schema/`) and
    how to build its runtime. A runtime that is also an `IService` is started and stopped with
    the daemon."""

    name: str
    build: Callable[[BuildContext, GuardConfig], Guard]


class Lease(Protocol):
    """The authorization a long-lived response runs under: the sessions it was opened with, until
    a renewal replaces them. The http binding keeps the leases of a connection (and, on HTTP/1.1,
    of a client) so that one renewal request reaches every stream it may renew."""

    @property
    def expires_at(self) -> float | None:
        """The earliest expiry of its sessions (epoch seconds), or None: never."""

    @property
    def challenge(self) -> float:
        """Seconds before `expires_at` at which the client is asked for fresh credentials."""

    def hold(self, renewed: Callable[[], None]) -> None:
        """Keep this lease renewable while the response is open; `renewed` is called after each
        renewal (the expiry moved)."""

    def release(self) -> None:
        """The response ended: no renewal reaches it any more."""


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
class ReadinessSource(Protocol):
    """A runtime that can keep the daemon out of a load balancer's rotation until it can serve
    (a Kafka cache loading its bootstrap topics); the engine asks every one in the graph."""

    def readiness(self) -> Iterable[Check]: ...


@runtime_checkable
class TemporaryRefusals(Protocol):
    """An http exit that answers temporary refusals its own way (an SSE stream: a `200` that
    ends at once with `retry:`, so the browser comes back instead of giving up on a `503`).
    Other exits get `503` with `Retry-After`."""

    def answer_unavailable(self, request: Request, reason: str, retry_after: float) -> bytes: ...


@runtime_checkable
class HttpBinding(Protocol):
    """Role HTTP: answers requests routed to it by the http server.

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


# -- stream source --------------------------------------------------------------------------------


@dataclass
class StreamRequest:
    """What a stream source needs to open a stream (decided by the sse binding)."""

    #: The request path without its query string (still percent-encoded).
    path: str
    #: Last event id from the `Last-Event-ID` header or `lastEventId` query parameter, or None.
    last_event_id: str | None
    #: Decoded query parameters (first value of each).
    query: Mapping[str, str] = field(default_factory=dict)
    context: HttpContext | None = None
    #: Short description for events: "GET /path".
    describe: str = ""
    #: Request headers by lower-case name (first value, UTF-8; not valid UTF-8: with U+FFFD),
    #: read when a route refers to one (`${headers.name}`).
    headers: Mapping[str, str] = field(default_factory=dict)


class EventSink(Protocol):
    """Where a stream source writes SSE bytes (the sse binding's open response)."""

    def write(self, data: bytes) -> None: ...

    def end(self) -> None:
        """Finish the response (a 200 that ends: the browser reconnects with its last id)."""


class StreamHandle(Protocol):
    """What a stream source returns for an opened stream; the sse binding drives it."""

    def pause(self) -> None: ...

    def resume(self) -> None: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class TryLater:
    """A temporary refusal of a stream (a limit reached that will pass).

    The sse binding answers it with `200 text/event-stream`, `retry:`, a comment giving
    `reason`, and the end: a browser's EventSource reconnects after a 200 that ends, while any
    other status (`429`, `503`) makes it give up for good (docs/protocol.md).
    """

    reason: str
    #: Seconds the browser should wait, when the refusal knows (a guard fetching its keys);
    #: else the sse binding's `retry`.
    retry_after: float | None = None


def refuse_unauthorized(request: StreamRequest, binding: str,
                        guarded: Mapping[str, Collection[str]],
                        guards: Mapping[str, Guard]) -> int | TryLater | None:
    """How a stream source refuses a request its route's `guarded` does not admit: `401` or
    `403`, or `TryLater` while a guard cannot check tokens yet (its keys not fetched); None
    when the request may open. Each refusal is reported once, to its guard's events."""
    context = request.context or HttpContext(binding)
    denied = context.authorize(guarded)
    if denied is None:
        return None
    guard, refusal = denied
    if not refusal.reported and guard in guards:
        guards[guard].report(f"{request.describe}: {refusal.reason}")
    if refusal.status == 503:
        return TryLater(refusal.reason, refusal.retry_after)
    return refusal.status


@runtime_checkable
class StreamSource(Protocol):
    """Role STREAM_SOURCE: opens event streams for the sse binding (sse-kafka)."""

    def open(self, request: StreamRequest, sink: EventSink) -> StreamHandle | int | TryLater:
        """Start feeding `sink`, or return an HTTP status to answer instead (400, 404), or
        `TryLater` when a limit stops it for now."""


# -- files ----------------------------------------------------------------------------------------


@runtime_checkable
class FileServing(Protocol):
    """Role FILES: serves a path below its root (filesystem server)."""

    def serve(self, request: Request, path: str) -> bytes | int: ...


# -- kafka ----------------------------------------------------------------------------------------


@runtime_checkable
class KafkaCache(Protocol):
    """Role KAFKA_CACHE: per-topic caches sse-kafka subscribes to (cache_server, cache_client).

    The encoder and start are the kafka package's own types
    (`ssekd.bindings.kafka.subscription`, `.start`); the contract only fixes the shape of the
    call, so this module stays a leaf.
    """

    def subscribe(self, topic: str, encoder: Any, sink: EventSink, start: Any) -> StreamHandle:
        ...


@runtime_checkable
class KafkaClientBinding(Protocol):
    """Role KAFKA_CLIENT: consumes topics and reads history for a cache_server."""

    def consume(self, owner: str, topic: str, sink: Any, from_end: bool = False,
                give_up_after: int | None = None) -> None: ...

    def unconsume(self, owner: str, topic: str) -> None: ...

    def fetch(self, topic: str, partition: int, offset: int, limit: int,
              max_bytes: int) -> Any: ...


# -- outbound -------------------------------------------------------------------------------------


@runtime_checkable
class Connector(Protocol):
    """Role OUTBOUND: where and how an outbound connection is made (tcp client, tls client)."""

    @property
    def address(self) -> tuple[str, int] | None:
        """The (host, port) it connects to (a tcp client's `options.host` and `port`), or None
        when the binding using it says where (a kafka client's `servers`)."""

    @property
    def secure(self) -> bool:
        """Whether connections are wrapped in TLS (a tls client in front of the tcp client)."""

    def endpoint(self) -> Any:
        """A Twisted `IStreamClientEndpoint` to `address`; connecting never blocks the reactor.
        Raises `ValueError` when there is no `address`."""


@runtime_checkable
class HttpClientBinding(Protocol):
    """Role HTTP_CLIENT: sends requests to one upstream HTTP server (http client)."""

    @property
    def origin(self) -> str:
        """`scheme://host:port` of the upstream, for events and `Host`."""

    def get(self, target: str, headers: Mapping[str, str]) -> Deferred[Any]:
        """`GET target` (path and query) upstream with `headers` (after the binding's own
        `overrides`). Fires with Twisted's `IResponse` once the response headers are in, or
        fails; cancelling it before then aborts the connection."""


#: The protocol each role's runtime object provides, checked when a binding is built.
ROLE_PROTOCOLS: Mapping[Role, type] = {
    Role.LISTENER: ListenerBinding,
    Role.STREAM: StreamBinding,
    Role.HTTP: HttpBinding,
    Role.STREAM_SOURCE: StreamSource,
    Role.FILES: FileServing,
    Role.KAFKA_CACHE: KafkaCache,
    Role.KAFKA_CLIENT: KafkaClientBinding,
    Role.OUTBOUND: Connector,
    Role.HTTP_CLIENT: HttpClientBinding,
}
