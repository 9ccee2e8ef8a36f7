"""Unit test of one piece: the topic's cache alone keeps its subscriptions' tail groups and
lagging set, from what the subscriptions report (reaching the tail, pausing, closing)."""

from __future__ import annotations

from typing import Any

from twisted.internet.testing import MemoryReactorClock

from ssekd.bindings.kafka.cache import CacheServer
from ssekd.bindings.kafka.message import new_message
from ssekd.bindings.kafka.start import Start
from ssekd.bindings.sse_kafka.encoder import KafkaEventEncoder
from ssekd.telemetry.events import EventLog
from tests.support.subscriptions import Sink


class Client:
    def consume(self, *a: Any, **kw: Any) -> None:
        pass


def test_groups_and_the_lagging_set_follow_what_subscriptions_report() -> None:
    clock = MemoryReactorClock()
    server = CacheServer(clock, Client(), "cache", EventLog("t"))  # type: ignore[arg-type]
    cache = server.topic("t")
    cache.on_metadata(1, False)
    cache.on_end(0, 0)
    enc = KafkaEventEncoder("t")
    a, b = (cache.subscribe(enc, Sink(), Start()) for _ in range(2))
    assert cache.lagging == {a, b}
    clock.advance(0)
    assert cache.lagging == set() and len(cache.groups) == 1
    (group,) = cache.groups.values()
    assert list(group.members) == [a, b] and cache.group_of == {a: group, b: group}

    a.close()
    assert list(group.members) == [b] and cache.group_of == {b: group}
    assert cache.lagging == set(), "a closed subscription is not woken again"

    cache.on_records([new_message(0, 0, None, b"x")])
    b.pause()
    assert cache.groups == {} and cache.group_of == {}, "its last member left: the group goes"
    assert cache.lagging == {b} and b.progress.offsets == {0: 1}
    cache.on_records([new_message(0, 1, None, b"y")])
    b.resume()
    clock.advance(0)
    assert cache.lagging == set() and list(cache.group_of) == [b]
    b.close()
    assert (cache.groups, cache.group_of, cache.lagging) == ({}, {}, set())
