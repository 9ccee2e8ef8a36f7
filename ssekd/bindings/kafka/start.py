"""Where a stream starts in each partition of its topic: `start_positions`, and nothing else.

A stream's request says where it wants to start (`Start`: its last event id, `since`, or
nothing); the topic's `defaultOffset` says where a stream that says nothing starts; the cache's
state says what those mean in offsets. All three meet in `start_positions`, so every rule of
docs/protocol.md about where a stream begins is in this one function:

- a listed partition of a last event id resumes at its offset, even one older than the cache
  holds (the subscription then reads it from Kafka); a listed partition the topic does not have
  is ignored;
- any other partition starts at the cache's historical start (all it holds, or the whole
  current state of a compacted topic), also for `since` (the catch-up then passes over records
  older than it) and for an id that does not decode;
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
    is False while some partition waits for the cache to reach its end (ask again then)."""

    positions: dict[int, int]
    complete: bool


def live_ends(log: TopicLog) -> dict[int, int]:
    """The end of each partition whose end the cache has reached: taken when a stream opens,
    for `start_positions` to start a live stream there."""
    return {p: part.next for p, part in log.partitions.items() if part.live_from is not None}


def start_positions(start: Start, live_topic: bool, log: TopicLog,
                    ends_at_open: Mapping[int, int]) -> StartPositions | None:
    """Where a stream asking `start` of a topic (`defaultOffset: live` when `live_topic`)
    starts in each partition the cache knows of, given `live_ends(log)` from when it opened.

    None until the cache has heard of every partition of the topic (a record or its end), so
    a stream's first id already covers all of them and none is read from a guessed position.
    """
    count = log.partition_count
    if count is None or len(log.partitions) < count:
        return None
    live = live_topic and not start.has_id and start.since_ms is None
    resume = start.resume or {}
    positions: dict[int, int] = {}
    complete = True
    for p, part in log.partitions.items():
        at = resume.get(p)
        if at is not None:
            positions[p] = at
        elif not live:
            positions[p] = log.historical_start(p)
        elif p in ends_at_open:
            positions[p] = ends_at_open[p]
        elif part.live_from is not None:
            positions[p] = part.live_from
        else:
            complete = False
    return StartPositions(positions, complete)
