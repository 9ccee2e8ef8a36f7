"""The keepalive timers of a binding's streams: one reactor timer for all of them.

Each stream writes `:` once it has been idle for max-idle-time (`SseStream._keepalive`). With a
`callLater` per stream, every idle stream held a `DelayedCall` (with its own kwargs dict), the
bound method it calls and the reactor's heap entry: about 420 bytes of the 8.6 KB an idle
stream cost (bench/idle_memory.py). Here each stream holds one small list in a heap of our own
(`[deadline, seq, stream]`, about 140 bytes with its float and int), and the reactor holds one
`DelayedCall`, for the earliest deadline.

The timing is the same as a timer per stream: a stream's keepalive runs at its deadline, in
deadline order (the sequence number orders equal deadlines by arming, and keeps heapq from
comparing streams). A stream that closes (`disarm`) lets go of its entry at once (the entry's
stream becomes None, so a closed stream is never held until its deadline); dead entries are
dropped as they come to the top of the heap, or all at once when they are more than half of
it. With no stream armed there is no timer at all.
"""

from __future__ import annotations

import heapq
import itertools
from typing import Any, Protocol

from twisted.logger import Logger

_log = Logger()


class KeepaliveStream(Protocol):
    """What the timers call: a stream whose deadline came (it may `arm` itself again)."""

    def keepalive_due(self) -> None: ...


#: A heap entry: [deadline, sequence number, stream (None once disarmed)].
Entry = list[Any]


class KeepaliveTimers:
    """The armed keepalives of one sse binding's streams, on `clock` (an IReactorTime)."""

    def __init__(self, clock: Any) -> None:
        self.clock = clock
        self._heap: list[Entry] = []
        self._seq = itertools.count()
        self._dead = 0
        self._call: Any = None
        self._call_at = 0.0
        #: In `_due`: it schedules the next call itself once every due stream ran.
        self._running = False

    def arm(self, stream: KeepaliveStream, delay: float) -> Entry:
        """Call `stream.keepalive_due()` in `delay` seconds; the entry returned is what
        `disarm` takes."""
        deadline = self.clock.seconds() + delay
        entry: Entry = [deadline, next(self._seq), stream]
        heapq.heappush(self._heap, entry)
        if not self._running and (self._call is None or deadline < self._call_at):
            self._schedule(deadline)
        return entry

    def disarm(self, entry: Entry) -> None:
        """Forget `entry`'s stream (closed): its keepalive never runs."""
        if entry[2] is None:
            return
        entry[2] = None
        self._dead += 1
        heap = self._heap  # changed in place: `_due` may be walking it
        if self._dead == len(heap):
            heap.clear()
            self._dead = 0
            self._cancel()
        elif self._dead * 2 > len(heap) and len(heap) > 64:
            heap[:] = [e for e in heap if e[2] is not None]
            heapq.heapify(heap)
            self._dead = 0

    def armed(self) -> int:
        """Streams armed (for tests)."""
        return len(self._heap) - self._dead

    def _schedule(self, deadline: float) -> None:
        self._cancel()
        self._call_at = deadline
        self._call = self.clock.callLater(max(0.0, deadline - self.clock.seconds()), self._due)

    def _cancel(self) -> None:
        call, self._call = self._call, None
        if call is not None and call.active():
            call.cancel()

    def _due(self) -> None:
        self._call = None
        heap = self._heap
        now = self.clock.seconds()
        self._running = True
        try:
            self._run_due(heap, now)
        finally:
            self._running = False
        while heap and heap[0][2] is None:
            heapq.heappop(heap)
            self._dead -= 1
        if heap:
            self._schedule(heap[0][0])

    def _run_due(self, heap: list[Entry], now: float) -> None:
        while heap and heap[0][0] <= now:
            entry = heapq.heappop(heap)
            stream = entry[2]
            if stream is None:
                self._dead -= 1
                continue
            entry[2] = None
            try:
                stream.keepalive_due()
            except Exception:  # as a DelayedCall's error: said, and the others still run
                _log.failure("a stream's keepalive failed")
