"""Unit tests of one piece: `start_positions`, the one place that decides where a stream starts
in each partition (docs/protocol.md), on a real `TopicLog`; and a subscription following it, on a
`MemoryReactorClock` with a fake cache (`RecordingCache`) and a fake Kafka."""

from __future__ import annotations

import pytest

from ssekd.bindings.kafka.history import FetchResult
from ssekd.bindings.kafka.message import Message, new_message
from ssekd.bindings.kafka.start import AtOpen, Start, StartPositions, at_open, start_positions
from ssekd.bindings.kafka.subscription import Subscription
from ssekd.bindings.kafka.topic_log import CacheBounds, TopicLog
from ssekd.bindings.sse_kafka.encoder import KafkaEventEncoder
from tests.support.subscriptions import RecordingCache, Sink


def _msgs(p: int, start: int, n: int, ts: int = 0) -> list[Message]:
    return [new_message(p, o, None, b"%d-%d" % (p, o), (), ts) for o in range(start, start + n)]


def _log(ends: dict[int, int], max_messages: int = 1000, compacted: bool = False) -> TopicLog:
    """A topic whose cache read partition p from offset 0 to `ends[p]` and reached its end."""
    log = TopicLog("t", CacheBounds(max_messages=max_messages), compacted=compacted)
    log.partition_count = len(ends)
    for p, end in ends.items():
        log.append(_msgs(p, 0, end), now=0)
        log.reached_end(p, end)
    return log


def _place(start: Start, log: TopicLog, live_topic: bool = False,
           opened: AtOpen | None = None) -> StartPositions:
    placed = start_positions(start, live_topic, log, at_open(log) if opened is None else opened)
    assert placed is not None
    return placed


NOTHING = AtOpen({}, {})


# -- start_positions -----------------------------------------------------------------------------

def test_no_id_on_a_historical_topic_starts_at_all_the_cache_holds() -> None:
    log = _log({0: 20, 1: 3}, max_messages=10)  # 23 records, 10 held: p0 lost its first 13
    assert log.partitions[0].start == 13
    assert _place(Start(), log) == StartPositions({0: 13, 1: 0}, complete=True)


def test_no_id_on_a_compacted_topic_starts_at_the_beginning_of_the_topic() -> None:
    """The whole current state, even what the cache evicted (read back from Kafka)."""
    log = TopicLog("t", CacheBounds(max_messages=2), compacted=True)
    log.partition_count = 1
    log.append([new_message(0, o, b"k%d" % o, b"v") for o in range(5, 10)], now=0)
    assert log.partitions[0].start > 5
    assert _place(Start(), log).positions == {0: 5}


def test_no_id_on_a_live_topic_starts_at_the_end_and_so_at_the_tail() -> None:
    log = _log({0: 20, 1: 3})
    opened = at_open(log)
    log.append(_msgs(0, 20, 2), now=0)  # arrived after the stream opened: it gets them
    assert _place(Start(), log, live_topic=True, opened=opened) == \
        StartPositions({0: 20, 1: 3}, complete=True)
    assert _place(Start(), log, live_topic=True).positions == \
        {p: part.next for p, part in log.partitions.items()}, "opened now: at the tail"


def test_a_live_stream_waits_for_partitions_whose_end_the_cache_has_not_reached() -> None:
    log = TopicLog("t", CacheBounds())
    log.partition_count = 2
    log.append(_msgs(0, 0, 5) + _msgs(1, 0, 5), now=0)
    log.reached_end(0, 5)
    opened = at_open(log)
    assert opened.ends == {0: 5}
    assert _place(Start(), log, True, opened) == StartPositions({0: 5}, complete=False)
    log.append(_msgs(1, 5, 2), now=0)
    log.reached_end(1, 7)
    log.append(_msgs(1, 7, 1), now=0)  # after the cache reached the end: the stream gets it
    assert _place(Start(), log, True, opened) == StartPositions({0: 5, 1: 7}, complete=True)


def test_nothing_is_placed_until_the_cache_knows_every_partition_or_stops_waiting() -> None:
    """So that ids list every partition from the first. Once `partition-wait` has passed
    (`log.partial`, Zilla #1628 waits for ever): the partitions heard of, `complete` False
    until every one is placed, and a partition the id lists kept at its offset even before
    the cache hears of it."""
    log = TopicLog("t", CacheBounds())
    assert start_positions(Start(resume={0: 1}), False, log, NOTHING) is None  # no metadata yet
    log.partition_count = 3
    assert start_positions(Start(), False, log, NOTHING) is None  # no partition heard of yet
    log.append(_msgs(0, 0, 3), now=0)
    assert start_positions(Start(), False, log, NOTHING) is None  # still waiting for the others
    log.partial = True  # partition-wait passed
    assert start_positions(Start(resume={0: 1, 2: 7}), False, log, NOTHING) == \
        StartPositions({0: 1, 2: 7}, complete=False)  # p1 not heard of
    assert start_positions(Start(), False, log, NOTHING) == \
        StartPositions({0: 0}, complete=False)
    log.reached_end(1, 0)
    assert start_positions(Start(resume={0: 1, 2: 7}), False, log, NOTHING) == \
        StartPositions({0: 1, 1: 0, 2: 7}, complete=True)


@pytest.mark.parametrize("live_topic", [False, True])
def test_a_last_id_resumes_where_it_says(live_topic: bool) -> None:
    log = _log({0: 20, 1: 3})
    assert _place(Start(resume={0: 12, 1: 3}), log, live_topic).positions == {0: 12, 1: 3}


def test_a_last_id_older_than_the_cache_is_kept_for_kafka() -> None:
    log = _log({0: 20}, max_messages=5)
    assert log.partitions[0].start == 15
    assert _place(Start(resume={0: 4}), log).positions == {0: 4}, \
        "not moved up to what the cache holds: the records between are read from Kafka"


@pytest.mark.parametrize("live_topic", [False, True])
def test_partitions_a_last_id_does_not_list_start_where_the_cache_began(live_topic: bool) -> None:
    """The id was made before the stream had them: all of them is the stream's, even what the
    cache evicted (read back from Kafka), where the historical start would skip that."""
    log = _log({0: 20, 1: 3, 2: 9}, max_messages=25)  # 32 records: p0 lost its first 7
    assert log.historical_start(0) == 7
    assert _place(Start(resume={1: 2}), log, live_topic).positions == {0: 0, 1: 2, 2: 0}


def test_partitions_the_topic_does_not_have_are_ignored() -> None:
    log = _log({0: 20, 1: 3})
    assert _place(Start(resume={1: 2, 7: 1, 900: 3}), log).positions == {0: 0, 1: 2}


@pytest.mark.parametrize("live_topic", [False, True])
def test_since_starts_at_the_historical_start(live_topic: bool) -> None:
    """The catch-up then passes over what is older (see the subscription test below)."""
    log = _log({0: 20, 1: 3})
    assert _place(Start(since_ms=5), log, live_topic).positions == {0: 0, 1: 0}


@pytest.mark.parametrize("live_topic", [False, True])
def test_an_undecodable_id_starts_at_the_historical_start(live_topic: bool) -> None:
    log = _log({0: 20, 1: 3}, max_messages=10)
    assert _place(Start(undecodable_id=True), log, live_topic).positions == {0: 13, 1: 0}


# -- a subscription placed by it -----------------------------------------------------------------

def _subscribe(cache: RecordingCache, start: Start) -> tuple[Subscription, Sink]:
    sink = Sink()
    s = Subscription(cache, KafkaEventEncoder("t"), sink, start)
    s.schedule()
    cache.run()
    return s, sink


def test_a_live_stream_joins_the_tail_without_reading_anything() -> None:
    cache = RecordingCache(_log({0: 20, 1: 3}), live=True)
    s, sink = _subscribe(cache, Start())
    assert cache.reports == ["tail"] and sink.writes == []
    assert s.progress.offsets == {0: 20, 1: 3}


def test_a_resumed_stream_older_than_the_cache_reads_kafka_then_the_cache() -> None:
    cache = RecordingCache(_log({0: 20}, max_messages=5))
    s, sink = _subscribe(cache, Start(resume={0: 12}))
    assert [(p, o) for p, o, _ in cache.fetches] == [(0, 12)] and cache.reports == []
    cache.fetches[0][2].callback(FetchResult(_msgs(0, 12, 3), None))
    cache.run()
    assert sink.values() == [f"0-{o}" for o in range(12, 20)]
    assert cache.reports == ["tail"] and s.progress.offsets == {0: 20}


def test_since_passes_over_older_records() -> None:
    log = TopicLog("t", CacheBounds())
    log.partition_count = 1
    log.append(_msgs(0, 0, 3, ts=1_000) + _msgs(0, 3, 2, ts=5_000), now=0)
    log.reached_end(0, 5)
    s, sink = _subscribe(RecordingCache(log, live=True), Start(since_ms=5_000))
    assert sink.values() == ["0-3", "0-4"]
    assert s.progress.offsets == {0: 5}, "older records are passed over, not left behind"


def test_pause_at_the_tail_and_close_are_reported() -> None:
    cache = RecordingCache(_log({0: 2}))
    s, sink = _subscribe(cache, Start())
    assert sink.values() == ["0-0", "0-1"]
    s.pause()
    s.resume()
    cache.run()
    s.close()
    assert cache.reports == ["tail", "left", "tail", "gone"]


# -- a partition the broker lost, and eviction before a stream is placed -------------------------

def test_a_last_id_past_the_end_the_cache_reached_is_kept_and_said_to_be_ahead() -> None:
    """Another worker or daemon may have read further than this cache: the records may come.
    The cache judges it at its next end of the partition (`ahead`)."""
    log = _log({0: 20, 1: 3}, max_messages=10)
    placed = _place(Start(resume={0: 15, 1: 100}), log)
    assert placed.positions == {0: 15, 1: 100} and placed.ahead == {1: 100}


def test_a_last_id_past_what_a_cold_cache_reached_is_kept() -> None:
    """Until the cache reaches the end it cannot tell; the cache checks again when it does."""
    log = TopicLog("t", CacheBounds())
    log.partition_count = 1
    log.append(_msgs(0, 0, 5), now=0)
    placed = _place(Start(resume={0: 100}), log)
    assert placed.positions == {0: 100} and placed.ahead == {0: 100}


def test_a_partition_heard_of_after_the_open_starts_where_the_cache_began() -> None:
    """Records that arrived between the open and the placement are the stream's, even those
    the cache evicted meanwhile (the subscription reads them from Kafka)."""
    log = TopicLog("t", CacheBounds(max_messages=10))
    log.partition_count = 2
    log.append(_msgs(0, 0, 4), now=0)
    opened = at_open(log)
    log.append(_msgs(0, 4, 20) + _msgs(1, 0, 20), now=0)  # a burst: evicts most of both
    assert log.partitions[0].start > 4 and log.partitions[1].start > 0
    assert _place(Start(), log, opened=opened).positions == {0: 0, 1: 0}


def test_a_live_stream_is_not_moved_back_by_the_start_at_open() -> None:
    log = _log({0: 20})
    opened = at_open(log)
    log.append(_msgs(0, 20, 5), now=0)
    assert _place(Start(), log, live_topic=True, opened=opened).positions == {0: 20}
