"""sse binding (kind server): text/event-stream responses for requests the http binding routes here.

Options: `retry` (ms, sent once at the start of each stream), `max-idle-time` (seconds without a
write before a `:` keepalive comment; default 15, below Twisted's HTTP/2 idle timeout).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ssekd.bindings import BindingType, KindSpec
from ssekd.bindings.sse.server import DEFAULT_MAX_IDLE, EventStreams, SseServer, StreamRequest
from ssekd.bindings.sse.stream import EventsHandle, SseStream
from ssekd.bindings.sse.wire import event_bytes

if TYPE_CHECKING:
    from ssekd.config.model import Binding

__all__ = ["BINDING", "EventStreams", "EventsHandle", "SseServer", "SseStream", "StreamRequest",
           "event_bytes"]


def _build(ctx: Any, binding: Binding) -> SseServer:
    assert binding.exit is not None  # the schema requires it
    events: EventStreams = ctx.exit(binding.exit)
    opts = binding.options
    return SseServer(binding.name, events, ctx.reactor, ctx.events,
                     retry=opts.get("retry"),
                     max_idle=float(opts.get("max-idle-time", DEFAULT_MAX_IDLE)))


BINDING = BindingType("sse", {
    "server": KindSpec(
        role="http", build=_build, exit="required", exit_roles=("events",),
        options={"type": "object", "additionalProperties": False, "properties": {
            "retry": {"type": "integer", "minimum": 0},
            "max-idle-time": {"type": "number", "exclusiveMinimum": 0},
        }},
    ),
})
