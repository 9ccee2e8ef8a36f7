"""How the tail consumer's thread hands what it fetched to the reactor: one `Inbox` per topic.

The thread appends what it fetched and schedules one `reactor.callFromThread` only when none is
pending, so whatever arrives while the reactor is busy (writing the previous batch to a thousand
streams) reaches it as one batch - encoded once, one write per stream - and a reactor with
nothing to do gets each batch at once.

Records merge across the partition ends between them. At the tail every fetch reaches the end
of the partitions it brought, so what waits for a busy reactor reads "records, end, end,
records, end, ...": merged only while consecutive, a reactor that fell behind took a few dozen
batches per turn and wrote each to every stream on its own - a send per stream and batch, which
kept it behind (measured at 1,000 streams x 250 events/s: up to 51 batches in one turn, p99
over 2 s). So a batch joins the records queued before the ends that follow them, and those ends
are made after it. That order changes nothing a stream sees: an end of partition p only says
the consumer was at p's end (the log's position there never goes back, and records of p coming
after it would reset that flag anyway), and what an end sets off (streams placed ahead judged,
floors settled, waiting streams loaded) is the same or more lenient with more of the log read.
The one exception is the *first* end of a partition, which fixes where its live streams start
(`PartitionLog.live_from`): a batch holding records of a partition whose first end is queued
after the records does not join them. The reactor thread never waits on Kafka; the tail thread
waits for the reactor only when an inbox holds `MAX_PENDING` records already (a topic read from
its beginning faster than the reactor can take it).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Protocol

from ssekd.bindings.kafka.message import PARTITION, TIMESTAMP, Message
from ssekd.telemetry.delivery import Deliveries

#: Records taken from librdkafka per `consume` call (one batch handed to the reactor).
BATCH = 1000
#: Records an inbox holds at most before the tail thread waits for the reactor to take them.
MAX_PENDING = 20 * BATCH


class TopicSink(Protocol):
    """Where the tail consumer delivers one topic's data (the cache's `TopicCache`)."""

    def on_metadata(self, partitions: int, compacted: bool | None) -> None: ...

    def on_records(self, records: list[Message]) -> None: ...

    def on_end(self, partition: int, next_offset: int) -> None: ...

    def on_rewind(self, partition: int, origin: int) -> None:
        """The broker lost the partition: it is read again from `origin` (records follow)."""

    def on_missing(self) -> None:
        """The topic was looked for too often without being found: it is no longer consumed."""


class Inbox:
    """What the tail thread handed over for one topic and the reactor has not taken yet: the
    sink's calls in order, records of consecutive batches merged into one `on_records`."""

    __slots__ = ("_ended", "_first_ends", "_merging", "_trailing", "calls", "changed",
                 "deliveries", "records", "scheduled", "sink")

    def __init__(self, sink: TopicSink) -> None:
        self.sink = sink
        #: Told of each batch of records as the sink delivers it (`sse.delivery.latency`).
        self.deliveries: Deliveries | None = None
        self.changed = threading.Condition()
        #: (sink method, args) in the order the thread made them
        self.calls: list[tuple[Callable[..., None], tuple[Any, ...]]] = []
        self.records = 0
        self.scheduled = False
        #: the records list of the last queued `on_records` call, which later batches join
        self._merging: list[Message] = []
        #: Whether every call queued after that one is an `on_end` (module docstring).
        self._trailing = False
        #: Partitions an `on_end` was queued for, ever (until the partition is read again).
        self._ended: set[int] = set()
        #: The partitions among those trailing ends whose first end it is.
        self._first_ends: set[int] = set()

    def put(self, reactor: Any, method: Callable[..., None], *args: Any) -> None:
        """Queue a call of the sink (tail thread)."""
        with self.changed:
            self.calls.append((method, args))
            if method == self.sink.on_end:
                partition = args[0]
                if partition not in self._ended:
                    self._ended.add(partition)
                    self._first_ends.add(partition)
            else:
                self._trailing = False
                if method == self.sink.on_rewind:  # read again: its next end is a first one
                    self._ended.discard(args[0])
            self._schedule(reactor)

    def put_records(self, reactor: Any, records: list[Message]) -> None:
        """Queue `on_records`, merged into the last queued records when only ends came after
        them, none of them a first end of a partition these records hold (module docstring)."""
        with self.changed:
            if self._trailing and self.calls and not (
                    self._first_ends and self._first_ends.intersection(
                        [m[PARTITION] for m in records])):
                self._merging.extend(records)
            else:
                self._merging = records
                self.calls.append((self.sink.on_records, (self._merging,)))
                self._trailing = True
                self._first_ends.clear()
            self.records += len(records)
            self._schedule(reactor)

    def _schedule(self, reactor: Any) -> None:
        if not self.scheduled:
            self.scheduled = True
            reactor.callFromThread(self.take)

    def wait_room(self, stopping: threading.Event) -> None:
        """Wait (tail thread) while the reactor has `MAX_PENDING` records still to take."""
        with self.changed:
            while self.records >= MAX_PENDING and not stopping.is_set():
                self.changed.wait(0.1)

    def take(self) -> None:
        """Make every queued call (reactor thread)."""
        with self.changed:
            calls, self.calls = self.calls, []
            self._trailing = False
            self._first_ends.clear()
            self.records = 0
            self.scheduled = False
            self.changed.notify_all()
        deliveries = self.deliveries
        records = self.sink.on_records if deliveries is not None else None
        for method, args in calls:
            if deliveries is not None and method == records:
                deliveries.begin([m[TIMESTAMP] for m in args[0]])
                try:
                    method(*args)
                finally:
                    deliveries.end()
            else:
                method(*args)

