"""How the tail consumer's thread hands what it fetched to the reactor: one `Inbox` per topic.

The thread appends what it fetched and schedules one `reactor.callFromThread` only when none is
pending, so whatever arrives while the reactor is busy (writing the previous batch to a thousand
streams) reaches it as one batch - encoded once, one write per stream - and a reactor with
nothing to do gets each batch at once. The reactor thread never waits on Kafka; the tail thread
waits for the reactor only when an inbox holds `MAX_PENDING` records already (a topic read from
its beginning faster than the reactor can take it).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Protocol

from ssekd.bindings.kafka.message import TIMESTAMP, Message
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

    __slots__ = ("_merging", "calls", "changed", "deliveries", "records", "scheduled", "sink")

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

    def put(self, reactor: Any, method: Callable[..., None], *args: Any) -> None:
        """Queue a call of the sink (tail thread)."""
        with self.changed:
            self.calls.append((method, args))
            self._schedule(reactor)

    def put_records(self, reactor: Any, records: list[Message]) -> None:
        """Queue `on_records`, merged into the last call when that is `on_records` too."""
        with self.changed:
            calls = self.calls
            if calls and calls[-1][1] and calls[-1][1][0] is self._merging:
                self._merging.extend(records)
            else:
                self._merging = records
                calls.append((self.sink.on_records, (self._merging,)))
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

