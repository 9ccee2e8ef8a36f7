"""Unit test of one piece: the sse-kafka proxy keeps an encoder only while a stream uses it, so a
client walking through many `{key}` values of a filter route leaves nothing behind."""

from __future__ import annotations

import gc
from typing import Any

from ssekd.bindings.api import StreamRequest
from ssekd.bindings.kafka.start import Start
from ssekd.bindings.sse_kafka.proxy import SseKafkaProxy, SseKafkaRoute
from ssekd.patterns import Pattern
from ssekd.telemetry.events import EventLog


class FakeTopic:
    class log:
        partition_count = 1


class FakeCache:
    """Holds the encoder of each open subscription, as the real cache's subscriptions do."""

    def __init__(self) -> None:
        self.held: list[Any] = []

    def subscribe(self, topic: str, encoder: Any, sink: Any, start: Start) -> Any:
        self.held.append(encoder)
        return object()

    def topic(self, name: str) -> Any:
        return FakeTopic()


def test_encoders_live_as_long_as_their_streams() -> None:
    cache = FakeCache()
    route = SseKafkaRoute((Pattern.compile("/bykey/{topic}/{key}"),), "cc",
                          {"topic": "${params.topic}", "filters": [{"key": "${params.key}"}]})
    proxy = SseKafkaProxy("p", (route,), {"cc": cache}, EventLog("t"))
    for i in range(100):
        proxy.open(StreamRequest(f"/bykey/items/k{i}", None, {}, None, "GET"), sink=None)
    assert len(proxy._encoders) == 100
    kept = cache.held[:3]
    cache.held.clear()  # the other streams ended
    gc.collect()
    assert len(proxy._encoders) == 3
    proxy.open(StreamRequest("/bykey/items/k0", None, {}, None, "GET"), sink=None)
    assert cache.held[0] is kept[0], "a live encoder is shared by a new stream with its filters"


def test_a_new_topic_beyond_max_topics_is_refused() -> None:
    from twisted.internet.testing import MemoryReactorClock

    from ssekd.bindings.kafka.cache import CacheServer, TopicLimitReached

    class Client:
        def __init__(self) -> None:
            self.consumed: list[str] = []

        def consume(self, owner: str, topic: str, sink: Any, from_end: bool = False,
                    give_up_after: int | None = None) -> None:
            self.consumed.append(topic)

    client = Client()
    server = CacheServer(MemoryReactorClock(), client, "cs", EventLog("t"),  # type: ignore[arg-type]
                         bootstrap=("events",), max_topics=2)
    server.topic("a")
    server.topic("b")
    assert server.topic("a") is server.topics["a"], "known topics are always served"
    try:
        server.topic("c")
    except TopicLimitReached:
        pass
    else:
        raise AssertionError("a third topic must be refused")
    server.topic("events")  # bootstrap topics are always followed
    assert client.consumed == ["a", "b", "events"]
