"""The tail router on its own terms: a record visits only the groups its key or headers name,
whatever the number of groups; groups that come and go leave no index entries behind; a member
paused by another group's write keeps the position its own group wrote up to."""

from __future__ import annotations

import gc
import sys
from typing import Any

import pytest
from twisted.internet.testing import MemoryReactorClock

from ssekd.bindings.kafka.cache import CacheServer, TopicCache
from ssekd.bindings.kafka.message import KEY, Message, new_message
from ssekd.bindings.kafka.start import Start
from ssekd.bindings.kafka.subscription import Subscription
from ssekd.bindings.kafka.topic_log import CacheBounds, TopicLog
from ssekd.bindings.sse_kafka.encoder import Filter, KafkaEventEncoder
from ssekd.event_ids import ProgressId
from ssekd.telemetry.events import EventLog
from ssekd.telemetry.metrics import Counter
from tests.support.subscriptions import Sink

#: Every test against the pure hot path and its compiled twin (tests/support/hotpath.py).
pytestmark = pytest.mark.usefixtures("hot_path")

EMPTY = {"groups": 0, "keys": 0, "headers": 0, "header_names": 0, "values": 0, "pointers": 0,
         "anything": 0,
         "floored": 0, "counters": 0}


class Client:
    def consume(self, *a: Any, **kw: Any) -> None:
        pass


class CountingEncoder(KafkaEventEncoder):
    """Counts the records it is asked about (the work a record costs per group)."""

    asked = 0

    def matches(self, m: Message) -> bool:
        type(self).asked += 1
        return super().matches(m)


def _cache(compacted: bool = False, **bounds: Any) -> tuple[MemoryReactorClock, TopicCache]:
    clock = MemoryReactorClock()
    server = CacheServer(clock, Client(), "cache", EventLog("t"),  # type: ignore[arg-type]
                         bounds=CacheBounds(**bounds))
    cache = server.topic("t")
    cache.on_metadata(1, compacted)
    cache.on_end(0, 0)
    return clock, cache


def _run(clock: MemoryReactorClock) -> None:
    while any(c.getTime() <= clock.seconds() for c in clock.getDelayedCalls()):
        clock.advance(0)


def test_a_record_visits_only_the_groups_its_key_and_headers_name() -> None:
    clock, cache = _cache()
    filtered = Counter()
    sinks: dict[bytes, Sink] = {}
    for i in range(5_000):
        key = b"item-%d" % i
        sinks[key] = Sink()
        cache.subscribe(CountingEncoder("t", (Filter(key=key),), filtered=filtered),
                        sinks[key], Start())
    users = {u: Sink() for u in (b"alice", b"bob")}
    for u, sink in users.items():
        cache.subscribe(CountingEncoder("t", (Filter(headers=(("user", u),)),),
                                        filtered=filtered), sink, Start())
    everything = Sink()
    cache.subscribe(KafkaEventEncoder("t"), everything, Start())
    _run(clock)
    assert len(cache.groups) == 5_003
    CountingEncoder.asked = 0
    cache.on_records([new_message(0, 0, b"item-7", b"a", (("user", b"bob"),)),
                      new_message(0, 1, b"nobody", b"b"),
                      new_message(0, 2, b"item-9", b"c")])
    assert CountingEncoder.asked == 3, "item-7's group, bob's group, item-9's group"
    assert sinks[b"item-7"].values() == ["a"] and sinks[b"item-9"].values() == ["c"]
    assert users[b"bob"].values() == ["a"] and users[b"alice"].values() == []
    assert everything.values() == ["a", "b", "c"]
    # each filtered group held back the records it did not take: 5,002 groups x 3 records,
    # less the three they took
    assert filtered.value == 5_002 * 3 - 3
    # ids are the tail's position after each record, the same for every group
    assert sinks[b"item-9"].writes == [b"id:" + ProgressId.encode({0: 3}).encode()
                                       + b"\ndata:c\n\n"]


def test_any_of_filters_take_a_record_named_twice_once() -> None:
    clock, cache = _cache()
    sink = Sink()
    cache.subscribe(KafkaEventEncoder("t", (Filter(key=b"k"), Filter(headers=(("h", b"v"),)))),
                    sink, Start())
    _run(clock)
    cache.on_records([new_message(0, 0, b"k", b"both", (("h", b"v"),)),
                      new_message(0, 1, b"x", b"header", (("h", b"v"), ("h", b"v"))),
                      new_message(0, 2, b"k", b"key")])
    assert sink.values() == ["both", "header", "key"]


def test_groups_that_come_and_go_leave_nothing_behind() -> None:
    """100,000 streams of distinct keys, one at a time: each opens, gets a record at the tail
    and closes. The router's index ends empty and memory returns to where it was."""
    clock, cache = _cache(max_messages=1_000)
    filtered = Counter()
    before = 0
    for i in range(100_000):
        key = b"k%d" % i
        sink = Sink()
        s = cache.subscribe(KafkaEventEncoder("t", (Filter(key=key),), filtered=filtered),
                            sink, Start(resume={0: i}))
        _run(clock)
        cache.on_records([new_message(0, i, key, b"v")])
        assert sink.values() == ["v"]
        s.close()
        if i == 10_000:  # the cache and its index are full by now
            gc.collect()
            before = sys.getallocatedblocks()
    gc.collect()
    grown = sys.getallocatedblocks() - before
    assert cache.tail.sizes() == EMPTY
    assert not cache.lagging and not cache.subscriptions()
    assert cache.log.index is not None
    terms, entries = cache.log.index.sizes()
    assert terms <= 2_000 and entries <= 2_000, "the catch-up index follows the cache's records"
    assert grown < 2_000, f"{grown} more memory blocks after 90,000 more streams came and went"


def test_a_member_paused_before_its_group_is_written_keeps_the_position_before_the_batch(
) -> None:
    """On HTTP/2 a write to one stream can pause every stream of the connection: a member of a
    group not written yet leaves at the position before the batch, and reads the batch's records
    again as it catches up; a member of a group already written leaves after them."""
    clock, cache = _cache()
    subs: dict[str, Subscription] = {}

    class PausingSink(Sink):
        def write(self, data: bytes) -> None:
            super().write(data)
            for s in subs.values():
                s.pause()

    sinks = {"a": PausingSink(), "b": PausingSink()}
    subs["a"] = cache.subscribe(KafkaEventEncoder("t", (Filter(key=b"a"),)), sinks["a"], Start())
    subs["b"] = cache.subscribe(KafkaEventEncoder("t", (Filter(key=b"b"),)), sinks["b"], Start())
    _run(clock)
    cache.on_records([new_message(0, 0, b"a", b"a0"), new_message(0, 1, b"b", b"b1")])
    written = [k for k in sinks if sinks[k].values()]
    assert len(written) == 1, "the first write paused both"
    (other,) = set(sinks) - set(written)
    assert subs[written[0]].progress.offsets == {0: 2}
    assert subs[other].progress.offsets == {0: 0}
    for s in subs.values():
        s.resume()
    _run(clock)
    assert sinks["a"].values() == ["a0"] and sinks["b"].values() == ["b1"]


def test_replaced_records_do_not_pile_up_behind_a_key_that_never_changes() -> None:
    """A compacted topic: one key written once, others updated again and again. The arrival
    order drops replaced records once they are most of it, so the cache holds about one record
    per key, not every update since the unchanged one."""
    log = TopicLog("t", CacheBounds(), compacted=True)
    log.append([new_message(0, 0, b"never-updated", b"x")], 0.0)
    offset = 1
    for _ in range(100):
        batch = [new_message(0, offset + i, b"k%d" % (i % 500), b"y") for i in range(1_000)]
        log.append(batch, 0.0)
        offset += 1_000
    assert log.count == 501
    assert len(list(log.window())) < 4_000
    # and a catch-up read still finds every latest value, in order
    got, _ = log.read_from({0: 0}, None, 10_000)
    assert [m[KEY] for m in got][:1] == [b"never-updated"] and len(got) == 501


def test_a_stream_of_a_key_the_cache_has_no_record_of_joins_the_tail_at_once() -> None:
    clock, cache = _cache()
    cache.on_records([new_message(0, o, b"other", b"x") for o in range(5)])
    sink = Sink()
    s = cache.subscribe(KafkaEventEncoder("t", (Filter(key=b"absent"),)), sink, Start())
    _run(clock)
    assert s.at_tail and sink.writes == [] and s.progress.offsets == {0: 5}
    cache.on_records([new_message(0, 5, b"absent", b"here")])
    assert sink.values() == ["here"]
