"""The table of writes by correlation id (`replay.Replays`): a repeat waits for a pending write,
gets the outcome of a settled one, writes again after a failure; settled entries are forgotten
after the window or beyond the count, pending ones never. Timing on a MemoryReactorClock."""

from __future__ import annotations

from twisted.internet.testing import MemoryReactorClock
from twisted.python.failure import Failure

from ssekd.bindings.http_kafka.replay import ENTRY_BYTES, Replays, State
from ssekd.bindings.kafka.producer import Delivered, WriteFailed


def test_a_repeat_waits_for_the_pending_write_and_gets_its_outcome() -> None:
    clock = MemoryReactorClock()
    replays = Replays(clock, window=60)
    write = replays.begin("k-1")
    first, repeat = write.acknowledged(), replays.get("k-1")
    assert repeat is write and repeat.state is State.PENDING
    got: list[object] = []
    first.addCallback(got.append)
    repeat.acknowledged().addCallback(got.append)
    replays.settle("k-1", write, Delivered(2, 40))
    assert got == [Delivered(2, 40), Delivered(2, 40)]
    later: list[object] = []
    replays.get("k-1").acknowledged().addCallback(later.append)  # type: ignore[union-attr]
    assert later == [Delivered(2, 40)] and write.state is State.WRITTEN


def test_a_failed_write_fails_its_waiters_and_the_next_repeat_writes_anew() -> None:
    clock = MemoryReactorClock()
    replays = Replays(clock, window=60)
    write = replays.begin("k-1")
    failures: list[Failure] = []
    write.acknowledged().addErrback(failures.append)
    replays.settle("k-1", write, Failure(WriteFailed("timed out", retriable=True)))
    assert failures and failures[0].check(WriteFailed)
    assert replays.get("k-1") is write and write.state is State.FAILED
    again = replays.begin("k-1")
    assert again is not write and replays.get("k-1") is again


def test_settled_writes_are_forgotten_after_the_window_pending_ones_are_not() -> None:
    clock = MemoryReactorClock()
    replays = Replays(clock, window=10)
    pending = replays.begin("pending")
    done = replays.begin("done")
    replays.settle("done", done, Delivered(0, 1))
    clock.advance(9)
    assert replays.get("done") is done
    clock.advance(2)
    assert replays.get("done") is None
    clock.advance(1000)
    assert replays.get("pending") is pending


def test_at_most_max_entries_oldest_settled_first() -> None:
    clock = MemoryReactorClock()
    replays = Replays(clock, window=600, max_entries=3)
    writes = {}
    for name in ("a", "b", "c", "d"):
        writes[name] = replays.begin(name)
        replays.settle(name, writes[name], Delivered(0, 1))
        clock.advance(1)
    assert len(replays) == 3
    assert replays.get("a") is None
    assert [replays.get(n) is writes[n] for n in "bcd"] == [True, True, True]


def test_what_the_table_holds_is_bounded_in_bytes_not_only_in_entries() -> None:
    """Long correlation ids cost more: the table forgets the oldest settled writes once they
    cost more than `max_bytes`, however few they are, and its count matches what it holds."""
    clock = MemoryReactorClock()
    replays = Replays(clock, window=600, max_entries=100_000, max_bytes=10 * (ENTRY_BYTES + 300))
    for i in range(50):
        name = f"{i:03d}" + "k" * 297
        replays.settle(name, replays.begin(name), Delivered(0, i))
    assert len(replays) == 10
    assert replays.bytes == 10 * (ENTRY_BYTES + 300)
    assert replays.get("049" + "k" * 297) is not None and replays.get("039" + "k" * 297) is None


def test_the_byte_count_follows_replacements_and_expiry() -> None:
    clock = MemoryReactorClock()
    replays = Replays(clock, window=10)
    write = replays.begin("a")
    replays.settle("a", write, Failure(WriteFailed("no")))
    replays.begin("a")  # a failed write written again: still one entry
    assert replays.bytes == ENTRY_BYTES + 1
    replays.settle("a", replays.get("a"), Delivered(0, 1))  # type: ignore[arg-type]
    clock.advance(11)
    assert replays.get("a") is None and replays.bytes == 0
