"""sse client: relays upstream event streams to the streams of an sse server (Zilla's SSE proxy).

An sse server whose exit is an sse client hands each stream here (`StreamSource.open`). The first
route whose `when.path` matches the request path (else the binding's `exit`) names the http client
that reaches the upstream; the upstream URL is that client's origin with the request's path and
the query parameters the route's `with.query` names (none unless it names some). `lastEventId`
is the relay's business (it becomes the upstream's `Last-Event-ID`), and the parameters the http
binding reads tokens from (`authorization`) never go upstream, whatever the route says. Every
stream asking for the same URL shares one `relay.Feed`: one upstream connection, one ring of recent
events - so the parameters that go upstream are also what tells one shared feed from another, and
a client cannot open feeds of its own by adding parameters nobody named.

A relayed path is forwarded as it came, so it must not mean something else upstream than it
means here: a path with a dot segment (`/events/../admin`, `/events/%2e%2e/x`, `/events/..;/x`),
an encoded slash, a backslash (encoded or not) or a control character matches no route (`404`),
whatever the route's `*`.

At most `max-upstreams` URLs are relayed at once: beyond, a URL nobody follows any more is closed
to make room, or else the new stream is told to come back later (`TryLater`). A route's
`guarded` is checked as in sse-kafka; credentials are never sent upstream (one
connection serves every browser, so it cannot carry one browser's token).

`options.requests` names models the data of a URL's events must satisfy (`content`): a feed
checks each event once, before any stream sees it, and drops the ones refused.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from urllib.parse import quote, unquote, urlencode

from twisted.application.service import Service

from ssekd.bindings.http.roles import HttpClientBinding
from ssekd.bindings.sse.content import EventContent
from ssekd.bindings.sse.relay import Feed, FeedSettings, Subscriber
from ssekd.bindings.sse.roles import StreamRequest, TryLater, refuse_unauthorized
from ssekd.patterns import Pattern
from ssekd.spi.guard import Guard
from ssekd.spi.stream import EventSink
from ssekd.telemetry.events import EventLog, clean

NO_ROUTE = "BINDING_SSE_CLIENT_NO_ROUTE"
#: Upstream URLs relayed at once per sse client, unless `max-upstreams` says otherwise: each is
#: a connection and a ring, and any path a route matches names one.
DEFAULT_MAX_UPSTREAMS = 100
#: The query parameter a browser may give its last event id in (the sse server reads it).
LAST_EVENT_ID = "lastEventId"


@dataclass(frozen=True)
class SseClientRoute:
    patterns: tuple[Pattern, ...]
    http: HttpClientBinding
    guarded: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    #: The query parameters passed on upstream (`with.query`); the others are dropped.
    query: tuple[str, ...] = ()

    def matches(self, path: str) -> bool:
        return not self.patterns or any(p.match(path) is not None for p in self.patterns)


def unsafe_path(path: str) -> str | None:
    """Why `path` (percent-encoded, as received) cannot be relayed, or None when it can: a path
    the upstream could resolve to somewhere the route never meant (module docstring)."""
    for raw in path.split("/"):
        segment = unquote(raw, errors="replace")
        if segment.split(";", 1)[0] in (".", ".."):
            return "a dot segment"
        if "/" in segment or "\\" in segment:
            return "an encoded slash or a backslash"
        if any(ord(c) < 0x20 or ord(c) == 0x7F for c in segment):
            return "a control character"
    return None


def upstream_target(request: StreamRequest, names: Collection[str] = ()) -> str:
    """Path and query the upstream is asked for: the query parameters in `names` (a route's
    `with.query`), less `lastEventId` and the http binding's credential parameters, sorted - the
    same for requests that differ only in the order of those, or in anything else, so they share
    a feed."""
    secret = request.context.credential_query if request.context is not None else frozenset()
    query = sorted((k, v) for k, v in request.query.items()
                   if k in names and k != LAST_EVENT_ID and k not in secret)
    return request.path + (f"?{urlencode(query, quote_via=quote)}" if query else "")


class SseClient(Service):
    """Runtime of an `sse` binding of kind `client`: a `StreamSource` of relayed streams; a
    service, so that stopping the daemon (or a reload that replaces it) closes its upstream
    connections."""

    def __init__(self, name: str, routes: list[SseClientRoute], clock: object,
                 events: EventLog, settings: FeedSettings,
                 guards: Mapping[str, Guard] | None = None,
                 max_upstreams: int = DEFAULT_MAX_UPSTREAMS,
                 contents: list[EventContent] | None = None) -> None:
        self.name = name
        self.binding = name  # Service.name is Optional; events need the binding's name
        self.routes = routes
        self.clock = clock
        self.events = events
        self.settings = settings
        self.guards = dict(guards or {})
        self.max_upstreams = max_upstreams
        #: `options.requests`: the first whose path matches checks a URL's events
        self.contents = list(contents or ())
        #: (http client, target) -> its feed, while open
        self.feeds: dict[tuple[int, str], Feed] = {}

    def open(self, request: StreamRequest, sink: EventSink) -> Subscriber | int | TryLater:
        unsafe = unsafe_path(request.path)
        if unsafe is not None:
            self.events.emit(self.binding, NO_ROUTE, f"{request.describe}: {unsafe} in the path")
            return 404
        route = next((r for r in self.routes if r.matches(request.path)), None)
        if route is None:
            self.events.emit(self.binding, NO_ROUTE, request.describe)
            return 404
        if route.guarded:
            refused = refuse_unauthorized(request, self.binding, route.guarded, self.guards)
            if refused is not None:
                return refused
        target = upstream_target(request, route.query)
        key = (id(route.http), target)
        feed = self.feeds.get(key)
        first = feed is None
        if feed is None:
            if len(self.feeds) >= self.max_upstreams and not self._make_room():
                return TryLater(f"{len(self.feeds)} upstream URLs relayed (max-upstreams)")
            content = next((c for c in self.contents if c.matches(request.path)), None)
            feed = Feed(route.http, target, self.clock, self.settings,
                        self._emit, self._forget, last_id=request.last_event_id,
                        content=content)
            self.feeds[key] = feed
            feed.start()
        return feed.subscribe(sink, request.last_event_id, first)

    def _make_room(self) -> bool:
        """Close the feed that lost its last stream longest ago (one kept for its linger), if
        any: a URL nobody follows gives way to one somebody asks for."""
        idle = [f for f in self.feeds.values() if not f.subscribers]
        if not idle:
            return False
        min(idle, key=lambda f: f.left_at).close()
        return True

    def _emit(self, name: str, detail: str) -> None:
        self.events.emit(self.binding, name, clean(detail))

    def _forget(self, feed: Feed) -> None:
        key = (id(feed.http), feed.target)
        if self.feeds.get(key) is feed:
            del self.feeds[key]

    def startService(self) -> None:
        super().startService()
        for content in self.contents:
            content.model.resolve()  # catalogs answer before the first event, when they can

    def stopService(self) -> None:
        """Close every feed (its upstream connection and timers)."""
        super().stopService()
        for feed in list(self.feeds.values()):
            feed.close()
        for content in self.contents:
            content.model.stop()
