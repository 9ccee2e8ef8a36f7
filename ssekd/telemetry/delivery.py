"""Delivery latency: from a record's Kafka timestamp to its write on a stream's socket.

It is the figure a dashboard shows first: how late a browser sees what was produced. It is
measured for records delivered as they arrive, at the tail, where the cache writes each new
batch to every stream reading it within the same reactor turn: the kafka client marks the
batch it hands to the cache (`begin`/`end`, around the cache's `on_records`), and each stream
that writes during it reports the bytes it wrote and how many events they hold (`wrote`).
Records a stream reads from history while it catches up are not counted: their age says how
far back the stream started, not how late delivery is.

At the end of the batch each distinct write is observed once with a weight, the number of
streams it reached, so the cost is per group of streams, not per stream: a write holding every
record of the batch (streams without filters, the common case) is observed per record, from its
own timestamp; one holding fewer (a filter held some back) from the batch's oldest record,
which can only overstate. The time of the write is the end of the batch: the last stream's
write, so the fan-out itself counts in. Timestamps are wall clock, the producer's against
ours: clocks that disagree shift the figures (never below 0).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Protocol


class Histogram(Protocol):
    """Where latencies go (`ssekd.telemetry.metrics.Histogram`; a leaf here, as metrics.py
    makes the one `Deliveries` of a process)."""

    def observe_many(self, value: float, times: int) -> None: ...

    def observe_ages(self, now: float, stamps: list[int], times: int) -> None: ...


class _Write:
    """One distinct write of a batch: its bytes, events in it, where it is observed, and how
    many streams it went to."""

    __slots__ = ("data", "events", "histogram", "streams")

    def __init__(self, data: bytes, events: int, histogram: Histogram) -> None:
        self.data = data
        self.events = events
        self.histogram = histogram
        self.streams = 1


class Deliveries:
    """The batch of records being delivered at the tail now, and what streams wrote of it. One
    per process (`Metrics.deliveries`); only the reactor thread uses it."""

    __slots__ = ("_stamps", "_writes", "clock")

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        #: Timestamps (ms) of the batch being delivered; None between batches.
        self._stamps: list[int] | None = None
        self._writes: list[_Write] = []

    @property
    def active(self) -> bool:
        return self._stamps is not None

    def begin(self, stamps: Iterable[int]) -> None:
        """A batch of records with these Kafka timestamps (epoch ms; 0 or less: none) is being
        delivered."""
        self._stamps = [t for t in stamps if t > 0]
        self._writes = []

    def wrote(self, data: bytes, events: int, histogram: Histogram, streams: int = 1) -> None:
        """`streams` streams wrote `data`, holding `events` events, during the batch."""
        if self._stamps is None:
            return
        writes = self._writes
        if writes:
            last = writes[-1]
            if last.data is data and last.histogram is histogram:
                last.streams += streams
                return
        write = _Write(data, events, histogram)
        write.streams = streams
        writes.append(write)

    def end(self) -> None:
        stamps, self._stamps = self._stamps, None
        writes, self._writes = self._writes, []
        if not stamps or not writes:
            return
        now = self.clock() * 1000.0
        oldest = min(stamps)
        for w in writes:  # milliseconds of Kafka timestamps, observed in seconds
            if w.events == len(stamps):
                w.histogram.observe_ages(now, stamps, w.streams)
            else:
                w.histogram.observe_many(max(0.0, now - oldest) / 1000.0, w.streams * w.events)
