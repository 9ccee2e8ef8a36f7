"""The kafka cache_server on a MemoryReactorClock: encode once per tail group and per shared
catch-up step, paused subscribers catch up from Kafka, and the topic limit."""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.testing import MemoryReactorClock

from ssekd.bindings.kafka.cache import (
    MAX_WAITING_FOR_COUNT,
    PAST_END_GRACE,
    CacheServer,
    TopicLimitReached,
)
from ssekd.bindings.kafka.history import FetchResult
from ssekd.bindings.kafka.message import Message, new_message
from ssekd.bindings.kafka.start import Start
from ssekd.bindings.kafka.subscription import SharedSteps
from ssekd.bindings.kafka.topic_log import CacheBounds
from ssekd.bindings.sse_kafka.encoder import KafkaEventEncoder
from ssekd.event_ids import ProgressState
from ssekd.telemetry.events import EventLog
from tests.support.subscriptions import Sink


def _msgs(p: int, start: int, n: int, key: bytes | None = None, ts: int = 0) -> list[Message]:
    return [new_message(p, o, key, b"v%d" % o, (), ts) for o in range(start, start + n)]


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
    cache.on_records([new_message(0, o, None, b"new%d" % o) for o in range(2)])  # the rebirth
    client.fetches[0][2].callback(FetchResult(_msgs(0, 3, 5), None))  # of the lost records
    paused.resume()
    for _ in range(4):
        clock.advance(0)
    old = [f"v{o}" for o in range(3)]
    assert _values(sinks[0]) == old + [f"v{o}" for o in range(3, 13)] + ["new0", "new1"]
    assert _values(sinks[1]) == old + ["new0", "new1"]
    assert _values(sinks[2]) == old + ["new0", "new1"]
    cache.on_records([new_message(0, 2, None, b"new2")])
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
    _run(clock)
    assert _values(sink) == [], "another cache may have read further: the records may come"
    clock.advance(PAST_END_GRACE)
    _run(clock)
    assert _values(sink) == [f"v{o}" for o in range(5)]
    assert any("BINDING_KAFKA_LAST_EVENT_ID_PAST_END" in line and "offset 50 is past the end 5"
               in line for line in events.recent)
    cache.on_records(_msgs(0, 5, 1))
    assert _values(sink)[-1] == "v5"


def test_an_id_ahead_of_a_live_cache_waits_for_its_records_instead_of_starting_over() -> None:
    """Another worker's (or daemon's) cache read further than this one: a browser coming back
    here with an id past this cache's end gets what follows its id once this cache reads it,
    and nothing it already had. Only an end reached below the id starts the partition over."""
    clock = MemoryReactorClock()
    events = EventLog("t")
    server = CacheServer(clock, FakeClient(), "cache", events)  # type: ignore[arg-type]
    cache = server.topic("t")
    cache.on_metadata(1, False)
    cache.on_records(_msgs(0, 0, 5))
    cache.on_end(0, 5)
    sink = Sink()
    s = cache.subscribe(KafkaEventEncoder("t"), sink, Start(resume={0: 8}))
    _run(clock)
    assert s.at_tail and _values(sink) == []
    cache.on_records(_msgs(0, 5, 5))  # the records it had (5, 6, 7) and two new ones
    cache.on_end(0, 10)
    _run(clock)
    assert _values(sink) == ["v8", "v9"]
    assert not any("PAST_END" in line for line in events.recent)
    # an id past an end reached after it was placed is of a partition the broker lost
    lost = Sink()
    cache.subscribe(KafkaEventEncoder("t"), lost, Start(resume={0: 40}))
    _run(clock)
    cache.on_records(_msgs(0, 10, 1))
    cache.on_end(0, 11)
    _run(clock)
    assert _values(lost) == []
    clock.advance(PAST_END_GRACE)  # the consumer is still at the end, below the id
    _run(clock)
    assert _values(lost) == [f"v{o}" for o in range(11)]
    assert any("offset 40 is past the end 11" in line for line in events.recent)


def _catching_up(compacted: bool = False, records: int = 60
                 ) -> tuple[MemoryReactorClock, Any]:
    """A topic whose cache holds `records` records of one partition and reached its end, read
    in steps of about 10 records (`catch-up-bytes` 1,300: ~120 bytes counted per record)."""
    clock = MemoryReactorClock()
    server = CacheServer(clock, FakeClient(), "cache", EventLog("t"),  # type: ignore[arg-type]
                         catch_up_bytes=1300)
    cache = server.topic("t")
    cache.on_metadata(1, compacted)
    cache.on_records(_msgs(0, 0, records, key=b"k" if compacted else None))
    cache.on_end(0, records)
    return clock, cache


def _run(clock: MemoryReactorClock) -> None:
    for _ in range(50):
        clock.advance(0)


def _steps_of_one(start: Start) -> int:
    clock, cache = _catching_up()
    CountingEncoder.calls = 0
    cache.subscribe(CountingEncoder("t"), Sink(), start)
    _run(clock)
    return CountingEncoder.calls


def test_streams_catching_up_from_the_same_place_share_each_encoded_step() -> None:
    """A thousand browsers opening together (or resuming with the same last id) read the same
    records: each step is encoded once and written to all of them, ids and all."""
    for start in (Start(), Start(resume={0: 25})):
        steps = _steps_of_one(start)
        assert steps > 3, "the history must take several steps for the test to mean anything"
        clock, cache = _catching_up()
        CountingEncoder.calls = 0
        sinks = [Sink() for _ in range(3)]
        for sink in sinks:
            cache.subscribe(CountingEncoder("t"), sink, start)
        _run(clock)
        assert CountingEncoder.calls == steps, "three streams, one encoding per step"
        first = 25 if start.resume else 0
        assert _values(sinks[0]) == [f"v{o}" for o in range(first, 60)]
        assert all(s.writes == sinks[0].writes for s in sinks)
        assert len(cache.groups) == 1 and len(cache.group_of) == 3


def test_a_shared_step_read_before_the_log_grew_leaves_nothing_out() -> None:
    """The first stream's step ended where the log ended then; a later stream at the same place
    takes that step, then reads on by itself what arrived since."""
    clock, cache = _catching_up(records=5)
    early, late = Sink(), Sink()
    cache.subscribe(KafkaEventEncoder("t"), early, Start())
    _run(clock)
    cache.on_records(_msgs(0, 5, 30))
    cache.subscribe(KafkaEventEncoder("t"), late, Start())
    _run(clock)
    assert _values(early) == _values(late) == [f"v{o}" for o in range(35)]


def test_compacted_topics_and_since_streams_encode_their_own_steps() -> None:
    """What they read depends on more than the place: replaced records, a start time."""
    for compacted, start in ((True, Start()), (False, Start(since_ms=0))):
        clock, cache = _catching_up(compacted=compacted)
        CountingEncoder.calls = 0
        for _ in range(2):
            cache.subscribe(CountingEncoder("t"), Sink(), start)
        _run(clock)
        assert len(cache.steps) == 0
        assert CountingEncoder.calls >= 2


def test_shared_steps_keep_the_newest_within_their_bytes_and_forget_all_on_a_rewind() -> None:
    steps = SharedSteps(max_bytes=10)
    progress = ProgressState({0: 1})
    steps.put("a", b"1234", progress, 1)
    steps.put("b", b"1234", progress, 2)
    steps.put("c", b"1234", progress, 3)
    steps.put("d", b"x" * 11, progress, 4)  # larger than the whole budget: not kept
    assert steps.get("a") is None and steps.get("d") is None
    got = steps.get("c")
    assert got is not None and got[0] == b"1234" and got[2] == 3
    assert got[1] is not progress and got[1].offsets == {0: 1}, "a copy, not the stream's own"
    clock, cache = _catching_up()
    cache.subscribe(KafkaEventEncoder("t"), Sink(), Start())
    _run(clock)
    assert len(cache.steps) > 0
    cache.on_rewind(0, 0)
    assert len(cache.steps) == 0, "steps of the lost incarnation must not be taken"


def test_what_needs_the_partition_count_waits_for_it_and_is_bounded() -> None:
    """A check that needs the topic's partition count (an id naming partitions the topic lacks)
    runs when the metadata comes on a cold cache, at once on a warm one; a topic never described
    holds a bounded number of them."""
    class Client:
        def consume(self, *args: Any, **kw: Any) -> None:
            pass

    server = CacheServer(MemoryReactorClock(), Client(), "cs", EventLog("t"))  # type: ignore[arg-type]
    cache = server.topic("t")
    counted: list[int] = []
    for _ in range(MAX_WAITING_FOR_COUNT + 5):
        cache.when_counted(counted.append)
    assert counted == []
    cache.on_metadata(3, False)
    assert counted == [3] * MAX_WAITING_FOR_COUNT
    cache.when_counted(counted.append)
    assert counted[-1] == 3 and len(counted) == MAX_WAITING_FOR_COUNT + 1
    cache.on_metadata(3, False)  # said again: nothing waits any more
    assert len(counted) == MAX_WAITING_FOR_COUNT + 1


def _ids(sink: Sink) -> list[dict[int, int]]:
    from ssekd.event_ids import parse_last_event_id
    data = b"".join(sink.writes).decode()
    return [parse_last_event_id(line[3:]) or {} for line in data.split("\n")
            if line.startswith("id:")]


def test_a_stream_delivers_the_ready_partitions_while_one_is_missing() -> None:
    """Zilla #1628: a partition the cache has not heard of (its leader is unavailable) holds
    the stream up for `partition-wait` only. Then the others are delivered, their ids listing
    only them; when it comes,
    its records follow and the ids list it; a stream resumed from an id made meanwhile gets
    all of it and nothing of the others twice."""
    clock = MemoryReactorClock()
    server = CacheServer(clock, FakeClient(), "cache", EventLog("t"),  # type: ignore[arg-type]
                         bounds=CacheBounds(max_messages=8))
    cache = server.topic("t")
    cache.on_metadata(3, False)
    cache.on_records(_msgs(0, 0, 2) + _msgs(1, 0, 2))
    cache.on_end(0, 2)
    cache.on_end(1, 2)
    sink = Sink()
    s = cache.subscribe(KafkaEventEncoder("t"), sink, Start())
    _run(clock)
    assert sink.writes == [], "waiting for every partition (partition-wait), so ids list all"
    clock.advance(server.partition_wait)
    _run(clock)
    assert _values(sink) == ["v0", "v1", "v0", "v1"]
    assert _ids(sink)[-1] == {0: 2, 1: 2}, "the ids list the partitions delivered"
    assert not s.at_tail, "it joins the tail once every partition is placed"
    cache.on_records(_msgs(0, 2, 1))
    _run(clock)
    assert _values(sink)[-1] == "v2" and _ids(sink)[-1] == {0: 3, 1: 2}
    meanwhile = _ids(sink)[-1]
    # partition 2 comes back (its leader again); the cache evicts the oldest of partition 0
    cache.on_records([new_message(2, o, None, b"p2-%d" % o) for o in range(5)])
    cache.on_end(2, 5)
    _run(clock)
    assert _values(sink)[-5:] == [f"p2-{o}" for o in range(5)]
    assert _ids(sink)[-1] == {0: 3, 1: 2, 2: 5} and s.at_tail
    resumed = Sink()
    r = cache.subscribe(KafkaEventEncoder("t"), resumed, Start(resume=meanwhile))
    _run(clock)
    assert _values(resumed) == [f"p2-{o}" for o in range(5)], "all of it, nothing else"
    assert _ids(resumed)[-1] == {0: 3, 1: 2, 2: 5} and r.at_tail


def test_the_partition_wait_ends_once_every_partition_is_heard_of() -> None:
    """No timer is left behind for a topic whose partitions all came in time."""
    clock = MemoryReactorClock()
    server = CacheServer(clock, FakeClient(), "cache", EventLog("t"))  # type: ignore[arg-type]
    cache = server.topic("t")
    cache.on_metadata(2, False)
    assert [c.func.__name__ for c in clock.getDelayedCalls()] == ["_stop_waiting"]
    cache.on_end(0, 0)
    assert len(clock.getDelayedCalls()) == 1, "one partition of two: still waiting"
    cache.on_end(1, 0)
    assert clock.getDelayedCalls() == [] and not cache.log.partial
