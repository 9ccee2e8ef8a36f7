"""The stall watch's timing (`ssekd.bindings.kafka.stall`), on an injected clock, and how the tail
consumer judges a still partition from the ends it can learn (no broker)."""

from __future__ import annotations

from typing import Any

from confluent_kafka import KafkaError, KafkaException
from twisted.internet.testing import MemoryReactorClock

from ssekd.bindings.kafka.client import KafkaClient
from ssekd.bindings.kafka.settings import ClientSettings
from ssekd.bindings.kafka.stall import StallWatch
from ssekd.bindings.kafka.tail_consumer import TailConsumer


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


class WatermarkConsumer:
    """Answers a partition's end as asked (`queried`) and as the last fetch brought it
    (`fetched`); None is an answer librdkafka gives while it knows nothing."""

    def __init__(self, queried: int | None, fetched: int | None, fails: bool = False) -> None:
        self.queried, self.fetched, self.fails = queried, fetched, fails

    def get_watermark_offsets(self, tp: Any, timeout: float | None = None,
                              cached: bool = False) -> tuple[int, int | None]:
        if self.fails:
            raise KafkaException(KafkaError(KafkaError.LEADER_NOT_AVAILABLE))
        return 0, self.fetched if cached else self.queried


def _tail(events: list[tuple[str, str]]) -> TailConsumer:
    client = KafkaClient(MemoryReactorClock(), ClientSettings(servers=("127.0.0.1:9",),
                                                              stall_timeout=30), "kc",
                         lambda name, detail: events.append((name, detail)))
    client.consume("cache_server", "t", object())  # type: ignore[arg-type]
    tail = client.tails["cache_server"]  # not started: the client is not running
    assert isinstance(tail, TailConsumer)
    tail._apply_changes(WatermarkConsumer(0, 0))
    tail._next[("t", 0)] = 40
    tail._stall.still(tail._next)  # the first look: nothing to compare with yet
    return tail


def test_a_still_partition_the_broker_holds_more_of_is_stalled() -> None:
    events: list[tuple[str, str]] = []
    tail = _tail(events)
    assert tail._stalled(WatermarkConsumer(41, 40))
    assert events == [("BINDING_KAFKA_CONSUMER_STALLED",
                       "t partition 0 at 40 (1 waiting): no record for 30 s; a new consumer "
                       "takes over where this one stood")]
    assert tail._stall.wait == 60, "the next look waits twice as long"


def test_the_higher_end_counts_and_unknown_or_failed_answers_judge_nothing() -> None:
    events: list[tuple[str, str]] = []
    tail = _tail(events)
    assert tail._stalled(WatermarkConsumer(1, 45)), "tansu's low answer: the fetched end counts"
    tail = _tail(events)
    assert not tail._stalled(WatermarkConsumer(40, None)), "at the end: flowing"
    assert not tail._stalled(WatermarkConsumer(None, None)), "nothing known: not judged"
    assert not tail._stalled(WatermarkConsumer(0, 0, fails=True)), "no leader: not judged"
    assert len(events) == 1
