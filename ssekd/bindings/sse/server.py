"""sse server: answers GET requests with text/event-stream responses (docs/protocol.md).

It owns the HTTP side of a stream - method check, last event id (header, else `lastEventId`
query parameter, at most 254 characters), response headers, `retry:`, keepalive - and hands the
rest to its exit, a *stream source* (sse-kafka, an sse client), through `StreamSource.open`.

Its `routes` pick that exit as Zilla's sse binding does: the first route whose `when` path matches
(none: the binding's `exit`; neither: `404`), and a route's `guarded` admits a request only with a
session of each guard having every listed role (none `401`, a missing role or a bad token `403`,
a guard that cannot check tokens yet a `200` that ends with `retry:`). Challenges and expiry come
from the lease the http binding in front gives every request with credentials, so they work the
same whichever binding - http, sse or sse-kafka - guards the stream.

Its limits (`options.limits`): `streams` open at once, beyond which a stream is told to come back
later, and `max-lag`, the seconds a stream may stay paused by a client that reads nothing before
it is ended. A temporary refusal (these, or `TryLater` from the source) is a `200
text/event-stream` holding `retry:` and a comment saying why, then the end: EventSource retries
after that, whereas a `429` or `503` would make it give up for good (docs/protocol.md).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote_to_bytes

from twisted.application.service import Service
from twisted.web.server import NOT_DONE_YET, Request

from ssekd.bindings.http.roles import HttpContext
from ssekd.bindings.sse.compression import Compression, accepts_gzip
from ssekd.bindings.sse.keepalive import KeepaliveTimers
from ssekd.bindings.sse.roles import StreamRequest, StreamSource, TryLater, refuse_unauthorized
from ssekd.bindings.sse.stats import SseStats
from ssekd.bindings.sse.stream import SseStream
from ssekd.bindings.sse.wire import comment, retry_field
from ssekd.event_ids import MAX_ID_LENGTH
from ssekd.patterns import Pattern
from ssekd.spi.guard import Guard
from ssekd.telemetry.events import EventLog
from ssekd.telemetry.metrics import Metrics

DEFAULT_MAX_IDLE = 15.0
#: Streams open at once per sse binding, unless `limits.streams` says otherwise.
DEFAULT_MAX_STREAMS = 10000
#: Seconds a stream may stay paused (its client reads nothing) before it is ended.
DEFAULT_MAX_LAG = 60.0
#: Milliseconds a refused browser waits before trying again, when `retry` is not set.
DEFAULT_TRY_LATER_RETRY = 5000


def _text(raw: bytes) -> str:
    """Client bytes as text for ids and events: UTF-8 where valid, never an exception."""
    return raw.decode("utf-8", errors="replace")


class RequestHeaders(Mapping[str, str]):
    """A request's headers as `StreamRequest.headers` gives them: lower-case name, first value,
    decoded on demand (most routes read none)."""

    __slots__ = ("_headers",)

    def __init__(self, headers: Any) -> None:
        self._headers = headers  # twisted.web.http_headers.Headers

    def __getitem__(self, name: str) -> str:
        if self._headers is None:
            raise KeyError(name)
        raw = self._headers.getRawHeaders(name.lower().encode("latin-1", "replace"))
        if not raw:
            raise KeyError(name)
        first = raw[0]
        return _text(first if isinstance(first, bytes) else str(first).encode("utf-8"))

    def __iter__(self) -> Iterator[str]:
        if self._headers is None:
            return iter(())
        return (n.decode("latin-1").lower() for n, _ in self._headers.getAllRawHeaders())

    def __len__(self) -> int:
        return sum(1 for _ in self)


def query_params(uri: bytes) -> dict[str, str]:
    """First value of each query parameter, percent-decoded; tolerant of any bytes."""
    out: dict[str, str] = {}
    _, sep, qs = uri.partition(b"?")
    if not sep:
        return out
    for pair in qs.split(b"&"):
        if not pair:
            continue
        name, _, value = pair.partition(b"=")
        key = _text(unquote_to_bytes(name.replace(b"+", b" ")))
        if key not in out:
            out[key] = _text(unquote_to_bytes(value.replace(b"+", b" ")))
    return out


@dataclass(frozen=True)
class SseRoute:
    """One of the sse server's routes: the paths it takes (none: every path), its exit and the
    roles it requires of each guard."""

    paths: tuple[Pattern, ...]
    source: StreamSource
    guarded: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def matches(self, path: str) -> bool:
        return not self.paths or any(p.match(path) is not None for p in self.paths)


class SseServer(Service):
    """Runtime of an `sse` binding of kind `server`."""

    #: GET only: a request body is never read (see `api.HttpBinding.takes_body`).
    takes_body = False

    def __init__(self, name: str, source: StreamSource | None, clock: Any, events: EventLog,
                 retry: int | None = None, max_idle: float = DEFAULT_MAX_IDLE,
                 max_streams: int = DEFAULT_MAX_STREAMS,
                 max_lag: float = DEFAULT_MAX_LAG,
                 metrics: Metrics | None = None,
                 compression: Compression | None = None,
                 routes: Sequence[SseRoute] = (),
                 guards: Mapping[str, Guard] | None = None) -> None:
        self.name = name
        #: The routes, in order, then the binding's own exit as a route of every path.
        self.routes = tuple(routes) + (() if source is None else (SseRoute((), source),))
        #: The guards routes name in `guarded`, to report the refusals decided here.
        self.guards = dict(guards or {})
        metrics = metrics or Metrics()
        self.stats = SseStats(metrics, name)
        #: The batch being delivered at the tail (`sse.delivery.latency`).
        self.deliveries = metrics.deliveries
        self.clock: Any = clock  # an IReactorTime (a MemoryReactorClock in tests)
        self.events = events
        self.retry = retry
        self.max_idle = max_idle
        #: Every stream's keepalive, on one reactor timer (keepalive.py).
        self.keepalives = KeepaliveTimers(clock)
        self.max_streams = max_streams
        self.max_lag = max_lag
        #: gzip for the clients that ask (None: never; `compression`).
        self.compression = compression
        #: Bytes written to gzip streams before compression (what `stream.data.sent` counts
        #: of them is after).
        self.gzip_input = metrics.counter("sse.gzip.input", name)
        #: Open streams (insertion-ordered), to end them all on stop.
        self.streams: dict[SseStream, None] = {}
        #: The last data counted for events, and its count (see `events_in`).
        self.counted: tuple[bytes, int] = (b"", 0)

    def events_in(self, data: bytes) -> int:
        """The events `data` holds: its blocks (each ends with a blank line) that are not
        comments. Remembered for the last data, which at the tail goes to a whole group of
        streams in a row."""
        last, count = self.counted
        if data is not last:
            count = data.count(b"\n\n") - data.count(b"\n:") - data.startswith(b":")
            self.counted = (data, count)
        return count

    def ended(self, stream: SseStream, why: str) -> None:
        """The stream-end event: who, what, how it went and why it ended - the access log of
        streams, so only with a stdout exporter, as `BINDING_HTTP_REQUEST_ACCEPTED`. The path is
        without its query (which may carry a token)."""
        if self.events.stdout is None:
            return
        req = stream.request
        peer = req.getClientAddress()
        host = getattr(peer, "host", None)
        who = f"{host}:{getattr(peer, 'port', 0)}" if host is not None else "-"
        duration = self.clock.seconds() - stream.opened
        fields = {"peer": who, "method": req.method.decode("latin-1"),
                  "path": _text(req.path), "route": stream.route or "-", "status": 200,
                  "duration_s": round(duration, 3), "bytes": stream.written,
                  "events": stream.events, "why": why}
        self.events.emit(str(self.name), "BINDING_SSE_STREAM_ENDED",
                         " ".join(f"{k}={v}" for k, v in fields.items()), fields)

    def render(self, request: Request, ctx: HttpContext) -> bytes | int:
        req: Any = request  # twisted.web is untyped for mypy
        path = _text(request.path)
        self.stats.opens_received.value += 1
        if request.method != b"GET":
            return self._reject(request, 405, f"{_text(request.method)} {path}",
                                ((b"Allow", b"GET"),))
        query = query_params(request.uri)
        raw = request.getHeader(b"last-event-id")
        last_id: str | None = None
        if raw is not None:
            last_id = _text(raw if isinstance(raw, bytes) else str(raw).encode("utf-8"))
        elif "lastEventId" in query:
            last_id = query["lastEventId"]
        if last_id is not None and len(last_id) > MAX_ID_LENGTH:
            return self._reject(request, 400, f"GET {path} last event id of {len(last_id)} chars")
        route = self._route(path)
        if route is None:
            return self._reject(request, 404, f"GET {path}: no route")
        stream_request = StreamRequest(path, last_id, query, ctx, f"GET {path}",
                                       RequestHeaders(getattr(request, "requestHeaders", None)))
        if route.guarded:
            refused = refuse_unauthorized(stream_request, str(self.name), route.guarded,
                                          self.guards)
            if isinstance(refused, TryLater):
                return self._try_later(request, f"GET {path}", refused)
            if refused is not None:
                return self._reject(request, refused, f"GET {path}")
        if len(self.streams) >= self.max_streams:
            self.stats.ended_by_limit("streams")
            return self._try_later(request, f"GET {path}",
                                   TryLater(f"{len(self.streams)} streams open (limits.streams)"))
        stream = SseStream(self, request, ctx.lease)
        result = route.source.open(stream_request, stream)
        if isinstance(result, int):
            return self._reject(request, result, f"GET {path}")
        if isinstance(result, TryLater):
            self.stats.ended_by_limit("try-later")
            return self._try_later(request, f"GET {path}", result)
        req.setResponseCode(200)
        req.setHeader(b"Content-Type", b"text/event-stream")
        req.setHeader(b"Cache-Control", b"no-store")
        req.setHeader(b"X-Accel-Buffering", b"no")
        req.sse_stream = True  # its end event is the access line (`ended`), not the http one's
        gzip = None
        if self.compression is not None:
            req.setHeader(b"Vary", b"Accept-Encoding")
            if getattr(result, "compress", True) \
                    and accepts_gzip(request.getHeader(b"accept-encoding")):
                req.setHeader(b"Content-Encoding", b"gzip")
                gzip = self.compression.writer()
        self.streams[stream] = None
        self.stats.opened()
        first = retry_field(self.retry) if self.retry is not None else b""
        # what the source says before any event (an id it could not read), if anything
        notice = getattr(result, "notice", b"")
        stream.start(result, first + notice if isinstance(notice, bytes) else first, gzip)
        return NOT_DONE_YET

    def _route(self, path: str) -> SseRoute | None:
        """The first route that takes `path` (the binding's exit last, a route of every path),
        else None."""
        return next((route for route in self.routes if route.matches(path)), None)

    def answer_unavailable(self, request: Request, reason: str, retry_after: float) -> bytes:
        """A temporary refusal decided in front of this binding (a guard that cannot check
        tokens yet), answered as a stream refused for now (`TemporaryRefusals`)."""
        return self._try_later(request, f"GET {_text(request.path)}", TryLater(reason, retry_after))

    def _try_later(self, request: Any, describe: str, refusal: TryLater) -> bytes:
        """A temporary refusal as a browser's EventSource understands it (docs/protocol.md): a `200`
        event stream that says when to come back (`retry:`) and why, and ends at once - where a
        `429` or `503` would make the browser give up for good."""
        request.setResponseCode(200)
        request.setHeader(b"Content-Type", b"text/event-stream")
        request.setHeader(b"Cache-Control", b"no-store")
        request.setHeader(b"X-Accel-Buffering", b"no")
        self.events.emit(str(self.name), "BINDING_SSE_TRY_LATER", f"{describe}: {refusal.reason}")
        if refusal.retry_after is not None:
            retry = int(refusal.retry_after * 1000)
        else:
            retry = self.retry if self.retry is not None else DEFAULT_TRY_LATER_RETRY
        return retry_field(retry) + comment(f"try later: {refusal.reason}")

    def stalled(self, stream: SseStream, paused: float) -> None:
        """`stream` is ended for reading nothing for `paused` seconds (it reconnects by id)."""
        self.events.emit(str(self.name), "BINDING_SSE_STREAM_STALLED",
                         f"{stream.describe()} paused for {paused:g} s (limits.max-lag)")

    def _reject(self, request: Any, code: int, detail: str,
                headers: tuple[tuple[bytes, bytes], ...] = ()) -> bytes:
        self.stats.errors_received.value += 1
        if code == 401:  # no credentials: say which kind (RFC 9110 §11.6.1)
            headers += ((b"WWW-Authenticate", b"Bearer"),)
        request.setResponseCode(code)
        for name, value in headers:
            request.setHeader(name, value)
        request.setHeader(b"Content-Length", b"0")
        self.events.emit(str(self.name), "BINDING_SSE_REQUEST_REJECTED", f"{code} {detail}")
        return b""

    def stopService(self) -> None:
        """End every open stream with a finished 200, so browsers reconnect elsewhere/later."""
        super().stopService()
        for stream in list(self.streams):
            stream.end("drain")
