"""Unit tests without a broker: id vectors, hostile ids, the wire, keepalive timing on a
MemoryReactorClock, the bounded TopicLog, and encode-once fan-out with backpressure."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from twisted.internet.defer import Deferred
from twisted.internet.testing import MemoryReactorClock
from twisted.web.test.requesthelper import DummyRequest

from ssekd.bindings.api import HttpContext
from ssekd.bindings.kafka.cache import CacheServer
from ssekd.bindings.kafka.client import FetchResult
from ssekd.bindings.kafka.message import Message
from ssekd.bindings.kafka.start import Start
from ssekd.bindings.kafka.topic_log import CacheBounds, TopicLog
from ssekd.bindings.sse.server import SseServer
from ssekd.bindings.sse.wire import event_bytes
from ssekd.bindings.sse_kafka.encoder import KafkaEventEncoder
from ssekd.progress import (
    KEY_ETAG_FORMAT,
    ProgressId,
    ProgressState,
    UndecodableId,
    format_event_id,
    parse_last_event_id,
)
from ssekd.telemetry.events import EventLog

VECTORS = json.loads((Path(__file__).resolve().parents[3] / "shared" / "vectors" /
                      "event-ids.json").read_text()) \
    if (Path(__file__).resolve().parents[3] / "shared").exists() else \
    json.loads(Path("/work/shared/vectors/event-ids.json").read_text())


def _parts(d: dict[str, int]) -> dict[int, int]:
    return {int(k): v for k, v in d.items()}


@pytest.mark.parametrize("v", VECTORS["progress"], ids=lambda v: v["id"])
def test_progress_vectors(v: dict[str, Any]) -> None:
    assert ProgressId.encode(_parts(v["partitions"])) == v["id"]
    assert ProgressId.decode(v["id"]) == _parts(v["partitions"])
    assert ProgressState(_parts(v["partitions"])).token() == v["id"]


@pytest.mark.parametrize("v", VECTORS["event_ids"], ids=lambda v: v["id"])
def test_event_id_vectors(v: dict[str, Any]) -> None:
    key = None if v.get("key_utf8") is None else v["key_utf8"].encode()
    token = ProgressId.encode(_parts(v["partitions"]))
    assert format_event_id(v["format"], token, v["etag"], key) == v["id"]


def test_tombstone_vector() -> None:
    t = VECTORS["tombstone"]
    enc = KafkaEventEncoder("t")
    progress = ProgressState({0: 1, 1: 1})
    wire = enc.encode([Message(0, 1, t["key_utf8"].encode(), None)], progress, None)
    assert wire.decode() == t["wire"]


@pytest.mark.parametrize("v", VECTORS["parse"], ids=lambda v: v["last_event_id"] or "empty")
def test_parse_vectors(v: dict[str, Any]) -> None:
    if v["resume"] == "historical":
        with pytest.raises(UndecodableId):
            parse_last_event_id(v["last_event_id"])
    else:
        assert parse_last_event_id(v["last_event_id"]) == _parts(v["resume"])


@given(st.dictionaries(st.integers(0, 5000), st.integers(0, 2**63 - 1), max_size=40))
def test_progress_round_trip(parts: dict[int, int]) -> None:
    assert ProgressId.decode(ProgressId.encode(parts)) == parts


@given(st.text(max_size=300) | st.binary(max_size=300).map(lambda b: b.decode("latin-1")))
def test_any_text_parses_or_is_undecodable(text: str) -> None:
    try:
        parsed = parse_last_event_id(text)
    except UndecodableId:
        return
    assert all(p >= 0 and o >= 0 for p, o in parsed.items())


_progress_ops = st.lists(st.tuples(
    st.sampled_from(["advance", "set", "drop", "copy"]),
    st.integers(0, 20), st.integers(0, 2**40)), max_size=60)


@given(st.dictionaries(st.integers(0, 20), st.integers(0, 2**40), max_size=5), _progress_ops)
def test_progress_state_token_is_always_exact(start: dict[int, int],
                                              ops: list[tuple[str, int, int]]) -> None:
    """The encoder's per-event `advance` (with its cached surroundings) never drifts from the
    reference encoding, whatever mix of partitions, offsets, sets, drops and copies."""
    state = ProgressState(start)
    expected = dict(start)
    for op, p, offset in ops:
        if op == "advance":
            # the hot path mostly sees consecutive offsets of one partition
            for o in range(offset, offset + 3):
                expected[p] = o
                assert state.advance(p, o).decode() == ProgressId.encode(expected)
        elif op == "set":
            state.set(p, offset)
            expected[p] = offset
        elif op == "drop":
            state.drop(p)
            expected.pop(p, None)
        else:
            state = state.copy()
        assert state.offsets == expected
        assert state.token() == ProgressId.encode(expected)


def test_progress_advance_across_varint_lengths() -> None:
    state = ProgressState({0: 0, 3: 5})
    expected = {0: 0, 3: 5}
    for o in [*range(200), *range(8000, 8300), *range(1_048_500, 1_048_700), 2**40]:
        expected[3] = o
        assert state.advance(3, o).decode() == ProgressId.encode(expected)


def test_hostile_tokens() -> None:
    for bad in ["AQ" + "_" * 60, "AZBO", "AQIBAA==", "AQL_____________AQ==", "AQQABAI+",
                "AgQABAIC", "AQQABAICAA==", "AQQAAgAC"]:
        with pytest.raises(UndecodableId):
            ProgressId.decode(bad)


def test_wire_format() -> None:
    assert event_bytes("1", None, b"a\nb") == b"id:1\ndata:a\ndata:b\n\n"
    assert event_bytes("1", "delete", None) == b"id:1\nevent:delete\n\n"
    assert event_bytes(None, None, b"x\r\ny\rz") == b"data:x\ndata:y\ndata:z\n\n"
    assert event_bytes("1", None, b"") == b"id:1\ndata:\n\n"


def test_etag_that_would_break_framing_is_left_out() -> None:
    enc = KafkaEventEncoder("t", id_format=KEY_ETAG_FORMAT)
    m = Message(0, 0, b"k", b"v", (("etag", b'a"b'),))
    out = enc.encode([m], ProgressState(), None).decode()
    assert json.loads(out.split("\n")[0][3:])[1].endswith('/a"b')
    m = Message(0, 1, b"k", b"v", (("etag", b"a\nb"),))
    out = enc.encode([m], ProgressState(), None).decode()
    assert out.startswith('id:["aw==","AQIABA=="]\n')


# -- keepalive and the sse resource on a MemoryReactorClock -----------------------------------

class FakeHandle:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def pause(self) -> None:
        self.calls.append("pause")

    def resume(self) -> None:
        self.calls.append("resume")

    def close(self) -> None:
        self.calls.append("close")


class FakeSource:
    def __init__(self, answer: Any = None) -> None:
        self.answer = answer
        self.requests: list[Any] = []
        self.handle = FakeHandle()

    def open(self, request: Any, sink: Any) -> Any:
        self.requests.append(request)
        self.sink = sink
        return self.answer if self.answer is not None else self.handle


class StreamingRequest(DummyRequest):  # type: ignore[misc]
    """DummyRequest drives only pull producers; record a push producer instead."""

    producer: Any = None

    def registerProducer(self, producer: Any, streaming: bool) -> None:
        assert streaming
        self.producer = producer

    def unregisterProducer(self) -> None:
        self.producer = None


def _request(path: bytes = b"/events", method: bytes = b"GET",
             headers: dict[bytes, bytes] | None = None) -> DummyRequest:
    req = StreamingRequest(path.split(b"?")[0].strip(b"/").split(b"/"))
    req.method = method
    req.path = path.split(b"?")[0]
    req.uri = path
    for k, v in (headers or {}).items():
        req.requestHeaders.setRawHeaders(k, [v])
    return req


def _server(source: FakeSource, clock: MemoryReactorClock, **kw: Any) -> SseServer:
    return SseServer("sse", source, clock, EventLog("test"), **kw)  # type: ignore[arg-type]


def test_keepalive_after_idle_time_only() -> None:
    clock = MemoryReactorClock()
    source = FakeSource()
    server = _server(source, clock, max_idle=15.0, retry=2000)
    req = _request()
    server.render(req, HttpContext("http"))
    assert b"".join(req.written) == b"retry:2000\n\n"
    clock.advance(10)
    source.sink.write(b"data:x\n\n")
    clock.advance(10)  # 10 s since the last write: nothing yet
    assert req.written[-1] == b"data:x\n\n"
    clock.advance(5)
    assert req.written[-1] == b":\n\n"
    n = len(req.written)
    clock.advance(14.9)
    assert len(req.written) == n
    clock.advance(0.1)
    assert len(req.written) == n + 1
    server.stopService()
    assert req.finished
    assert source.handle.calls == ["close"]
    assert not clock.getDelayedCalls()


def test_sse_statuses_and_last_event_id_sources() -> None:
    clock = MemoryReactorClock()
    source = FakeSource()
    server = _server(source, clock)
    req = _request(method=b"POST")
    server.render(req, HttpContext("http"))
    assert req.responseCode == 405
    req = _request(headers={b"last-event-id": b"A" * 255})
    server.render(req, HttpContext("http"))
    assert req.responseCode == 400
    req = _request(b"/events?lastEventId=%5Bnull%2C%22AQIAAg%3D%3D%22%5D")
    server.render(req, HttpContext("http"))
    assert source.requests[-1].last_event_id == '[null,"AQIAAg=="]'
    assert source.requests[-1].path == "/events"
    req = _request(b"/events?lastEventId=ignored", headers={b"last-event-id": b"AQIAAg=="})
    server.render(req, HttpContext("http"))
    assert source.requests[-1].last_event_id == "AQIAAg=="
    assert req.responseHeaders.getRawHeaders(b"content-type") == [b"text/event-stream"]
    assert req.responseHeaders.getRawHeaders(b"connection") is None
    source.answer = 404
    req = _request(b"/nothing")
    server.render(req, HttpContext("http"))
    assert req.responseCode == 404


def test_backpressure_reaches_the_handle() -> None:
    clock = MemoryReactorClock()
    source = FakeSource()
    server = _server(source, clock)
    req = _request()
    server.render(req, HttpContext("http"))
    stream = source.sink
    stream.pauseProducing()
    stream.resumeProducing()
    stream.stopProducing()
    assert source.handle.calls == ["pause", "resume", "close"]
    assert not server.streams


# -- the cache: bounds, compaction, tail groups ------------------------------------------------

def _msgs(p: int, start: int, n: int, key: bytes | None = None, ts: int = 0) -> list[Message]:
    return [Message(p, o, key, b"v%d" % o, (), ts) for o in range(start, start + n)]


def test_topic_log_bounds_move_start() -> None:
    log = TopicLog("t", CacheBounds(max_messages=10))
    log.append(_msgs(0, 0, 8) + _msgs(1, 0, 8), now=0)
    assert log.count == 10
    assert log.partitions[0].start + log.partitions[1].start == 6
    assert [m.offset for m in log.read({0: 0, 1: 0}, 100)
            if m.partition == 0] == list(range(log.partitions[0].start, 8))


def test_topic_log_bytes_and_age() -> None:
    log = TopicLog("t", CacheBounds(max_bytes=1000, max_age_seconds=10))
    log.append(_msgs(0, 0, 100), now=0)
    assert log.bytes <= 1000
    log2 = TopicLog("t", CacheBounds(max_age_seconds=10))
    log2.append(_msgs(0, 0, 3, ts=1_000) + _msgs(0, 3, 2, ts=20_000), now=25.0)
    assert log2.partitions[0].start == 3


def test_compacted_log_keeps_latest_per_key() -> None:
    log = TopicLog("t", CacheBounds(), compacted=True)
    for o in range(3000):
        log.append([Message(0, o, b"k%d" % (o % 3), b"%d" % o)], now=0)
    log.append([Message(0, 3000, b"k0", None)], now=0)
    latest = log.read({0: 0}, 100)
    assert [(m.key, m.value) for m in latest] == [(b"k1", b"2998"), (b"k2", b"2999"),
                                                  (b"k0", None)]
    assert log.count == 3


def test_catch_up_cursor_reads_arrival_order_in_slices() -> None:
    """A reader that follows its cursor sees every record once, in the order the tail got them,
    leaves out partitions it has no position for, and survives eviction under it."""
    log = TopicLog("t", CacheBounds(max_messages=50))
    batches = [_msgs(0, 0, 7), _msgs(2, 0, 3), _msgs(1, 0, 5), _msgs(0, 7, 4)]
    for b in batches:
        log.append(b, now=0)
    arrival = [(m.partition, m.offset) for b in batches for m in b]
    got: list[tuple[int, int]] = []
    cursor = None
    while True:
        records, cursor = log.read_from({0: 0, 1: 0, 2: 0}, cursor, 4)
        if not records:
            break
        got += [(m.partition, m.offset) for m in records]
    assert got == arrival
    # partition 2 not positioned (a live stream before its end is known): left out
    only = log.read_from({0: 0, 1: 0}, None, 100)[0]
    assert [(m.partition, m.offset) for m in only] == [a for a in arrival if a[0] != 2]
    # a resume map starts at the earliest record any partition still needs
    assert log.start_cursor({0: 7, 1: 5, 2: 3}) == log.seq - 3
    # records evicted below a cursor: the read carries on from the oldest one held
    log.append(_msgs(1, 5, 60), now=0)
    records, _ = log.read_from({0: 11, 1: 0, 2: 3}, 1, 5)
    assert records[0] is log.partitions[1].records[log.partitions[1].head]


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
