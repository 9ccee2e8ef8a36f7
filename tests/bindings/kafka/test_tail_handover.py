"""The tail consumer's topic list on its own (no broker): a cache_server rebuilt by a reload
asks for a topic its predecessor followed, and gets it - unassigned, then assigned again from
the start for the new cache - instead of being ignored while the old cache goes on getting it."""

from __future__ import annotations

from typing import Any

from twisted.internet.testing import MemoryReactorClock

from ssekd.bindings.kafka.client import KafkaClient
from ssekd.bindings.kafka.settings import ClientSettings
from ssekd.bindings.kafka.tail_consumer import TailConsumer


class Consumer:
    def __init__(self) -> None:
        self.unassigned: list[Any] = []

    def incremental_unassign(self, partitions: list[Any]) -> None:
        self.unassigned += [(tp.topic, tp.partition) for tp in partitions]


def test_a_new_cache_for_a_followed_topic_takes_it_over() -> None:
    client = KafkaClient(MemoryReactorClock(), ClientSettings(servers=("127.0.0.1:9",)), "kc",
                         lambda name, detail: None)
    consumer = Consumer()
    old_cache, new_cache = object(), object()
    client.consume("cache_server", "t", old_cache)  # type: ignore[arg-type]
    tail = client.tails["cache_server"]  # not started: the client is not running
    assert isinstance(tail, TailConsumer) and not tail.is_alive()
    assert tail._apply_changes(consumer)
    tail._assigned["t"] = 2  # as if the refresh assigned its two partitions
    tail._next[("t", 0)] = 40
    client.consume("cache_server", "t", old_cache)  # type: ignore[arg-type]
    assert not tail._apply_changes(consumer), "the same cache asking again changes nothing"
    client.consume("cache_server", "t", new_cache)  # type: ignore[arg-type]
    assert tail._apply_changes(consumer), "a new cache: metadata and assignment are due"
    assert tail._follows["t"].sink is new_cache
    assert consumer.unassigned == [("t", 0), ("t", 1)]
    assert ("t", 0) not in tail._next, "read again from the start for the new cache"
