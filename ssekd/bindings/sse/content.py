"""What an sse client checks in the events it relays: `options.requests[]`, Zilla's `{path,
content}` (a model, `ssekd.catalogs.models`), applied to the events of every upstream URL whose
path the entry's `path` pattern matches (the first entry that matches).

The check sits between a feed's reader and its ring (`EventGate`), so it runs once per upstream
event however many streams follow the URL, and an event it refuses is never in the ring: no
stream sees it, at the tail, catching up or resuming. The rest keep their order, bytes and ids.
A refused event's id still counts as read (the upstream is asked from it on reconnect, so it is
not sent again), and the stream is never cut for it.

What is checked is the event's data: its `data:` lines joined by line feeds, as a browser's
`MessageEvent.data` reads them. An event without a data line (an `id:` alone) carries nothing to
check and passes: a browser dispatches nothing for it, it only moves the last id.

Each refused event is counted (`sse.client.invalid`, by the entry's path) and reported by a
`BINDING_SSE_EVENT_INVALID` event with the URL, the event's id and the model's error - at most
one per upstream URL per second, the next one saying how many were left unsaid.

A model whose schema is not held yet (a registry that has not answered) holds the feed's events,
in order, until it is (at most `history` of them; beyond, the oldest held is dropped and counted
as refused: the relay keeps no more than its ring would).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from twisted.internet.defer import Deferred

from ssekd.bindings.sse.reader import Event
from ssekd.catalogs.models import FieldModel, Invalid, Pending
from ssekd.patterns import Pattern
from ssekd.telemetry.metrics import Counter

INVALID = "BINDING_SSE_EVENT_INVALID"
#: Seconds between two invalid-event reports of one upstream URL.
REPORT_INTERVAL = 1.0
_DATA = b"data:"


@dataclass(frozen=True)
class EventContent:
    """One `requests[]` entry, built: its path pattern (as written, for the metric's label) and
    the model the data of its events must satisfy."""

    path: str
    pattern: Pattern
    model: FieldModel
    invalid: Counter

    def matches(self, path: str) -> bool:
        return self.pattern.match(path) is not None


def event_data(wire: bytes) -> bytes | None:
    """The data of an event as the reader wrote it (`name:value` lines), or None when it has
    no data line."""
    lines = [line[len(_DATA):] for line in wire.split(b"\n") if line.startswith(_DATA)]
    return b"\n".join(lines) if lines else None


class EventGate:
    """Between one feed's reader and its ring: passes on (`publish`) the events the content
    takes, in order, and drops the others (`skipped` is told the id each one carried)."""

    def __init__(self, content: EventContent, clock: Any, emit: Callable[[str, str], None],
                 publish: Callable[[Event], None], skipped: Callable[[str | None], None],
                 url: str, limit: int) -> None:
        self.content = content
        self.clock = clock
        self.emit = emit
        self.publish = publish
        self.skipped = skipped
        self.url = url
        self.limit = limit
        self.held: deque[Event] = deque()
        self._waiting: Deferred[None] | None = None
        self._last_report = float("-inf")
        self._unsaid = 0
        self.closed = False

    def event(self, event: Event) -> None:
        self.held.append(event)
        if len(self.held) > self.limit:
            dropped = self.held.popleft()
            self._refuse(dropped, f"its schema was not available while {self.limit} events "
                                  f"were held")
        self._drain()

    def _drain(self) -> None:
        while self.held and self._waiting is None and not self.closed:
            event = self.held[0]
            data = event_data(event.data)
            if data is not None:
                try:
                    self.content.model.check(data)
                except Pending as e:
                    self._waiting = e.ready
                    e.ready.addCallback(self._ready)
                    return
                except Invalid as e:
                    self.held.popleft()
                    self._refuse(event, str(e))
                    continue
            self.held.popleft()
            self.publish(event)

    def _ready(self, _: object) -> None:
        self._waiting = None
        self._drain()

    def _refuse(self, event: Event, why: str) -> None:
        self.content.invalid.value += 1
        self.skipped(event.id)
        now = self.clock.seconds()
        if now - self._last_report < REPORT_INTERVAL:
            self._unsaid += 1
            return
        more = f" ({self._unsaid} more invalid since the last report)" if self._unsaid else ""
        self._last_report, self._unsaid = now, 0
        shown = "none" if event.id is None else event.id[:80]
        self.emit(INVALID, f"GET {self.url}: event id {shown}: {why}{more}")

    def close(self) -> None:
        self.closed = True
        self.held.clear()
