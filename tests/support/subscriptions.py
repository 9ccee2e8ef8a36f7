"""Fakes around one `Subscription` (`ssekd.bindings.kafka.subscription`): the sse stream it
writes to, and the topic cache that owns it, on a `MemoryReactorClock` with Kafka reads that
the test answers by hand."""

from __future__ import annotations

from twisted.internet.defer import Deferred
from twisted.internet.testing import MemoryReactorClock

from ssekd.bindings.kafka.history import FetchResult
from ssekd.bindings.kafka.subscription import SharedSteps, Subscription
from ssekd.bindings.kafka.topic_log import TopicLog
from ssekd.event_ids import ProgressState


class Sink:
    def __init__(self) -> None:
        self.writes: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def end(self) -> None:
        pass

    def values(self) -> list[str]:
        text = b"".join(self.writes).decode()
        return [line[5:] for line in text.split("\n") if line.startswith("data:")]


class RecordingCache:
    """A topic's cache (`SubscribedCache`) that records what its subscription reports and the
    reads it asks for."""

    def __init__(self, log: TopicLog, live: bool = False) -> None:
        self.reactor = MemoryReactorClock()
        self.log = log
        self.live = live
        self.fetches: list[tuple[int, int, Deferred[FetchResult]]] = []
        self.reports: list[str] = []
        self.catch_up_bytes = 64 * 1024
        self.steps = SharedSteps()

    def fetch(self, partition: int, offset: int, limit: int,
              max_bytes: int) -> Deferred[FetchResult]:
        d: Deferred[FetchResult] = Deferred()
        self.fetches.append((partition, offset, d))
        return d

    def history_unavailable(self, partition: int, offset: int, error: str | None) -> None:
        self.reports.append("unavailable")

    def placed_ahead(self, s: Subscription) -> None:
        self.reports.append("ahead")

    def reached_tail(self, s: Subscription) -> None:
        self.reports.append("tail")

    def left_tail(self, s: Subscription) -> ProgressState:
        self.reports.append("left")
        return s.progress.copy()

    def gone(self, s: Subscription) -> None:
        self.reports.append("gone")

    def await_loaded(self, s: Subscription) -> None:
        self.reports.append("await loaded")

    def run(self) -> None:
        """Every step due now (a step schedules the next on a later turn)."""
        clock = self.reactor
        while any(c.getTime() <= clock.seconds() for c in clock.getDelayedCalls()):
            clock.advance(0)
