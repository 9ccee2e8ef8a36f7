"""The stall watch's timing (`ssekd.bindings.kafka.stall`), on an injected clock."""

from __future__ import annotations

from ssekd.bindings.kafka.stall import StallWatch


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_look_is_due_every_timeout_and_finds_what_did_not_move() -> None:
    clock = Clock()
    watch: StallWatch[str] = StallWatch(30, clock)
    assert not watch.due()
    clock.now += 30
    assert watch.due()
    assert watch.still({"a": 5, "b": 7}) == [], "the first look has nothing to compare with"
    assert not watch.due(), "a look starts the next wait"
    clock.now += 30
    assert watch.still({"a": 5, "b": 9, "c": 1}) == ["a"], "b moved, c is new"


def test_the_wait_doubles_while_stalled_up_to_the_longest_and_flowing_resets_it() -> None:
    clock = Clock()
    watch: StallWatch[str] = StallWatch(30, clock, longest=100)
    waits = []
    for _ in range(4):
        clock.now += watch.wait
        assert watch.due()
        watch.still({"a": 1})
        watch.replaced()
        waits.append(watch.wait)
    assert waits == [60, 100, 100, 100]
    clock.now += 99
    assert not watch.due()
    clock.now += 1
    watch.still({"a": 2})
    watch.flowing()
    assert watch.wait == 30
