"""The binding's keepalive timers (one reactor timer for every stream) run each stream's
keepalive when a timer of its own would have, and hold nothing once the streams are gone."""

from __future__ import annotations

from twisted.internet.testing import MemoryReactorClock

from ssekd.bindings.sse.keepalive import Entry, KeepaliveTimers


class Stream:
    def __init__(self, timers: KeepaliveTimers, clock: MemoryReactorClock, name: str,
                 log: list[tuple[float, str]], every: float | None = None) -> None:
        self.timers, self.clock, self.name, self.log, self.every = timers, clock, name, log, every
        self.entry: Entry | None = None

    def keepalive_due(self) -> None:
        self.log.append((self.clock.seconds(), self.name))
        if self.every is not None:
            self.entry = self.timers.arm(self, self.every)


def test_each_at_its_own_deadline_in_order() -> None:
    clock = MemoryReactorClock()
    timers = KeepaliveTimers(clock)
    log: list[tuple[float, str]] = []
    a = Stream(timers, clock, "a", log, every=10.0)
    b = Stream(timers, clock, "b", log)
    a.entry = timers.arm(a, 10.0)
    clock.advance(3)
    b.entry = timers.arm(b, 5.0)  # due at 8, before a's 10
    assert len(clock.getDelayedCalls()) == 1
    clock.advance(4.9)
    assert log == []
    clock.advance(0.1)
    assert log == [(8.0, "b")]
    clock.advance(2)
    assert log == [(8.0, "b"), (10.0, "a")]
    clock.advance(10)
    assert log[-1] == (20.0, "a")
    assert timers.armed() == 1


def test_disarmed_streams_are_let_go_and_the_timer_too() -> None:
    clock = MemoryReactorClock()
    timers = KeepaliveTimers(clock)
    log: list[tuple[float, str]] = []
    streams = [Stream(timers, clock, str(i), log) for i in range(200)]
    for s in streams:
        s.entry = timers.arm(s, 15.0)
    for s in streams[:150]:
        assert s.entry is not None
        timers.disarm(s.entry)
        assert s.entry[2] is None  # the closed stream is not held until its deadline
    assert timers.armed() == 50
    for s in streams[150:]:
        assert s.entry is not None
        timers.disarm(s.entry)
    assert timers.armed() == 0
    assert not clock.getDelayedCalls()
    clock.advance(20)
    assert log == []


def test_a_stream_closed_by_another_keepalive_is_skipped() -> None:
    clock = MemoryReactorClock()
    timers = KeepaliveTimers(clock)
    log: list[tuple[float, str]] = []
    second = Stream(timers, clock, "second", log)

    class Closer(Stream):
        def keepalive_due(self) -> None:
            super().keepalive_due()
            assert second.entry is not None
            timers.disarm(second.entry)

    first = Closer(timers, clock, "first", log)
    first.entry = timers.arm(first, 1.0)
    second.entry = timers.arm(second, 1.0)
    clock.advance(1)
    assert log == [(1.0, "first")]
    assert timers.armed() == 0
    assert not clock.getDelayedCalls()
