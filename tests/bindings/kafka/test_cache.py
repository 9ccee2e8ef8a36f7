"""The kafka cache_server on a MemoryReactorClock: encode once per tail group, paused subscribers
catch up from Kafka, and the topic limit."""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.testing import MemoryReactorClock

from ssekd.bindings.kafka.cache import CacheServer, TopicLimitReached
from ssekd.bindings.kafka.client import FetchResult
from ssekd.bindings.kafka.message import Message
from ssekd.bindings.kafka.start import Start
from ssekd.bindings.kafka.topic_log import CacheBounds
from ssekd.bindings.sse_kafka.encoder import KafkaEventEncoder
from ssekd.telemetry.events import EventLog


def _msgs(p: int, start: int, n: int, key: bytes | None = None, ts: int = 0) -> list[Message]:
    return [Message(p, o, key, b"v%d" % o, (), ts) for o in range(start, start + n)]


class FakeClient:
    def __init__(self) -> None:
        self.fetches: list[tuple[int, int, Deferred[FetchResult]]] = []

    def consume(self, *a: Any, **kw: Any) -> None:
        pass

    def fetch(self, topic: str, p: int, offset: int, limit: int,
              max_bytes: int) -> Deferred[FetchResult]:
        d: Deferred[FetchResult] = Deferred()
        self.fetches.append((p, offset, d))
        return d


class Sink:
    def __init__(self) -> None:
        self.writes: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def end(self) -> None:
        pass


class CountingEncoder(KafkaEventEncoder):
    calls = 0

    def encode(self, *a: Any) -> bytes:
        type(self).calls += 1
        return super().encode(*a)


def test_tail_groups_encode_once_and_paused_subscribers_catch_up_from_kafka() -> None:
    clock = MemoryReactorClock()
    client = FakeClient()
    server = CacheServer(clock, client, "cache", EventLog("t"),  # type: ignore[arg-type]
                         bounds=CacheBounds(max_messages=5))
    cache = server.topic("t")
    cache.on_metadata(1, False)
    cache.on_end(0, 0)
    enc = CountingEncoder("t")
    sinks = [Sink() for _ in range(100)]
    subs = [cache.subscribe(enc, s, Start()) for s in sinks]
    clock.advance(0)
    assert len(cache.groups) == 1
    CountingEncoder.calls = 0
    cache.on_records(_msgs(0, 0, 3))
    assert CountingEncoder.calls == 1  # once for a hundred subscribers
    assert all(len(s.writes) == 1 and s.writes[0].count(b"id:") == 3 for s in sinks)
    # one subscriber pauses; twenty records flow past a 5-record cache
    subs[0].pause()
    for o in range(3, 23):
        cache.on_records(_msgs(0, o, 1))
    assert len(sinks[0].writes) == 1
    subs[0].resume()
    clock.advance(0)
    (p, offset, d) = client.fetches[-1]
    assert (p, offset) == (0, 3)  # offsets 3.. are older than the cache: read from Kafka
    d.callback(FetchResult(_msgs(0, 3, 15), None))
    clock.advance(0)
    clock.advance(0)
    data = b"".join(sinks[0].writes).decode()
    got = [line[5:] for line in data.split("\n") if line.startswith("data:")]
    assert got == [f"v{o}" for o in range(23)]
    assert len(cache.groups) == 1 and len(next(iter(cache.groups.values())).members) == 100


def test_a_new_topic_beyond_max_topics_is_refused() -> None:
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


def _values(sink: Sink) -> list[str]:
    data = b"".join(sink.writes).decode()
    return [line[5:] for line in data.split("\n") if line.startswith("data:")]


def test_a_partition_the_broker_lost_starts_over_for_every_stream() -> None:
    """The broker restarted empty: the consumer reads the partition again, from offset 0.
    Streams at the tail, paused, or waiting for a history read all go on with the new records;
    none waits for the lost incarnation's offsets, none gets a stale history read."""
    clock = MemoryReactorClock()
    client = FakeClient()
    events = EventLog("t")
    server = CacheServer(clock, client, "cache", events,  # type: ignore[arg-type]
                         bounds=CacheBounds(max_messages=5))
    cache = server.topic("t")
    cache.on_metadata(1, False)
    cache.on_end(0, 0)
    sinks = [Sink() for _ in range(3)]
    tail, paused, reading = (cache.subscribe(KafkaEventEncoder("t"), s, Start()) for s in sinks)
    clock.advance(0)
    cache.on_records(_msgs(0, 0, 3))
    paused.pause()
    reading.pause()
    cache.on_records(_msgs(0, 3, 10))  # past the 5-record cache: `reading` needs Kafka
    reading.resume()
    clock.advance(0)
    assert [(p, o) for p, o, _ in client.fetches] == [(0, 3)]
    cache.on_rewind(0, 0)  # the consumer found the partition's end below 13
    cache.on_records([Message(0, o, None, b"new%d" % o) for o in range(2)])  # the rebirth
    client.fetches[0][2].callback(FetchResult(_msgs(0, 3, 5), None))  # of the lost records
    paused.resume()
    for _ in range(4):
        clock.advance(0)
    old = [f"v{o}" for o in range(3)]
    assert _values(sinks[0]) == old + [f"v{o}" for o in range(3, 13)] + ["new0", "new1"]
    assert _values(sinks[1]) == old + ["new0", "new1"]
    assert _values(sinks[2]) == old + ["new0", "new1"]
    cache.on_records([Message(0, 2, None, b"new2")])
    assert all(_values(s)[-1] == "new2" for s in sinks)
    assert len(cache.groups) == 1 and set(cache.group_of) == {tail, paused, reading}
    (reset,) = [line for line in events.recent if "BINDING_KAFKA_PARTITION_RESET" in line]
    assert "partition 0: offsets start again at 0 (the cache had reached 13); 3 streams" in reset


def test_a_stream_placed_past_the_end_starts_over_once_the_end_is_known() -> None:
    """A last event id given while the cache was still reading the partition: once the cache
    reaches the end and the id lies past it, the stream starts the partition over."""
    clock = MemoryReactorClock()
    events = EventLog("t")
    server = CacheServer(clock, FakeClient(), "cache", events)  # type: ignore[arg-type]
    cache = server.topic("t")
    cache.on_metadata(1, False)
    cache.on_records(_msgs(0, 0, 3))
    sink = Sink()
    s = cache.subscribe(KafkaEventEncoder("t"), sink, Start(resume={0: 50}))
    clock.advance(0)
    assert s.progress.offsets == {0: 50} and _values(sink) == []
    cache.on_records(_msgs(0, 3, 2))
    cache.on_end(0, 5)
    for _ in range(3):
        clock.advance(0)
    assert _values(sink) == [f"v{o}" for o in range(5)]
    assert any("BINDING_KAFKA_LAST_EVENT_ID_PAST_END" in line and "offset 50 is past the end 5"
               in line for line in events.recent)
    cache.on_records(_msgs(0, 5, 1))
    assert _values(sink)[-1] == "v5"
