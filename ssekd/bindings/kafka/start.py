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
  cache judges the streams it is told are `ahead`);
- any other partition starts at the cache's historical start as it was when the stream opened
  (all it held, or the whole current state of a compacted topic), also for `since` (the catch-up
  then passes over records older than it) and for an id that does not decode. A partition the
  cache had not heard of yet starts where the cache began reading it: records that arrived
  between the open and the placement are the stream's even when the cache evicted them since
  (read back from Kafka);
- a stream that says nothing on a `defaultOffset: live` topic starts at the end each partition
  had when it opened, so it joins the tail at once; a partition whose end the cache had not
  reached yet starts where the cache reached it.
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

    None until the cache has heard of every partition of the topic (a record or its end), so
    a stream's first id already covers all of them and none is read from a guessed position.
    """
    count = log.partition_count
    if count is None or len(log.partitions) < count:
        return None
    live = live_topic and not start.has_id and start.since_ms is None
    resume = start.resume or {}
    positions: dict[int, int] = {}
    ahead: dict[int, int] = {}
    complete = True
    for p, part in log.partitions.items():
        at = resume.get(p)
        if at is not None and at > part.next:
            ahead[p] = at
        if at is not None:
            positions[p] = at
        elif not live:
            positions[p] = opened.starts.get(p, part.origin)
        elif p in opened.ends:
            positions[p] = opened.ends[p]
        elif part.live_from is not None:
            positions[p] = part.live_from
        else:
            complete = False
    return StartPositions(positions, complete, ahead)
