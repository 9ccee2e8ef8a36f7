"""Filters on the record's JSON value (an ssekd addition, Zilla #1507/#1062): what a pointer
finds and what equals what, that the tail parses a record once whatever the number of groups
and filters, that records that are not JSON are counted once, and that a stream catching up
reads only the cached records its value names."""

from __future__ import annotations

import json
from typing import Any

import pytest
from twisted.internet.testing import MemoryReactorClock

import ssekd.bindings.kafka.tail as tail_module
from ssekd.bindings.kafka.cache import CacheServer, TopicCache
from ssekd.bindings.kafka.log_index import LogIndex
from ssekd.bindings.kafka.message import OFFSET, SEQ, Message, new_message
from ssekd.bindings.kafka.start import Start
from ssekd.bindings.kafka.topic_log import CacheBounds
from ssekd.bindings.kafka.value_path import (
    NOT_JSON,
    UNPARSED,
    ParsedValue,
    ValuePath,
    canonical,
    parse_value,
)
from ssekd.bindings.sse_kafka.encoder import Filter, KafkaEventEncoder
from ssekd.bindings.sse_kafka.proxy import value_conditions
from ssekd.telemetry.events import EventLog
from ssekd.telemetry.metrics import Counter
from tests.support.subscriptions import Sink


@pytest.mark.parametrize(("pointer", "doc", "found"), [
    ("/status", {"status": "open"}, b'"open"'),
    ("/owner/id", {"owner": {"id": 7}}, b"7"),
    ("/n", {"n": 2.0}, b"2"),
    ("/n", {"n": 2.5}, b"2.5"),
    ("/ok", {"ok": True}, b"true"),
    ("/gone", {"gone": None}, b"null"),
    ("/tags/1", {"tags": ["a", "b"]}, b'"b"'),
    ("/tags/01", {"tags": ["a", "b"]}, None),  # no leading zeros in an array index
    ("/tags/9", {"tags": ["a"]}, None),
    ("/a~1b/c~0d", {"a/b": {"c~d": "x"}}, b'"x"'),
    ("/caf\u00e9", {"caf\u00e9": "\u00fcber"}, '"\u00fcber"'.encode()),
    ("/status", {"status": {"nested": 1}}, None),  # objects and arrays match no value
    ("/status", {"status": ["open"]}, None),
    ("/missing", {"status": "open"}, None),
    ("/status/x", {"status": "open"}, None),
    ("/0", ["zero"], b'"zero"'),
])
def test_a_pointer_finds_a_scalar_or_nothing(pointer: str, doc: Any, found: bytes | None) -> None:
    assert ValuePath(pointer).find(doc) == found


@pytest.mark.parametrize("raw", [b"not json", b"{", b'{"a": NaN}', b"Infinity", b"\xff\xfe",
                                 None])
def test_values_that_are_not_json(raw: bytes | None) -> None:
    assert parse_value(raw) is NOT_JSON
    assert ValuePath("/a").find(parse_value(raw)) is None


def test_equal_json_values_are_equal_bytes() -> None:
    assert canonical(1) == canonical(1.0) == b"1"
    assert canonical("1") == b'"1"' != canonical(1)
    assert canonical(True) == b"true" != canonical(1)
    assert canonical(None) == b"null"
    assert canonical({"a": 1}) is None and canonical([1]) is None
    assert value_conditions({"/a": [1, "x", True, None]}, str) == (
        (ValuePath("/a"), frozenset({b"1", b'"x"', b"true", b"null"})),)


def test_request_valued_pointers_come_first_and_are_resolved() -> None:
    conditions = value_conditions({"/kind": "order", "/owner": "${params.user}"},
                                  lambda text: text.replace("${params.user}", "alice"))
    assert conditions == ((ValuePath("/owner"), frozenset({b'"alice"'})),
                          (ValuePath("/kind"), frozenset({b'"order"'})))
    assert Filter(values=conditions).terms == ((ValuePath("/owner"), b'"alice"'),)
    assert Filter(values=value_conditions({"/s": ["b", "a"]}, str)).terms == (
        (ValuePath("/s"), b'"a"'), (ValuePath("/s"), b'"b"'))


class Client:
    def consume(self, *a: Any, **kw: Any) -> None:
        pass


def _cache() -> tuple[MemoryReactorClock, TopicCache]:
    clock = MemoryReactorClock()
    server = CacheServer(clock, Client(), "cache", EventLog("t"),  # type: ignore[arg-type]
                         bounds=CacheBounds())
    cache = server.topic("t")
    cache.on_metadata(1, False)
    cache.on_end(0, 0)
    return clock, cache


def _run(clock: MemoryReactorClock) -> None:
    while any(c.getTime() <= clock.seconds() for c in clock.getDelayedCalls()):
        clock.advance(0)


def _value(**fields: Any) -> bytes:
    return json.dumps(fields).encode()


def test_the_tail_parses_each_record_once_for_every_group(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """1,000 streams over 100 distinct filters on two pointers: each record is parsed once
    and visits only the groups listed under its fields' values; records that are not JSON
    are counted once each, not once per filter."""
    parsed: list[bytes | None] = []

    class CountingParse(ParsedValue):
        def __init__(self, value: bytes | None) -> None:
            parsed.append(value)
            super().__init__(value)

    visited: list[tuple[int, str]] = []

    class Visited(KafkaEventEncoder):
        def matches(self, m: Message, parsed: Any = UNPARSED) -> bool:
            visited.append((m[OFFSET], self.filters[0].values[0][0].text))
            return super().matches(m, parsed)

    monkeypatch.setattr(tail_module, "ParsedValue", CountingParse)
    clock, cache = _cache()
    not_json, filtered = Counter(), Counter()
    sinks: dict[int, list[Sink]] = {}
    for n in range(100):
        spec = {"/owner": f"user-{n}"} if n % 2 else {"/region": [f"r{n}", f"s{n}"]}
        encoder = Visited("t", (Filter(values=value_conditions(spec, str)),),
                          filtered=filtered, not_json=not_json)
        sinks[n] = [Sink() for _ in range(10)]
        for sink in sinks[n]:
            cache.subscribe(encoder, sink, Start())
    _run(clock)
    assert cache.tail.sizes()["groups"] == 100
    assert cache.tail.sizes()["pointers"] == 2
    records = [new_message(0, 0, b"a", _value(owner="user-3", region="r4")),
               new_message(0, 1, b"b", b"not json"),
               new_message(0, 2, b"c", _value(owner="user-4", region="s8")),
               new_message(0, 3, b"d", None),  # a tombstone: nothing to read, not counted
               new_message(0, 4, b"e", b'{"owner": "user-5"')]
    cache.on_records(records)
    assert len(parsed) == len(records), "one parse per record, not per group or filter"
    assert sorted(visited) == [(0, "/owner"), (0, "/region"), (2, "/region")], \
        "a record visits only the groups listed under its fields' values"
    assert not_json.value == 2
    got = {n: [s.values() for s in group] for n, group in sinks.items()}
    assert got[3] == [[_value(owner="user-3", region="r4").decode()]] * 10
    assert got[4] == [[_value(owner="user-3", region="r4").decode()]] * 10
    assert got[8] == [[_value(owner="user-4", region="s8").decode()]] * 10
    assert all(not v[0] for n, v in got.items() if n not in (3, 4, 8))
    # each group held back the records it did not take, once per group
    assert filtered.value == 100 * len(records) - 3


def test_a_stream_catching_up_reads_only_the_records_its_value_names() -> None:
    clock, cache = _cache()
    for o in range(1_000):
        cache.on_records([new_message(0, o, b"k%d" % o, _value(owner=f"user-{o % 100}", o=o))])
    sink = Sink()
    read: list[int] = []

    class Counting(KafkaEventEncoder):
        def matches(self, m: Message, parsed: Any = UNPARSED) -> bool:
            read.append(m[OFFSET])
            return super().matches(m, parsed)

    encoder = Counting("t", (Filter(values=value_conditions({"/owner": "user-7"}, str)),))
    cache.subscribe(encoder, sink, Start())
    _run(clock)
    assert [json.loads(v)["o"] for v in sink.values()] == list(range(7, 1_000, 100))
    assert read == list(range(7, 1_000, 100)), "only the candidates the index lists"
    index = cache.log.index
    assert index is not None and index.sizes() == (100, 1_000)


def test_the_index_forgets_records_that_leave() -> None:
    index = LogIndex()
    path = ValuePath("/s")
    window = [new_message(0, o, None, _value(s=o % 2)) for o in range(4)]
    assert [m[OFFSET] for m in index.run((path, b"1"), window)] == [1, 3]
    m = new_message(0, 4, None, _value(s=1))
    index.add(m)
    assert [m[OFFSET] for m in index.run((path, b"1"), window)] == [1, 3, 4]
    index.died(window[1])
    assert index.dead == 1
    gone = new_message(0, 9, None, b"not json")
    index.died(gone)
    assert index.dead == 1, "a value that is not JSON was listed nowhere"
    assert index.gone == {window[1][SEQ]}, "readers pass over what was listed, nothing else kept"
    index.rebuild([window[3], m])
    assert index.gone == set() and index.sizes() == (1, 2)
