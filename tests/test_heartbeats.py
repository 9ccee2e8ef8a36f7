"""The parent's heartbeat of its workers on a MemoryReactorClock: a worker that answers stays, one
that stops answering is found stuck after the timeout (a starting one gets the start-up grace),
and a parent that did not run for a while judges nobody on that gap."""

from __future__ import annotations

from twisted.internet import defer
from twisted.internet.testing import MemoryReactorClock

from ssekd.health import Health
from ssekd.heartbeats import BUSY_LIMIT, STARTUP_GRACE, Heartbeats, main_thread_cpu


class Workers:
    """Answers heartbeats for the workers in `answering`, after `slow` seconds for those in
    `slow`; the others never answer."""

    def __init__(self) -> None:
        self.answering: set[str] = set()
        self.slow: dict[str, float] = {}
        self.clock: MemoryReactorClock | None = None
        #: CPU seconds of each worker's reactor thread per second of the clock (None: unknown).
        self.cpu_rate: dict[int, float] = {}
        self.stuck: list[tuple[int, float]] = []
        self.answered: list[int] = []

    def reactor_cpu(self, index: int) -> float | None:
        rate = self.cpu_rate.get(index)
        if rate is None or self.clock is None:
            return None
        return rate * self.clock.seconds()

    def ask(self, path: str) -> defer.Deferred[bool]:
        if path in self.slow and self.clock is not None:
            later: defer.Deferred[bool] = defer.Deferred()
            self.clock.callLater(self.slow[path], later.callback, True)
            return later
        if path in self.answering:
            return defer.succeed(True)
        return defer.Deferred()  # never answered: the heartbeat's own timeout ends it


def beats(timeout: float = 10.0) -> tuple[Heartbeats, Workers, MemoryReactorClock]:
    clock = MemoryReactorClock()
    workers = Workers()
    hb = Heartbeats(clock, lambda i: f"w{i}", timeout,
                    lambda i, silent: workers.stuck.append((i, silent)), workers.answered.append,
                    ask=workers.ask, reactor_cpu=workers.reactor_cpu)
    workers.clock = clock
    return hb, workers, clock


def run(clock: MemoryReactorClock, seconds: float) -> None:
    for _ in range(int(seconds * 10)):
        clock.advance(0.1)


def test_a_worker_that_stops_answering_is_stuck_after_the_timeout() -> None:
    hb, workers, clock = beats(timeout=10.0)
    workers.answering = {"w1", "w2"}
    hb.watch(1)
    hb.watch(2)
    hb.start()
    run(clock, 3)
    assert workers.stuck == [] and {1, 2} <= set(workers.answered)
    workers.answering = {"w2"}  # worker 1's reactor is blocked from now on
    run(clock, 9.5)
    assert workers.stuck == []
    run(clock, 2)
    assert [i for i, _ in workers.stuck] == [1]
    assert 10.0 < workers.stuck[0][1] <= 11.5
    assert 1 not in hb.started  # forgotten until it is started again
    run(clock, 30)
    assert [i for i, _ in workers.stuck] == [1]
    hb.stop()


def test_a_worker_that_answers_late_within_the_timeout_is_not_stuck() -> None:
    """A reactor that turns slowly (seconds per turn on a busy machine) answers each heartbeat
    late; an answer within the timeout shows it turns, so it is never killed for it."""
    hb, workers, clock = beats(timeout=10.0)
    workers.answering = {"w1"}
    hb.watch(1)
    hb.start()
    run(clock, 3)
    workers.slow = {"w1": 7.0}
    run(clock, 60)
    assert workers.stuck == []
    assert workers.answered.count(1) >= 3 + 60 // 8
    hb.stop()


def test_a_silent_worker_whose_reactor_uses_the_cpu_is_busy_until_the_limit() -> None:
    """A reactor thread that keeps running (turns of many seconds on a machine with more work
    than cores) is not killed at the timeout; one that spins that long without ever answering
    is, after BUSY_LIMIT timeouts; a blocked one (no CPU) is, at the timeout."""
    hb, workers, clock = beats(timeout=10.0)
    workers.answering = {"w1", "w2", "w3"}
    workers.cpu_rate = {1: 0.1, 2: 0.1, 3: 0.0}
    for i in (1, 2, 3):
        hb.watch(i)
    hb.start()
    run(clock, 3)
    workers.answering = set()  # from now on none answers
    run(clock, 12)
    assert [i for i, _ in workers.stuck] == [3]  # blocked: no CPU
    run(clock, 30)
    workers.answering = {"w1"}  # worker 1's long turns end
    run(clock, 10 * BUSY_LIMIT)
    assert [i for i, _ in workers.stuck] == [3, 2]  # worker 2 spun without answering
    assert 10 * BUSY_LIMIT < workers.stuck[1][1] <= 10 * BUSY_LIMIT + 1.5
    hb.stop()


def test_the_cpu_of_a_process_main_thread_is_read() -> None:
    import os
    import time
    before = main_thread_cpu(os.getpid())
    assert before is not None
    end = time.process_time() + 0.2
    while time.process_time() < end:
        pass
    after = main_thread_cpu(os.getpid())
    assert after is not None and after - before >= 0.1
    assert main_thread_cpu(2 ** 22 + 1) is None  # no such process


def test_a_starting_worker_has_the_start_up_grace() -> None:
    hb, workers, clock = beats(timeout=2.0)
    hb.watch(1)
    hb.start()
    run(clock, STARTUP_GRACE - 1)
    assert workers.stuck == []
    run(clock, 2)
    assert [i for i, _ in workers.stuck] == [1]
    hb.stop()


def test_a_parent_that_did_not_run_judges_nobody_on_that_gap() -> None:
    """SIGSTOP of the parent (or a long pause of its reactor): on resuming, every worker looks
    silent for the whole pause; none may be killed for it."""
    hb, workers, clock = beats(timeout=5.0)
    workers.answering = {"w1"}
    hb.watch(1)
    hb.start()
    run(clock, 3)
    workers.answering = set()  # the parent stops: nothing is asked, nothing answered
    clock.advance(60)          # one jump: the reactor did not run meanwhile
    run(clock, 1)
    assert workers.stuck == []
    workers.answering = {"w1"}
    run(clock, 20)
    assert workers.stuck == []
    hb.stop()


def test_a_worker_whose_parent_stops_checking_fails_liveness() -> None:
    clock = MemoryReactorClock()
    health = Health(clock)
    assert health.liveness()[0]  # no parent: nothing to miss
    health.supervisor_timeout = 10.0
    assert health.liveness()[0]  # not checked yet: a worker starting
    health.supervised()
    clock.advance(9.0)
    assert health.liveness() == (True, {"status": "live", "lag_ms": 0.0})
    clock.advance(2.0)
    assert health.liveness() == (False, {"status": "unsupervised", "lag_ms": 0.0,
                                         "supervisor_silent_s": 11.0})
    health.supervised()
    assert health.liveness()[0]
