"""A topic with a model, on a MemoryReactorClock: invalid records are skipped once at the cache,
every stream gets the same valid ones in order, resuming is exact around a skipped record, a
record waiting for its schema holds those after it, and invalid records are reported at most
once a second per topic."""

from __future__ import annotations

import json
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.testing import MemoryReactorClock

from ssekd.bindings.kafka.cache import CacheServer, SchemaUnavailable
from ssekd.bindings.kafka.history import FetchResult
from ssekd.bindings.kafka.message import OFFSET, PARTITION, Message, new_message
from ssekd.bindings.kafka.start import Start
from ssekd.bindings.sse_kafka.encoder import KafkaEventEncoder
from ssekd.catalogs.catalog import Schema
from ssekd.catalogs.local import LocalCatalog
from ssekd.catalogs.models import FieldModel, ModelConfig, TopicModel
from ssekd.event_ids import parse_last_event_id
from ssekd.telemetry.events import EventLog
from ssekd.telemetry.metrics import Metrics
from tests.bindings.kafka.test_cache import FakeClient, Sink

SCHEMA = {"type": "object", "required": ["n"], "properties": {"n": {"type": "integer"}}}


def _server(clock: MemoryReactorClock, client: Any, events: EventLog,
            metrics: Metrics | None = None, catalog: Any = None) -> CacheServer:
    catalog = catalog or LocalCatalog("local", {"nums": Schema("nums", 1, None,
                                                               json.dumps(SCHEMA))})
    config = ModelConfig.parse("nums", "value",
                               {"model": "json", "catalog": {catalog.name: [{"subject": "nums"}]}})
    field = FieldModel(config, catalog, clock, lambda n, d: events.emit("cache", n, d))
    server = CacheServer(clock, client, "cache", events, metrics=metrics,
                         models={"nums": TopicModel("nums", field, None)})
    server.startService()
    return server


def _record(o: int) -> Message:
    """Every tenth record (offsets 5, 15, 25, ...) is invalid: half not JSON, half no `n`."""
    if o % 10 == 5:
        value = b"{broken" if o % 20 == 5 else b'{"m": 1}'
    else:
        value = json.dumps({"n": o}).encode()
    return new_message(o % 2, o // 2, None, value)  # two partitions, interleaved


def _events(sink: Sink) -> list[tuple[str, int]]:
    """(id, n) of each event a sink got."""
    out: list[tuple[str, int]] = []
    event_id = ""
    for line in b"".join(sink.writes).decode().split("\n"):
        if line.startswith("id:"):
            event_id = line[3:]
        elif line.startswith("data:"):
            out.append((event_id, json.loads(line[5:])["n"]))
    return out


def test_thousand_records_ten_percent_invalid_every_stream_gets_the_900_and_resumes_exactly(
) -> None:
    clock = MemoryReactorClock()
    events = EventLog("t", clock=clock.seconds)
    metrics = Metrics()
    server = _server(clock, FakeClient(), events, metrics)
    cache = server.topic("nums")
    cache.on_metadata(2, False)
    cache.on_end(0, 0)
    cache.on_end(1, 0)
    encoder = KafkaEventEncoder("nums")
    sinks = [Sink() for _ in range(5)]
    for s in sinks:
        server.subscribe("nums", encoder, s, Start())
    clock.advance(0)
    records = [_record(o) for o in range(1000)]
    for i in range(0, 1000, 50):  # batches as the consumer hands them over
        cache.on_records(sorted(records[i:i + 50], key=lambda m: (m[PARTITION], m[OFFSET])))
        clock.advance(0.25)
    valid = sorted(o for o in range(1000) if o % 10 != 5)
    for s in sinks:
        got = _events(s)
        assert sorted(n for _, n in got) == valid and len(got) == 900
        # in order within each partition
        for p in (0, 1):
            ns = [n for _, n in got if n % 2 == p]
            assert ns == sorted(ns)
    got = _events(sinks[0])
    assert [n for _, n in got] == [n for _, n in _events(sinks[1])], "same order for all"
    counter = metrics.counter("kafka.cache.invalid", "cache", topic="nums")
    assert counter.value == 100
    # resume from the event just before an invalid record (n=24 precedes 25 in partition 1)
    # and from the one just after it: neither repeats nor loses a record
    ids = dict((n, i) for i, n in got)
    for before, after in ((24, 27), (23, 27), (4, 7)):
        resumed = Sink()
        server.subscribe("nums", encoder, resumed,
                         Start(resume=parse_last_event_id(ids[before])))
        clock.advance(0)
        expected = [n for _, n in got][[n for _, n in got].index(before) + 1:]
        assert [n for _, n in _events(resumed)] == expected
        assert after in [n for _, n in _events(resumed)]


def test_invalid_records_are_reported_at_most_once_a_second_per_topic() -> None:
    clock = MemoryReactorClock()
    events = EventLog("t", clock=clock.seconds)
    server = _server(clock, FakeClient(), events)
    cache = server.topic("nums")
    cache.on_metadata(1, False)
    cache.on_records([new_message(0, o, None, b"nope") for o in range(50)])
    clock.advance(0.5)
    cache.on_records([new_message(0, o, None, b"nope") for o in range(50, 60)])
    reports = [e for e in events.recent if "BINDING_KAFKA_RECORD_INVALID" in e]
    assert len(reports) == 1
    assert "nums partition 0 offset 0: not JSON" in reports[0]
    clock.advance(0.6)
    cache.on_records([new_message(0, 60, None, b'{"n": "x"}')])
    reports = [e for e in events.recent if "BINDING_KAFKA_RECORD_INVALID" in e]
    assert len(reports) == 2
    assert "offset 60: ['n']: 'x' is not of type 'integer' (59 more invalid since the last " \
           "report)" in reports[1]


class SlowCatalog(LocalCatalog):
    """A local catalog whose answer comes when the test says (a registry being asked)."""

    def __init__(self) -> None:
        super().__init__("slow", {})
        self.answer: Deferred[Schema] = Deferred()

    def resolve(self, subject: str, version: str | int) -> Deferred[Schema]:
        return self.answer


def test_records_wait_in_order_for_the_schema_and_streams_are_refused_meanwhile() -> None:
    clock = MemoryReactorClock()
    events = EventLog("t", clock=clock.seconds)
    catalog = SlowCatalog()
    server = _server(clock, FakeClient(), events, catalog=catalog)
    cache = server.topic("nums")
    cache.on_metadata(1, False)
    cache.on_records([_record(0), _record(2)])
    cache.on_end(0, 2)
    try:
        server.subscribe("nums", KafkaEventEncoder("nums"), Sink(), Start())
        raise AssertionError("no stream before the schema is known")
    except SchemaUnavailable as e:
        assert "still being fetched" in str(e)
    assert cache.log.count == 0 and cache.log.partitions == {}, "nothing enters unchecked"
    catalog.answer.callback(Schema("nums", 1, None, json.dumps(SCHEMA)))
    assert cache.log.count == 2 and cache.log.partitions[0].live_from == 2
    sink = Sink()
    server.subscribe("nums", KafkaEventEncoder("nums"), sink, Start())
    clock.advance(0)
    assert [n for _, n in _events(sink)] == [0, 2]


def test_history_reads_skip_invalid_records_and_move_past_a_read_of_only_invalid_ones() -> None:
    clock = MemoryReactorClock()
    client = FakeClient()
    server = _server(clock, client, EventLog("t", clock=clock.seconds))
    cache = server.topic("nums")
    cache.on_metadata(1, False)
    cache.on_records([new_message(0, o, None, json.dumps({"n": o}).encode()) for o in (10, 11)])
    cache.on_end(0, 12)
    sink = Sink()
    server.subscribe("nums", KafkaEventEncoder("nums"), sink, Start(resume={0: 0}))
    clock.advance(0)
    p, offset, d = client.fetches[-1]
    assert (p, offset) == (0, 0)
    d.callback(FetchResult([new_message(0, o, None, b"bad") for o in range(5)], None))
    p, offset, d = client.fetches[-1]
    assert offset == 5, "a read of invalid records only is followed by the next read"
    d.callback(FetchResult([new_message(0, o, None, json.dumps({"n": o}).encode() if o != 7 else
                                    b"bad") for o in range(5, 10)], None))
    clock.advance(0)
    clock.advance(0)
    assert [n for _, n in _events(sink)] == [5, 6, 8, 9, 10, 11]


def test_a_valid_record_larger_than_the_cache_stalls_no_stream() -> None:
    """A record bigger than the cache's max-bytes passes the model, reaches the streams at the
    tail, and leaves the cache at once; a later stream starts after it, one resuming before it
    reads it from Kafka (checked again), and both go on."""
    from ssekd.bindings.kafka.topic_log import CacheBounds

    clock = MemoryReactorClock()
    client = FakeClient()
    server = _server(clock, client, EventLog("t", clock=clock.seconds))
    server.bounds = CacheBounds(max_bytes=600)
    cache = server.topic("nums")
    cache.on_metadata(1, False)
    cache.on_end(0, 0)
    tail = Sink()
    server.subscribe("nums", KafkaEventEncoder("nums"), tail, Start())
    clock.advance(0)
    big = json.dumps({"n": 1, "pad": "x" * 1000}).encode()
    records = [new_message(0, 0, None, b'{"n": 0}'), new_message(0, 1, None, big),
               new_message(0, 2, None, b'{"n": 2}')]
    cache.on_records(records)
    assert [n for _, n in _events(tail)] == [0, 1, 2]
    (said,) = [line for line in server.events.recent if "BINDING_KAFKA_RECORD_TOO_LARGE" in line]
    assert "nums partition 0 offset 1:" in said and "max-bytes 600" in said
    late = Sink()
    server.subscribe("nums", KafkaEventEncoder("nums"), late, Start())
    clock.advance(0)
    again = Sink()
    server.subscribe("nums", KafkaEventEncoder("nums"), again, Start(resume={0: 1}))
    clock.advance(0)
    p, offset, d = client.fetches[-1]
    assert (p, offset) == (0, 1)
    d.callback(FetchResult(records[1:2], None))
    clock.advance(0)
    clock.advance(0)
    cache.on_records([new_message(0, 3, None, b'{"n": 3}')])
    assert [n for _, n in _events(late)] == [2, 3]
    assert [n for _, n in _events(again)] == [1, 2, 3]
    cache.on_records([new_message(0, 4, None, big), new_message(0, 5, None, big)])
    assert [line for line in server.events.recent if "TOO_LARGE" in line] == [said], \
        "at most one a second per topic"
    clock.advance(1.0)
    cache.on_records([new_message(0, 6, None, big)])
    assert "(2 more since the last report)" in server.events.recent[-1]


def test_a_record_nested_too_deeply_is_skipped_and_the_topic_goes_on() -> None:
    """A JSON record of 100,000 `[` made the parser raise RecursionError where the gate expects
    `Invalid`: the gate kept the record at its head and retried it on every batch, so the topic
    stopped at it for good. It is skipped and reported like any invalid record."""
    clock = MemoryReactorClock()
    events = EventLog("t", clock=clock.seconds)
    metrics = Metrics()
    server = _server(clock, FakeClient(), events, metrics)
    cache = server.topic("nums")
    cache.on_metadata(1, False)
    cache.on_end(0, 0)
    sink = Sink()
    server.subscribe("nums", KafkaEventEncoder("nums"), sink, Start())
    clock.advance(0)
    deep = b"[" * 100_000 + b"]" * 100_000
    cache.on_records([new_message(0, 0, None, b'{"n": 0}'), new_message(0, 1, None, deep),
                      new_message(0, 2, None, b'{"n": 2}')])
    cache.on_records([new_message(0, 3, None, b'{"n": 3}')])
    clock.advance(1)
    assert [n for _, n in _events(sink)] == [0, 2, 3]
    assert metrics.counter("kafka.cache.invalid", "cache", topic="nums").value == 1
