"""What flows between a source of events and the response it writes to: the sink it writes
bytes into and the handle its reader drives (pause, resume, close). Shared by the sse binding,
its stream sources and the kafka caches they subscribe to.
"""

from __future__ import annotations

from typing import Protocol


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
