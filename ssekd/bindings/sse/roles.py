"""The role the sse server offers its exits: `StreamSource` opens the event streams of its
requests (sse-kafka, an sse client), with the `StreamRequest` it decided and the answers a
source may give instead of a stream.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from ssekd.bindings.http.roles import HttpContext
from ssekd.spi.guard import Guard
from ssekd.spi.stream import EventSink, StreamHandle


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
    """Opens event streams for the sse binding (sse-kafka)."""

    def open(self, request: StreamRequest, sink: EventSink) -> StreamHandle | int | TryLater:
        """Start feeding `sink`, or return an HTTP status to answer instead (400, 404), or
        `TryLater` when a limit stops it for now."""
