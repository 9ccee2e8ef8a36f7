"""The roles the kafka binding offers: `KafkaCache` (cache_server, cache_client), what sse-kafka
and http-kafka subscribe to, and `KafkaClientBinding` (client), what a cache_server consumes
through.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from twisted.internet.defer import Deferred

from ssekd.bindings.kafka.history import FetchResult
from ssekd.bindings.kafka.inbox import TopicSink
from ssekd.bindings.kafka.start import Start
from ssekd.bindings.kafka.subscription import EventEncoder, Subscription
from ssekd.spi.stream import EventSink


@runtime_checkable
class KafkaCache(Protocol):
    """Per-topic caches that sse-kafka and http-kafka read (cache_server, cache_client)."""

    def subscribe(self, topic: str, encoder: EventEncoder, sink: EventSink,
                  start: Start) -> Subscription:
        """Feed `sink` the events of `topic` from `start`, encoded by `encoder`."""


@runtime_checkable
class KafkaClientBinding(Protocol):
    """Consumes topics and reads history for a cache_server."""

    def consume(self, owner: str, topic: str, sink: TopicSink, from_end: bool = False,
                give_up_after: int | None = None) -> None: ...

    def unconsume(self, owner: str, topic: str) -> None: ...

    def fetch(self, topic: str, partition: int, offset: int, limit: int,
              max_bytes: int) -> Deferred[FetchResult]: ...
