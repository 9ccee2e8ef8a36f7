"""The bounded per-topic log of the kafka cache: bounds move its start, compaction keeps the
latest value per key, and catch-up readers follow arrival order."""

from __future__ import annotations

import gc
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from ssekd.bindings.kafka.message import (
    KEY,
    OFFSET,
    PARTITION,
    SEQ,
    SIZE,
    VALUE,
    Message,
    new_message,
    with_value,
    within_bytes,
)
from ssekd.bindings.kafka.topic_log import CacheBounds, TopicLog


def _msgs(p: int, start: int, n: int, key: bytes | None = None, ts: int = 0) -> list[Message]:
    return [new_message(p, o, key, b"v%d" % o, (), ts) for o in range(start, start + n)]


def test_topic_log_bounds_move_start() -> None:
    log = TopicLog("t", CacheBounds(max_messages=10))
    log.append(_msgs(0, 0, 8) + _msgs(1, 0, 8), now=0)
    assert log.count == 10
    assert log.partitions[0].start + log.partitions[1].start == 6
    assert [m[OFFSET] for m in log.read({0: 0, 1: 0}, 100)
            if m[PARTITION] == 0] == list(range(log.partitions[0].start, 8))


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
        log.append([new_message(0, o, b"k%d" % (o % 3), b"%d" % o)], now=0)
    log.append([new_message(0, 3000, b"k0", None)], now=0)
    latest = log.read({0: 0}, 100)
    assert [(m[KEY], m[VALUE]) for m in latest] == [(b"k1", b"2998"), (b"k2", b"2999"),
                                                  (b"k0", None)]
    assert log.count == 3


def test_catch_up_cursor_reads_arrival_order_in_slices() -> None:
    """A reader that follows its cursor sees every record once, in the order the tail got them,
    leaves out partitions it has no position for, and survives eviction under it."""
    log = TopicLog("t", CacheBounds(max_messages=50))
    batches = [_msgs(0, 0, 7), _msgs(2, 0, 3), _msgs(1, 0, 5), _msgs(0, 7, 4)]
    for b in batches:
        log.append(b, now=0)
    arrival = [(m[PARTITION], m[OFFSET]) for b in batches for m in b]
    got: list[tuple[int, int]] = []
    cursor = None
    while True:
        records, cursor = log.read_from({0: 0, 1: 0, 2: 0}, cursor, 4)
        if not records:
            break
        got += [(m[PARTITION], m[OFFSET]) for m in records]
    assert got == arrival
    # partition 2 not positioned (a live stream before its end is known): left out
    only = log.read_from({0: 0, 1: 0}, None, 100)[0]
    assert [(m[PARTITION], m[OFFSET]) for m in only] == [a for a in arrival if a[0] != 2]
    # a resume map starts at the earliest record any partition still needs
    assert log.start_cursor({0: 7, 1: 5, 2: 3}) == log.seq - 3
    # records evicted below a cursor: the read carries on from the oldest one held
    log.append(_msgs(1, 5, 60), now=0)
    records, _ = log.read_from({0: 11, 1: 0, 2: 3}, 1, 5)
    assert records[0] is log.partitions[1].records[log.partitions[1].head]


def test_loaded_once_every_partition_has_reached_its_end() -> None:
    """What readiness waits for: the end of every partition the metadata names, empty or not."""
    log = TopicLog("t", CacheBounds())
    assert not log.loaded()  # no metadata yet
    log.partition_count = 2
    log.reached_end(0, 5)
    assert not log.loaded()
    log.reached_end(1, 0)
    assert log.loaded()


def test_a_rewound_partition_starts_empty_and_its_old_records_are_gone() -> None:
    """The broker lost partition 0 (restarted empty): the consumer reads it again from offset 0.
    Records below what the log reached are re-fetches and dropped, until the rewind; then
    they are new, and the lost incarnation's records are gone from every read."""
    log = TopicLog("t", CacheBounds())
    log.append(_msgs(0, 0, 5) + _msgs(1, 0, 5), now=0)
    before_rewind = log.seq
    assert log.append(_msgs(0, 3, 2), now=0) == [], "a re-fetch"
    log.rewind(0, 0)
    fresh = log.append(_msgs(0, 0, 2), now=0)
    assert [m[OFFSET] for m in fresh] == [0, 1]
    assert log.count == 7 and log.partitions[0].start == 0 and log.partitions[0].next == 2
    got = log.read({0: 0, 1: 0}, 100)
    assert [(m[PARTITION], m[OFFSET], m[SEQ] > before_rewind) for m in got] == \
        [(1, o, False) for o in range(5)] + [(0, 0, True), (0, 1, True)]
    log.rewind(1, 0)  # partition 1 lost too, and nothing written to it since
    log.reached_end(1, 0)
    assert log.count == 2 and log.partitions[1].live_from == 0
    log.evict(now=0)
    assert [m[OFFSET] for m in log.read({0: 0, 1: 0}, 100)] == [0, 1]


def test_within_bytes_stops_at_the_bound_and_keeps_at_least_one() -> None:
    """The one byte bound of catch-up reads (`TopicLog.read_from`) and history reads
    (`HistoryFetcher`): records up to and including the one that reaches `max_bytes`, never
    none while there is one, all of them when they stay under it."""
    msgs = _msgs(0, 0, 5)
    size = msgs[0][SIZE]
    assert within_bytes(msgs, 2 * size) == msgs[:2], "the record that reaches the bound is in"
    assert within_bytes(msgs, 2 * size + 1) == msgs[:3]
    assert within_bytes(msgs, 1) == msgs[:1], "at least one, however small the bound"
    assert within_bytes(msgs, 100 * size) == msgs
    assert within_bytes([], 10) == []
    log = TopicLog("t", CacheBounds(max_messages=100))
    log.append(msgs, now=0)
    got, _ = log.read_from({0: 0}, None, limit=100, max_bytes=2 * size)
    assert [m[OFFSET] for m in got] == [0, 1]


def test_records_are_plain_tuples_the_collector_stops_tracking() -> None:
    """A cached record is an exact tuple of atomic values: the first collection that sees it
    stops tracking it, so full collections do not walk the cache (message.py says why)."""
    log = TopicLog("t", CacheBounds(), compacted=True)
    log.append([new_message(0, o, b"k%d" % (o % 3), b"v", (("etag", b"e"),), 5)
                for o in range(10)], now=0)
    log.append([with_value(m, b"w") for m in _msgs(1, 0, 3)], now=0)
    gc.collect()
    held = list(log.window())
    assert len(held) == 6 and all(type(m) is tuple for m in held)  # 3 keys, 3 without
    assert not any(gc.is_tracked(m) for m in held)


def _held(log: TopicLog) -> Counter[int]:
    """How many of the log's lists (arrival order, each partition's) hold each record."""
    counts: Counter[int] = Counter(m[SEQ] for m in log.window())
    for part in log.partitions.values():
        counts.update(m[SEQ] for m in part.records[part.head:])
    return counts


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["write", "write", "write", "rewind", "evict"]),
                          st.integers(0, 1), st.integers(1, 60), st.integers(0, 2**32)),
                min_size=1, max_size=40))
def test_the_replaced_records_are_exactly_those_the_lists_still_hold(
        steps: list[tuple[str, int, int, int]]) -> None:
    """`TopicLog.replaced` knows each replaced record as long as one of the log's lists holds
    it, with how many do, and forgets it when the last one drops it: through compaction,
    squeezes of both lists, eviction by count and bytes, and partitions starting over. Its size
    is bounded by what the lists hold (no entry outlives its record)."""
    log = TopicLog("t", CacheBounds(max_messages=300, max_bytes=300 * 200), compacted=True)
    nxt = {0: 0, 1: 0}
    for action, p, n, seed in steps:
        if action == "write":
            keys = [b"k%d" % ((seed >> i) % 7 if n % 3 else (seed + i) % 400) for i in range(n * 20)]
            log.append([new_message(p, nxt[p] + i, k, b"v") for i, k in enumerate(keys)], now=0)
            nxt[p] += len(keys)
        elif action == "rewind":
            log.rewind(p, 0)
            nxt[p] = 0
        else:
            log.evict(now=0)
        counts = _held(log)
        assert all(counts[seq] == holders for seq, holders in log.replaced.items()), \
            "each entry counts the lists that hold its record"
        live = [m for m in log.window() if m[SEQ] not in log.replaced]
        assert len(live) == log.count
        assert len({(m[PARTITION], m[KEY]) for m in live}) == len(live), "one record per key"
