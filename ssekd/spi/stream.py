"""What flows between a source of events and the response it writes to: the sink it writes
bytes into and the handle its reader drives (pause, resume, close). Shared by the sse binding,
its stream sources and the kafka caches they subscribe to.
"""

from __future__ import annotations

from typing import Protocol


class EventBlock(bytes):
    """Whole events and how many (`events`), from a source that knew the count as it made them.

    A sink counts the events written to it; for other bytes it counts blank lines, which on a
    topic read from its start cost more than making the events' ids. Plain `bytes` everywhere
    else: joining blocks gives bytes again, and those are counted."""

    events: int


def event_block(data: bytes, events: int) -> bytes:
    """`data` (`events` whole events, no comments) as an `EventBlock`."""
    block = EventBlock(data)
    block.events = events
    return block


class EventSink(Protocol):
    """Where a stream source writes SSE bytes (the sse binding's open response); an
    `EventBlock` says how many events it holds."""

    def write(self, data: bytes) -> None: ...

    def end(self) -> None:
        """Finish the response (a 200 that ends: the browser reconnects with its last id)."""


def write_each(sinks: list[EventSink], data: bytes) -> None:
    """`sink.write(data)` for each of `sinks`, in order: how the same bytes go to a whole group
    of streams at a topic's tail.

    When the first sink's class has a static `write_each(sinks, data)` (the sse binding's
    stream), it takes the whole list, with the same effect as writing to each in turn. Fanned
    out stream by stream, a batch cost five calls deep per stream (the subscription, the
    stream, its writer, the send) and that Python, not the `send`, was most of what separated
    ssekd from a bare send loop (bench/send_floor.py); one loop over the streams does the
    per-stream work inline and the shared work (counting, framing) once. A `write_each` hands
    the sinks it does not know to their own `write`, in their turn.
    """
    if not sinks:
        return
    each = getattr(type(sinks[0]), "write_each", None)
    if each is None:
        for sink in sinks:
            sink.write(data)
    else:
        each(sinks, data)


class StreamHandle(Protocol):
    """What a stream source returns for an opened stream; the sse binding drives it."""

    def pause(self) -> None: ...

    def resume(self) -> None: ...

    def close(self) -> None: ...
