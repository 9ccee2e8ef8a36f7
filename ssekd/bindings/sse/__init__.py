"""sse binding (kind server): text/event-stream responses for requests the http binding routes here.

Options: `retry` (ms, sent once at the start of each stream), `max-idle-time` (seconds without a
write before a `:` keepalive comment; default 15, below Twisted's HTTP/2 idle timeout).
"""

from __future__ import annotations

from ssekd.bindings.api import BindingType, BuildContext, Exit, KindSpec, Role, StreamSource
from ssekd.bindings.sse.server import DEFAULT_MAX_IDLE, SseServer
from ssekd.config.model import Binding

__all__ = ["BINDING", "SseServer"]


def _build(ctx: BuildContext, binding: Binding) -> SseServer:
    assert binding.exit is not None  # the schema requires it
    opts = binding.options
    return SseServer(binding.name, ctx.exit(binding.exit, StreamSource), ctx.reactor, ctx.events,
                     retry=opts.get("retry"),
                     max_idle=float(opts.get("max-idle-time", DEFAULT_MAX_IDLE)),
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
        }},
    ),
})
