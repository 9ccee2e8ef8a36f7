"""sse binding: kind server answers text/event-stream requests the http binding routes here; kind
client relays upstream event streams to them (`client`, `relay`).

Kind server's `routes` (Zilla's): `when: [{path}]`, `exit` and `guarded`, the first that takes
the path wins, then the binding's `exit`. Options: `retry` (ms, sent once at the start of each
stream), `max-idle-time` (seconds without a
write before a `:` keepalive comment; default 15, below Twisted's HTTP/2 idle timeout), and
`limits`: `streams` open at once (default 10000; more are told to come back later) and `max-lag`
(default 60 s: a stream whose client reads nothing that long is ended and reconnects by id).
"""

from __future__ import annotations

from ssekd.bindings.http.roles import HttpBinding, HttpClientBinding
from ssekd.bindings.sse.client import DEFAULT_MAX_UPSTREAMS, SseClient, SseClientRoute
from ssekd.bindings.sse.compression import CONTEXTS, Compression
from ssekd.bindings.sse.content_config import REQUESTS, client_depends, event_contents
from ssekd.bindings.sse.relay import FeedSettings
from ssekd.bindings.sse.roles import StreamSource
from ssekd.bindings.sse.server import (
    DEFAULT_MAX_IDLE,
    DEFAULT_MAX_LAG,
    DEFAULT_MAX_STREAMS,
    DEFAULT_TRY_LATER_RETRY,
    SseRoute,
    SseServer,
)
from ssekd.config import ConfigError
from ssekd.config.model import Binding
from ssekd.patterns import Pattern
from ssekd.spi.binding import BindingType, BuildContext, Exit, KindSpec

__all__ = ["BINDING", "SseClient", "SseServer"]

_DEFAULTS = FeedSettings()
_GZIP = Compression()


def _build(ctx: BuildContext, binding: Binding) -> SseServer:
    if binding.exit is None and not binding.routes:
        raise ConfigError([ctx.issue(("bindings", binding.name),
                                     "expected `exit` or `routes`: an sse server hands each "
                                     "stream to the exit of the route that takes its path")])
    routes = [SseRoute(tuple(Pattern.compile(str(w["path"])) for w in r.when if "path" in w),
                       ctx.exit(r.exit, StreamSource), r.guarded)
              for r in binding.routes if r.exit is not None]
    guards = {g: ctx.guard(g) for r in routes for g in r.guarded}
    opts = binding.options
    limits = opts.get("limits", {})
    gzip = opts.get("compression")
    compression = None if gzip is None else Compression(
        level=int(gzip.get("level", _GZIP.level)),
        window_bits=int(gzip.get("window-bits", _GZIP.window_bits)),
        memory_level=int(gzip.get("memory-level", _GZIP.memory_level)),
        context=gzip.get("context", _GZIP.context))
    default = None if binding.exit is None else ctx.exit(binding.exit, StreamSource)
    return SseServer(binding.name, default, ctx.reactor, ctx.events,
                     retry=opts.get("retry"),
                     max_idle=float(opts.get("max-idle-time", DEFAULT_MAX_IDLE)),
                     max_streams=int(limits.get("streams", DEFAULT_MAX_STREAMS)),
                     max_lag=float(limits.get("max-lag", DEFAULT_MAX_LAG)),
                     metrics=ctx.metrics, compression=compression, routes=routes,
                     guards=guards)


def _build_client(ctx: BuildContext, binding: Binding) -> SseClient:
    opts = binding.options
    routes = [SseClientRoute(tuple(Pattern.compile(str(w["path"])) for w in r.when if "path" in w),
                             ctx.exit(r.exit, HttpClientBinding), r.guarded,
                             tuple(str(q) for q in (r.with_ or {}).get("query", ())))
              for r in binding.routes if r.exit is not None]
    if binding.exit is not None:
        routes.append(SseClientRoute((), ctx.exit(binding.exit, HttpClientBinding)))
    guards = {g: ctx.guard(g) for r in routes for g in r.guarded}
    settings = FeedSettings(retry=int(opts.get("retry", _DEFAULTS.retry)),
                            idle_timeout=float(opts.get("idle-timeout", _DEFAULTS.idle_timeout)),
                            history=int(opts.get("history", _DEFAULTS.history)),
                            history_bytes=int(opts.get("history-bytes", _DEFAULTS.history_bytes)))
    return SseClient(binding.name, routes, ctx.reactor, ctx.events, settings, guards,
                     max_upstreams=int(opts.get("max-upstreams", DEFAULT_MAX_UPSTREAMS)),
                     contents=event_contents(ctx, binding))


_CLIENT_OPTIONS = {
    "type": "object", "additionalProperties": False,
    "description": "Relays upstream event streams: every stream of the sse server in front "
                   "asking for the same upstream URL (the http client's origin with the request's "
                   "path and the query parameters its route's `with.query` names) shares one "
                   "upstream connection. The upstream is reconnected "
                   "with its `Last-Event-ID` when it drops; recent events are kept so a browser "
                   "reconnecting with an id resumes without a gap.",
    "properties": {
        "retry": {"type": "integer", "minimum": 0, "default": _DEFAULTS.retry,
                  "description": "Milliseconds before reconnecting to an upstream that sent no "
                                 "`retry:`; doubled after each attempt that brought no event, up "
                                 f"to {_DEFAULTS.max_backoff:g} s."},
        "requests": REQUESTS,
        "history": {"type": "integer", "minimum": 1, "default": _DEFAULTS.history,
                    "x-ssekd-addition": True,
                    "description": "Recent events kept per upstream URL, for browsers that "
                                   "reconnect with a last event id and for new streams."},
        "history-bytes": {"type": "integer", "minimum": 1, "default": _DEFAULTS.history_bytes,
                          "x-ssekd-addition": True,
                          "description": "Bytes of those events kept at most."},
        "max-upstreams": {"type": "integer", "minimum": 1, "default": DEFAULT_MAX_UPSTREAMS,
                          "x-ssekd-addition": True,
                          "description": "Upstream URLs relayed at once (each a connection and "
                                         "its events). Beyond, one nobody follows any more is "
                                         "closed to make room, else the stream is told to come "
                                         "back later."},
        "idle-timeout": {"type": "number", "exclusiveMinimum": 0,
                         "default": _DEFAULTS.idle_timeout, "x-ssekd-addition": True,
                         "description": "Seconds without a byte from an upstream (keepalives "
                                        "count) before its connection is given up and opened "
                                        "again."},
    }}


BINDING = BindingType("sse", {
    "server": KindSpec(
        role=HttpBinding, build=_build, exit=Exit.OPTIONAL, exit_roles=(StreamSource,),
        when={"type": "object", "additionalProperties": False,
              "properties": {"path": {"type": "string", "pattern": "^/",
                                      "x-expected": "a path starting with /",
                                      "description": "Pattern for the request path (query "
                                                     "string left out): `*` matches anything, "
                                                     "`{name}` a segment. A route without "
                                                     "`when` takes every path."}}},
        options={"type": "object", "additionalProperties": False,
                 "description": "Answers `GET` with a `text/event-stream` response and opens the "
                                "stream at its exit; reads the last event id from `Last-Event-ID` "
                                "or `?lastEventId=`. Other methods are `405`.",
                 "properties": {
            "retry": {"type": "integer", "minimum": 0, "x-ssekd-default": "not sent",
                      "description": "Milliseconds a browser waits before reconnecting, sent once "
                                     "as `retry:` at the start of each stream."},
            "max-idle-time": {"type": "number", "exclusiveMinimum": 0, "default": DEFAULT_MAX_IDLE,
                              "x-ssekd-addition": True,
                              "description": "Seconds without a write before a `:` keepalive "
                                             "comment; must be less than the http binding's "
                                             "`limits.idle-timeout`."},
            "compression": {
                "type": "object", "additionalProperties": False, "x-ssekd-addition": True,
                "x-ssekd-default": "off",
                "description": "gzip on the streams of clients that ask for it (`Accept-Encoding`), "
                               "each write compressed and flushed at once; never for an "
                               "sse-kafka route with `compress: false`. Each gzip stream holds "
                               "a compressor of 2^(window-bits + 2) + 2^(memory-level + 9) "
                               "bytes plus about 6 KiB (11 KiB with the defaults). `{}` turns it "
                               "on with the defaults. Sizes leak content (CRIME, BREACH): with "
                               "the default `context: stream`, an event that repeats a secret "
                               "sent earlier on the same stream compresses smaller, so whoever "
                               "writes some of a stream's events and sees its sizes can guess "
                               "the secrets in the others; use `context: event` where one "
                               "stream mixes writers.",
                "properties": {
                    "level": {"type": "integer", "minimum": 1, "maximum": 9,
                              "default": _GZIP.level, "x-ssekd-addition": True,
                              "description": "zlib's level: 1 is fastest, 9 smallest."},
                    "window-bits": {"type": "integer", "minimum": 9, "maximum": 15,
                                    "default": _GZIP.window_bits, "x-ssekd-addition": True,
                                    "description": "The history a stream's compressor looks "
                                                   "back into: 2^window-bits bytes."},
                    "memory-level": {"type": "integer", "minimum": 1, "maximum": 9,
                                     "default": _GZIP.memory_level, "x-ssekd-addition": True,
                                     "description": "The size of its hash table: "
                                                    "2^(memory-level + 7) entries."},
                    "context": {"type": "string", "enum": list(CONTEXTS),
                                "default": _GZIP.context, "x-ssekd-addition": True,
                                "description": "What an event's compression may refer back "
                                               "to. `stream`: every earlier event in the "
                                               "window (smaller). `event`: nothing; each event "
                                               "is compressed alone (a full flush after each), "
                                               "so its size depends on its own bytes only: "
                                               "for routes whose streams mix events of "
                                               "different writers, where a secret of one "
                                               "could be guessed from the sizes of another's. "
                                               "A secret and someone else's bytes in one "
                                               "event stay exposed either way."},
                }},
            "limits": {"type": "object", "additionalProperties": False, "x-ssekd-addition": True,
                       "description": "Bounds on the streams of this binding. A stream refused "
                                      "for now gets a `200 text/event-stream` with `retry:` "
                                      f"(`retry`, else {DEFAULT_TRY_LATER_RETRY} ms) and a "
                                      "comment saying why, then the end: a browser tries again, "
                                      "where a `429` or `503` would make it give up for good.",
                       "properties": {
                "streams": {"type": "integer", "minimum": 1, "default": DEFAULT_MAX_STREAMS,
                            "x-ssekd-addition": True,
                            "description": "Streams open at once; one more is refused for now."},
                "max-lag": {"type": "number", "exclusiveMinimum": 0, "default": DEFAULT_MAX_LAG,
                            "x-ssekd-addition": True,
                            "description": "Seconds a stream may stay paused because its client "
                                           "reads nothing (a full socket buffer, an HTTP/2 window "
                                           "that stays shut); then it is ended (reset), freeing "
                                           "what it holds, and its browser reconnects with its "
                                           "last event id."},
            }},
        }},
    ),
    "client": KindSpec(
        role=StreamSource, build=_build_client, exit=Exit.OPTIONAL,
        exit_roles=(HttpClientBinding,), options=_CLIENT_OPTIONS, depends=client_depends,
        when={"type": "object", "additionalProperties": False, "required": ["path"],
              "properties": {"path": {"type": "string", "pattern": "^/",
                                      "x-expected": "a path starting with /",
                                      "description": "Pattern for the request path (query "
                                                     "string left out); `*` matches anything. "
                                                     "A path with a dot segment (`..`, `%2e%2e`), "
                                                     "an encoded slash or a backslash matches "
                                                     "no route."}}},
        with_={"type": "object", "additionalProperties": False, "x-ssekd-addition": True,
               "description": "What of the request goes upstream.",
               "properties": {
                   "query": {"type": "array", "uniqueItems": True,
                             "items": {"type": "string", "minLength": 1},
                             "x-ssekd-addition": True, "x-ssekd-default": "none",
                             "description": "The query parameters passed on to the upstream; "
                                            "the others are dropped. Requests that differ in "
                                            "these share a feed only when their values are "
                                            "the same, so each one listed lets clients open "
                                            "upstream connections of their own (up to "
                                            "`max-upstreams`). `lastEventId` is never passed "
                                            "on (it becomes `Last-Event-ID`), nor is a "
                                            "parameter the http binding's `authorization` "
                                            "reads tokens from."}}},
    ),
})
