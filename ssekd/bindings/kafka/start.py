"""Where a stream starts in each partition of its topic: `start_positions`, and nothing else.

A stream's request says where it wants to start (`Start`: its last event id, `since`, or
nothing); the topic's `defaultOffset` says where a stream that says nothing starts; the cache's
state says what those mean in offsets. All three meet in `start_positions`, so every rule of
docs/protocol.md about where a stream begins is in this one function:

- a listed partition of a last event id resumes at its offset, even one older than the cache
  holds (the subscription then reads it from Kafka); a listed partition the topic does not have
  is ignored. An offset past the end the cache has reached is kept too: another worker or daemon
  may have read further than this cache (or it is still loading), and then the records will
  come. If instead it is of an incarnation the broker lost (restarted empty), the cache's next
  report of the partition's end says so, and the stream starts the partition over then (the
  cache judges the streams it is told are `ahead`). A listed partition the cache has not heard
  of yet keeps its offset too: the stream holds it until the cache reads that partition;
- a partition a readable last event id does not list starts where the cache began reading it
  (its origin): the id was made before the stream had that partition (its leader was
  unavailable, or the topic grew since), so none of it was sent;
- any other partition starts at the cache's historical start as it was when the stream opened
  (all it held, or the whole current state of a compacted topic), also for `since` (the catch-up
  then passes over records older than it) and for an id that does not decode. A partition the
  cache had not heard of yet starts where the cache began reading it: records that arrived
  between the open and the placement are the stream's even when the cache evicted them since
  (read back from Kafka);
- a stream that says nothing on a `defaultOffset: live` topic starts at the end each partition
  had when it opened, so it joins the tail at once; a partition whose end the cache had not
  reached yet starts where the cache reached it.

A stream does not wait for ever for every partition (Zilla #1628 does): once the cache's
`partition-wait` has passed, it is placed in the partitions the cache has heard of and delivers
them while the others catch up; it joins the tail only once every partition is placed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple

from ssekd.bindings.kafka.topic_log import TopicLog


@dataclass(frozen=True)
class Start:
    """Where a stream's request asks to start, as sse-kafka read it (at most one of these).

    `resume` is the partition -> next offset map of its last event id; `undecodable_id` says it
    sent one that does not decode (it starts like an id listing no partition); `since_ms` is
    the `since` parameter in epoch milliseconds.
    """

    resume: Mapping[int, int] | None = None
    undecodable_id: bool = False
    since_ms: int | None = None

    @property
    def has_id(self) -> bool:
        """Whether the stream came back with a last event id (readable or not)."""
        return self.resume is not None or self.undecodable_id


class StartPositions(NamedTuple):
    """The next offset to read in each partition `start_positions` could place; `complete`
    is False while some partition waits for the cache to reach its end (ask again then).
    `ahead` maps each partition whose last-event-id offset lies past the end the cache has
    reached to that offset (for the cache to judge at its next end of that partition)."""

    positions: dict[int, int]
    complete: bool
    ahead: dict[int, int] = {}


class AtOpen(NamedTuple):
    """What the cache held when a stream opened, for `start_positions` to place it by then.

    `ends`: the end of each partition whose end the cache had reached (a live stream starts
    there). `starts`: the historical start of each partition the cache knew (a stream that asks
    for history starts there, however much the cache evicted before it could be placed).
    """

    ends: dict[int, int]
    starts: dict[int, int]


def at_open(log: TopicLog) -> AtOpen:
    """Taken when a stream opens (before the cache may know every partition)."""
    ends = {p: part.next for p, part in log.partitions.items() if part.live_from is not None}
    return AtOpen(ends, {p: log.historical_start(p) for p in log.partitions})


def start_positions(start: Start, live_topic: bool, log: TopicLog,
                    opened: AtOpen) -> StartPositions | None:
    """Where a stream asking `start` of a topic (`defaultOffset: live` when `live_topic`)
    starts in each partition the cache knows of, given `at_open(log)` from when it opened.

    None until the cache knows how many partitions the topic has and has heard of every one of
    them (a record or its end), so that a stream's ids list every partition from the first - or,
    once the cache's `partition-wait` has passed (`log.partial`), of one of them: a partition it
    has not heard of by then - its leader is unavailable, or the consumer is slow to reach it -
    is left out unless the last event id lists it, and `complete` is False. The stream delivers
    the partitions it has while that one catches up (Zilla #1628 waits for all of them), and
    places it when the cache hears of it. A stream keeps every partition its id listed, so its
    ids never drop one; an id that does not list a partition was made before the stream had it
    (or before the topic grew it), so nothing of it was sent, and the stream starts it where the
    cache began reading it: nothing is lost.
    """
    count = log.partition_count
    if count is None or not log.partitions or (len(log.partitions) < count and not log.partial):
        return None
    live = live_topic and not start.has_id and start.since_ms is None
    resume = start.resume or {}
    positions: dict[int, int] = {}
    ahead: dict[int, int] = {}
    complete = True
    for p in sorted(set(range(count)) | set(log.partitions)):
        at = resume.get(p)
        part = log.partitions.get(p)
        if part is None:
            if at is not None:
                positions[p] = at  # kept from the id: the cache hears of it later
            else:
                complete = False
            continue
        if at is not None and at > part.next:
            ahead[p] = at
        if at is not None:
            positions[p] = at
        elif start.resume is not None:
            # an id made before the stream had this partition: all of it is the stream's
            positions[p] = part.origin
        elif not live:
            positions[p] = opened.starts.get(p, part.origin)
        elif p in opened.ends:
            positions[p] = opened.ends[p]
        elif part.live_from is not None:
            positions[p] = part.live_from
        else:
            complete = False
    return StartPositions(positions, complete, ahead)
