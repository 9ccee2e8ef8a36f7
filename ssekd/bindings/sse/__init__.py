"""sse binding (kind server): text/event-stream responses for requests the http binding routes here.

Options: `retry` (ms, sent once at the start of each stream), `max-idle-time` (seconds without a
write before a `:` keepalive comment; default 15, below Twisted's HTTP/2 idle timeout), and
`limits`: `streams` open at once (default 10000; more are told to come back later) and `max-lag`
(default 60 s: a stream whose client reads nothing that long is ended and reconnects by id).
"""

from __future__ import annotations

from ssekd.bindings.api import BindingType, BuildContext, Exit, KindSpec, Role, StreamSource
from ssekd.bindings.sse.server import (
    DEFAULT_MAX_IDLE,
    DEFAULT_MAX_LAG,
    DEFAULT_MAX_STREAMS,
    DEFAULT_TRY_LATER_RETRY,
    SseServer,
)
from ssekd.config.model import Binding

__all__ = ["BINDING", "SseServer"]


def _build(ctx: BuildContext, binding: Binding) -> SseServer:
    assert binding.exit is not None  # the schema requires it
    opts = binding.options
    limits = opts.get("limits", {})
    return SseServer(binding.name, ctx.exit(binding.exit, StreamSource), ctx.reactor, ctx.events,
                     retry=opts.get("retry"),
                     max_idle=float(opts.get("max-idle-time", DEFAULT_MAX_IDLE)),
                     max_streams=int(limits.get("streams", DEFAULT_MAX_STREAMS)),
                     max_lag=float(limits.get("max-lag", DEFAULT_MAX_LAG)),
                     metrics=ctx.metrics)


BINDING = BindingType("sse", {
    "server": KindSpec(
        role=Role.HTTP, build=_build, exit=Exit.REQUIRED, exit_roles=(Role.STREAM_SOURCE,),
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
})
