"""A subscription is a cursor into a topic's cache, and the machinery that moves it.

Two ways a cursor moves:

- *at the tail* it belongs to a `TailGroup`: subscribers that share an encoder (route, filters,
  id format) and a position. Each new batch is encoded once per group and handed to every member
  as one write. Groups whose positions become equal merge, so after a few batches a thousand
  subscribers of one route are one group.
- *lagging* (new, resumed, or paused by its transport) it reads on its own: from the cache, or
  from Kafka for offsets older than the cache, then joins a tail group when nothing is left.

A transport that cannot keep up pauses its subscription (Twisted producer/consumer): the cursor
stops, nothing is buffered for it, others are not delayed. When it resumes it catches up from
the cache or Kafka; it never skips a record.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from ssekd.bindings.kafka.client import FetchResult
from ssekd.bindings.kafka.message import Message
from ssekd.progress import ProgressState

if TYPE_CHECKING:
    from ssekd.bindings.kafka.cache import TopicCache
    from ssekd.bindings.kafka.topic_log import TopicLog

#: Records read from the cache per catch-up step (one write to the subscriber).
CATCH_UP_BATCH = 2000
#: Records asked of Kafka per history read.
FETCH_BATCH = 2000


class EventEncoder(Protocol):
    """Turns records into SSE bytes for one (route, filters, id format); given by sse-kafka.

    `encode` advances `progress` past every record at or after its partition's position
    (matching or not) and skips records before it, so it is also the de-duplicator.
    """

    @property
    def key(self) -> Hashable: ...

    def encode(self, records: Sequence[Message], progress: ProgressState,
               catch_up: CatchUp | None) -> bytes: ...


class EventSink(Protocol):
    """Where a subscription writes (the sse stream)."""

    def write(self, data: bytes) -> None: ...

    def end(self) -> None: ...


@dataclass(frozen=True)
class Start:
    """Where a new stream starts: a resume map from its last event id, the live end, or a time."""

    positions: dict[int, int] | None = None
    live: bool = False
    since_ms: int | None = None


class CatchUp:
    """Per-subscriber filtering that applies only before the stream first reaches the tail.

    - `since_ms`: records older than the requested start time are passed over.
    - a fresh stream of a compacted topic starts from an empty state, so a tombstone for a key
      it never sent is meaningless and left out (SPEC §8: a late subscriber gets the latest value
      of each live key); a tombstone for a key it did send is delivered.
    """

    __slots__ = ("log", "sent_keys", "since_ms")

    def __init__(self, log: TopicLog, since_ms: int | None, fresh: bool) -> None:
        self.log = log  # whether the topic is compacted may be learnt after the stream opened
        self.since_ms = since_ms
        self.sent_keys: set[tuple[int, bytes | None]] | None = set() if fresh else None

    def active(self) -> bool:
        """Whether `admits` can say no (or must see records), so encoders may skip asking."""
        return self.since_ms is not None or (self.sent_keys is not None and self.log.compacted)

    def admits(self, m: Message) -> bool:
        if self.since_ms is not None and m.timestamp < self.since_ms:
            return False
        keys = self.sent_keys
        if keys is not None and self.log.compacted:
            k = (m.partition, m.key)
            if m.value is None:
                if k not in keys:
                    return False
                keys.discard(k)
            else:
                keys.add(k)
        return True


class TailGroup:
    """Subscribers at the tail with the same encoder and position: encode once, write many."""

    __slots__ = ("encoder", "members", "progress")

    def __init__(self, encoder: EventEncoder, progress: ProgressState) -> None:
        self.encoder = encoder
        self.progress = progress
        self.members: dict[Subscription, None] = {}

    def key(self) -> tuple[Hashable, tuple[tuple[int, int], ...]]:
        return (self.encoder.key, self.progress.key())


class Subscription:
    """One stream's cursor. `pause`/`resume`/`close` are what the sse stream calls."""

    __slots__ = (
        "__weakref__",
        "_call",
        "_cursor",
        "_fetching",
        "cache",
        "catch_up",
        "closed",
        "encoder",
        "group",
        "live",
        "paused",
        "progress",
        "sink",
    )

    def __init__(self, cache: TopicCache, encoder: EventEncoder, sink: EventSink,
                 progress: ProgressState, live: bool, catch_up: CatchUp | None) -> None:
        self.cache = cache
        self.encoder = encoder
        self.sink = sink
        self.progress = progress
        self.live = live
        self.catch_up = catch_up
        self.group: TailGroup | None = None
        self.paused = False
        self.closed = False
        self._call: Any = None
        self._fetching = False
        #: Next `seq` of the cache's log to read while catching up, valid while the progress
        #: moved only by reading the log in order (None: found again from the positions).
        self._cursor: int | None = None

    # -- the stream's side ---------------------------------------------------------------------

    def pause(self) -> None:
        if self.closed or self.paused:
            return
        self.paused = True
        self._leave_group()
        self._cancel_call()

    def resume(self) -> None:
        if self.closed or not self.paused:
            return
        self.paused = False
        self.schedule()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._leave_group()
        self._cancel_call()
        self.cache.forget(self)

    # -- the cache's side ----------------------------------------------------------------------

    def write(self, data: bytes) -> None:
        """Write at the tail (called by the cache for each group batch)."""
        self.sink.write(data)

    def schedule(self) -> None:
        """Take a catch-up step soon (on a later reactor turn, so writes interleave fairly)."""
        if self._call is None and not self.closed and not self.paused and not self._fetching:
            self._call = self.cache.reactor.callLater(0, self._step)

    def _cancel_call(self) -> None:
        if self._call is not None:
            if self._call.active():
                self._call.cancel()
            self._call = None

    def _leave_group(self) -> None:
        g = self.group
        if g is not None:
            self.group = None
            g.members.pop(self, None)
            # the subscriber got everything the group wrote: it goes on from the group's position
            self.progress = g.progress.copy()
            self._cursor = None
            if not g.members:
                self.cache.drop_group(g)
            self.cache.lagging.add(self)

    def _step(self) -> None:
        """One catch-up step: fill positions, read history or cache, or join the tail."""
        self._call = None
        if self.closed or self.paused or self._fetching or self.group is not None:
            return
        log = self.cache.log
        progress = self.progress
        if log.partition_count is None or len(log.partitions) < log.partition_count:
            # Wait until the cache has heard of every partition (a record or its end), so the
            # first id already covers all of them and none is read from a guessed position.
            return
        for p in [p for p in progress.offsets if p >= log.partition_count]:
            progress.drop(p)
            self._cursor = None
        unresolved = False
        for p, part in log.partitions.items():
            if p not in progress.offsets:
                if not self.live:
                    progress.set(p, log.historical_start(p))
                    self._cursor = None
                elif part.live_from is not None:
                    progress.set(p, part.live_from)
                    self._cursor = None
                else:
                    unresolved = True
        for p, pos in progress.offsets.items():
            held = log.partitions.get(p)
            if held is not None and pos < held.start:
                self._fetch(p, pos)
                return
        records, self._cursor = log.read_from(progress.offsets, self._cursor, CATCH_UP_BATCH)
        if records:
            data = self.encoder.encode(records, progress, self.catch_up)
            if data:
                self.sink.write(data)
            self.schedule()
            return
        if unresolved:
            return  # woken again by the cache's next batch or end-of-partition
        self.catch_up = None
        self.cache.join_tail(self)

    def _fetch(self, p: int, pos: int) -> None:
        self._fetching = True
        d = self.cache.fetch(p, pos, FETCH_BATCH)
        d.addCallback(self._fetched, p, pos)
        d.addErrback(self._fetch_failed)

    def _fetched(self, result: FetchResult, p: int, pos: int) -> None:
        self._fetching = False
        self._cursor = None
        if self.closed:
            return
        if result.records:
            data = self.encoder.encode(result.records, self.progress, self.catch_up)
            if data:
                self.sink.write(data)
        elif result.end is not None:
            # Kafka holds nothing in [pos, end): the cache holds everything from its start
            self.progress.set(p, max(pos, self.cache.log.partitions[p].start))
        else:
            self.cache.history_unavailable(p, pos, result.error)
            self._call = self.cache.reactor.callLater(1.0, self._retry)
            return
        self.schedule()

    def _retry(self) -> None:
        self._call = None
        self.schedule()

    def _fetch_failed(self, failure: Any) -> None:
        self._fetching = False
        self.cache.history_unavailable(-1, -1, str(failure.value))
        if not self.closed:
            self._call = self.cache.reactor.callLater(1.0, self._retry)
