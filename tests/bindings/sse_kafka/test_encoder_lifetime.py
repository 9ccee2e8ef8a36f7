"""The sse-kafka proxy keeps an encoder only while a stream uses it, so a client walking through
many `{key}` values of a filter route leaves nothing behind."""

from __future__ import annotations

import gc
from typing import Any

from ssekd.bindings.kafka.start import Start
from ssekd.bindings.sse.roles import StreamRequest
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
