"""A subscription is a cursor into a topic's cache, and the machinery that moves it.

Two ways a cursor moves:

- *at the tail* it belongs to a tail group: subscribers that share an encoder (route, filters,
  id format). Each new batch is encoded once per group that takes any of its records and handed
  to every member as one write (`ssekd.bindings.kafka.tail`).
- *lagging* (new, resumed, or paused by its transport) it reads on its own: from the cache, or
  from Kafka for offsets older than the cache, then joins a tail group when nothing is left. A
  stream whose filters name keys or header values reads from the cache only the records that
  carry them (`TopicLog.candidates`), so a stream per item costs its own records, not the cache.

A transport that cannot keep up pauses its subscription (Twisted producer/consumer): the cursor
stops, nothing is buffered for it, others are not delayed. When it resumes it catches up from
the cache or Kafka; it never skips a record. A catch-up step (from the cache or one history read)
is bounded in bytes as well as records, and the next step comes on a later reactor turn, so a
transport can pause a stream before more than one step is buffered for it: a thousand clients
that read nothing hold a thousand small steps, not a thousand copies of the history.

Streams that catch up from the same place (a thousand browsers reconnecting with the id of the
same last event after a restart, or opening together at a topic's historical start) read the same
records and would encode the same bytes: a step encoded for one is kept a while (`SharedSteps`,
bounded in bytes) and the others write it as it is, taking its end position.

The subscription moves its own cursor and reports when it reaches the tail, leaves it or
closes; the topic's cache (`SubscribedCache`) alone decides which tail group or lagging set it
is in.
Where it starts is `ssekd.bindings.kafka.start`'s to say.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any, Protocol

from twisted.internet.defer import Deferred

from ssekd.bindings.kafka.history import FetchResult, HistoryBusy
from ssekd.bindings.kafka.log_index import Term
from ssekd.bindings.kafka.message import KEY, PARTITION, SEQ, TIMESTAMP, VALUE, Message
from ssekd.bindings.kafka.start import AtOpen, Start, StartPositions, at_open, start_positions
from ssekd.bindings.kafka.topic_log import TopicLog
from ssekd.event_ids import ProgressState
from ssekd.spi.stream import EventSink, event_block
from ssekd.telemetry.metrics import Counter

#: Records read from the cache per catch-up step (one write to the subscriber), at most.
CATCH_UP_BATCH = 2000
#: Records asked of Kafka per history read, at most.
FETCH_BATCH = 2000
#: Bytes (by `Message.size`) per catch-up step or history read, unless the cache_server's
#: `catch-up-bytes` says otherwise.
DEFAULT_CATCH_UP_BYTES = 64 * 1024
#: Bytes of encoded catch-up steps a topic keeps for other streams at the same place to reuse:
#: streams that start together take their steps together, so the last few steps are enough.
SHARED_STEP_BYTES = 1024 * 1024
#: Seconds before a stream asks again for a history read when every slot was taken.
HISTORY_BUSY_RETRY = 0.25


class EventEncoder(Protocol):
    """Turns records into SSE bytes for one (route, filters, id format); given by sse-kafka.

    `encode` advances `progress` past every record at or after its partition's position
    (matching or not) and skips records before it, so it is also the de-duplicator.
    """

    @property
    def key(self) -> Hashable:
        """Equal for encoders that make the same events of the same records."""
        ...

    @property
    def shape(self) -> Hashable:
        """Equal for encoders that make the same event of a record they both take (the id
        format): the cache makes it once for all of them."""
        ...

    @property
    def terms(self) -> tuple[Term, ...] | None:
        """None: the encoder takes every record. Otherwise it takes only records that carry
        one of these (a key, or a header's value; `matches` has the last word): the cache
        offers it no other."""
        ...

    @property
    def filtered(self) -> Counter:
        """Counts the records at the tail its filters held back (once per tail group)."""
        ...

    @property
    def not_json(self) -> Counter:
        """Counts the records at the tail whose value a value filter could not read as JSON
        (once per record, for every encoder that counts into it)."""
        ...

    def matches(self, m: Message, parsed: Any = ...) -> bool:
        """Whether it takes `m`; `parsed` is `m`'s value as a `value_path.ParsedValue` when
        the caller parsed it already, for filters on the value."""
        ...

    def event(self, m: Message, token: bytes) -> bytes:
        """The event of a record it takes, with `token` (the position after it) as its id."""
        ...

    def encode(self, records: Sequence[Message], progress: ProgressState,
               catch_up: CatchUp | None) -> bytes: ...


class SubscribedCache(Protocol):
    """What a subscription needs of the cache it reads (`TopicCache`), and what it reports.

    The subscription says when it caught up (`reached_tail`), stops reading at the tail
    (`left_tail`) or closes (`gone`); the cache decides the tail group and lagging set it is in.
    """

    @property
    def reactor(self) -> Any: ...

    @property
    def log(self) -> TopicLog: ...

    @property
    def live(self) -> bool:
        """`defaultOffset: live`: streams that ask nothing start at the end."""
        ...

    @property
    def catch_up_bytes(self) -> int:
        """Bytes one catch-up step or history read encodes at most (plus one record)."""
        ...

    @property
    def steps(self) -> SharedSteps:
        """Catch-up steps encoded lately, for streams at the same place to reuse."""
        ...

    def fetch(self, partition: int, offset: int, limit: int,
              max_bytes: int) -> Deferred[FetchResult]: ...

    def history_unavailable(self, partition: int, offset: int, error: str | None) -> None: ...

    def placed_ahead(self, s: Subscription) -> None:
        """`s` was placed past the end the cache has reached in some partition (its last event
        id is further on): the cache judges it at its next end of that partition."""

    def reached_tail(self, s: Subscription) -> None:
        """`s` read everything: from now on it gets the batches of a tail group."""

    def tail_positions(self, s: Subscription) -> dict[int, int]:
        """Where `s` (at the tail) is: what its group wrote up to."""

    def left_tail(self, s: Subscription) -> ProgressState:
        """`s` stops getting tail batches; returns its position (its group's, which wrote
        everything `s` got)."""
        ...

    def gone(self, s: Subscription) -> None:
        """`s` closed: it belongs to no group and is woken no more."""

    def await_loaded(self, s: Subscription) -> None:
        """`s` is at the tail and waits to be told (`Subscription.loaded`) once the cache has
        read every partition to its end: before that, the tail is not yet Kafka's."""


class CatchUp:
    """Per-subscriber filtering that applies only before the stream first reaches the tail.

    - `since_ms`: records older than the requested start time are passed over.
    - a fresh stream of a compacted topic starts from an empty state, so a tombstone for a key
      it never sent is meaningless and left out (docs/protocol.md: a late subscriber gets the latest value
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
        if self.since_ms is not None and m[TIMESTAMP] < self.since_ms:
            return False
        keys = self.sent_keys
        if keys is not None and self.log.compacted:
            k = (m[PARTITION], m[KEY])
            if m[VALUE] is None:
                if k not in keys:
                    return False
                keys.discard(k)
            else:
                keys.add(k)
        return True


class SharedSteps:
    """Catch-up steps from the cache, encoded lately, by where they start: the encoder's key,
    the progress and the log cursor. Another stream at that very place writes the same bytes
    and ends at the same place, so it takes the step as it is instead of encoding it again.

    Only steps that depend on nothing but that place are kept: a compacted topic's reads skip
    records replaced in the meantime, and `since` or the compacted-topic filter of a fresh
    stream (`CatchUp`) decide per stream, so those are never shared. A partition that starts
    over (`clear`) makes every kept step stale. The oldest steps go first once `max_bytes` of
    them are kept.
    """

    __slots__ = ("_bytes", "_steps", "max_bytes")

    def __init__(self, max_bytes: int = SHARED_STEP_BYTES) -> None:
        self.max_bytes = max_bytes
        #: place -> (bytes, progress after, cursor after); insertion order is age
        self._steps: dict[Hashable, tuple[bytes, ProgressState, int]] = {}
        self._bytes = 0

    def get(self, place: Hashable) -> tuple[bytes, ProgressState, int] | None:
        return self._steps.get(place)

    def put(self, place: Hashable, data: bytes, progress: ProgressState, cursor: int) -> None:
        if len(data) > self.max_bytes or place in self._steps:
            return
        self._steps[place] = (data, progress.copy(), cursor)
        self._bytes += len(data)
        while self._bytes > self.max_bytes:
            oldest = next(iter(self._steps))
            self._bytes -= len(self._steps.pop(oldest)[0])

    def clear(self) -> None:
        self._steps.clear()
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._steps)


class Subscription:
    """One stream's cursor. `pause`/`resume`/`close` are what the sse stream calls."""

    __slots__ = (
        "__weakref__",
        "_call",
        "_at_open",
        "_caught_up_then",
        "_cursor",
        "_epoch",
        "_fetching",
        "_seen",
        "at_tail",
        "catch_up",
        "closed",
        "encoder",
        "cache",
        "paused",
        "progress",
        "sink",
        "start",
    )

    def __init__(self, cache: SubscribedCache, encoder: EventEncoder, sink: EventSink,
                 start: Start) -> None:
        self.cache = cache
        self.encoder = encoder
        self.sink = sink
        self.start = start
        #: What the cache held when the stream opened, until it is placed everywhere.
        self._at_open: AtOpen | None = at_open(cache.log)
        #: Filled by `start_positions` once the cache knows the topic's partitions.
        self.progress = ProgressState()
        fresh = not start.has_id
        self.catch_up = CatchUp(cache.log, start.since_ms, fresh) \
            if fresh or start.since_ms is not None else None
        #: True from reporting `reached_tail` until reporting `left_tail` or `gone`.
        self.at_tail = False
        self.paused = False
        self.closed = False
        self._call: Any = None
        self._fetching = False
        #: Next `seq` of the cache's log to read while catching up, valid while the progress
        #: moved only by reading the log in order (None: found again from the positions).
        self._cursor: int | None = None
        #: Moves when a partition starts over, so a history read asked before is not used.
        self._epoch = 0
        #: A filtered stream reading the cache's index: the `seq` of the last record it passed
        #: (None: found again from the positions, like `_cursor`).
        self._seen: int | None = None
        #: Called once, the first time the stream has everything the cache held and the cache
        #: has read Kafka to its end (`when_caught_up`); None when nobody asked.
        self._caught_up_then: Callable[[], None] | None = None

    # -- the stream's side ---------------------------------------------------------------------

    def pause(self) -> None:
        if self.closed or self.paused:
            return
        self.paused = True
        self._leave_tail()
        self._cancel_call()

    def resume(self) -> None:
        if self.closed or not self.paused:
            return
        self.paused = False
        self.schedule()

    def when_caught_up(self, then: Callable[[], None]) -> None:
        """Call `then` once, right after the stream has written every record the cache held
        when it reached the tail the first time, and the cache has read every partition to its
        end once (else it waits for that): the catch-up signal of sse-kafka's
        `with.event.caught-up`. Asked before the first step (`subscribe` schedules it on a later
        turn), so nothing is written before the stream knows."""
        self._caught_up_then = then

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.at_tail = False
        self._cancel_call()
        self.cache.gone(self)

    # -- the cache's side ----------------------------------------------------------------------

    def write(self, data: bytes) -> None:
        """Write at the tail (called by the cache for each group batch)."""
        self.sink.write(data)

    def positions(self) -> dict[int, int]:
        """The next offset in each partition, as far as the stream was written: a stream of
        several topics puts it in the ids of the other topics' events (not on the path of a
        stream of one topic)."""
        if self.at_tail:
            return self.cache.tail_positions(self)
        positions = dict(self.progress.offsets)
        resume = self.start.resume
        if resume:
            # partitions not placed yet (the cache is loading): where the id said
            for p, at in resume.items():
                positions.setdefault(p, at)
        return positions

    def schedule(self) -> None:
        """Take a catch-up step soon (on a later reactor turn, so writes interleave fairly)."""
        if self._call is None and not self.closed and not self.paused and not self._fetching:
            self._call = self.cache.reactor.callLater(0, self._step)

    def restart(self, partition: int, offset: int) -> None:
        """Read `partition` from `offset` again: the broker lost it and it starts over there
        (called by the cache, which finds the subscriptions placed in it)."""
        if self.closed:
            return
        self._leave_tail()
        self.progress.set(partition, offset)
        self._cursor = self._seen = None
        self._epoch += 1
        self._fetching = False  # a history read in flight is of the lost records: ignored
        self.schedule()

    def _cancel_call(self) -> None:
        if self._call is not None:
            if self._call.active():
                self._call.cancel()
            self._call = None

    def _leave_tail(self) -> None:
        if self.at_tail:
            self.at_tail = False
            # the subscriber got everything its group wrote: it goes on from the group's position
            self.progress = self.cache.left_tail(self)
            self._cursor = self._seen = None

    def _place(self, log: TopicLog) -> StartPositions | None:
        """Give the partitions the stream has no position in yet their start (None: the cache
        cannot tell yet, nothing placed)."""
        opened = self._at_open or AtOpen({}, {})
        placed = start_positions(self.start, self.cache.live, log, opened)
        if placed is None:
            return None
        progress = self.progress
        new = [p for p in placed.positions if p not in progress.offsets]
        if not progress.offsets:  # the first placement: one token layout, not one per `set`
            self.progress = ProgressState(placed.positions)
        else:
            for p in new:
                progress.set(p, placed.positions[p])
        if new:
            self._cursor = self._seen = None
        if any(p in placed.ahead for p in new):
            self.cache.placed_ahead(self)
        if placed.complete:
            self._at_open = None  # every partition has its position: not needed again
        return placed

    def _step(self) -> None:
        """One catch-up step: place, read history or cache, or report reaching the tail."""
        self._call = None
        if self.closed or self.paused or self._fetching or self.at_tail:
            return
        log = self.cache.log
        placed = self._place(log)
        if placed is None:
            return  # woken again when the cache hears of the partitions
        progress = self.progress
        for p, pos in progress.offsets.items():
            held = log.partitions.get(p)
            if held is not None and pos < held.start:
                self._fetch(p, pos)
                return
        terms = self.encoder.terms
        if terms is not None:
            self._step_indexed(log, terms, placed)
            return
        shareable = not log.compacted and (self.catch_up is None or not self.catch_up.active())
        place = (self.encoder.key, progress.key(), self._cursor) if shareable else None
        if place is not None:
            step = self.cache.steps.get(place)
            if step is not None:
                data, after, self._cursor = step
                self.progress = after.copy()
                if data:  # a step may pass over records only (before the stream's positions)
                    self.sink.write(data)
                self.schedule()
                return
        records, self._cursor = log.read_from(progress.offsets, self._cursor, CATCH_UP_BATCH,
                                              self.cache.catch_up_bytes)
        if records:
            data = self.encoder.encode(records, progress, self.catch_up)
            if place is not None:
                self.cache.steps.put(place, data, progress, self._cursor)
            if data:
                self.sink.write(data)
            self.schedule()
            return
        self._caught_up(placed)

    def _caught_up(self, placed: StartPositions) -> None:
        """Nothing left to read: join the tail, once every partition is placed."""
        if not placed.complete:
            return  # woken again by the cache's next batch or end-of-partition
        self.catch_up = None
        self.at_tail = True
        self.cache.reached_tail(self)
        if self._caught_up_then is not None:
            if self.cache.log.loaded():
                self.loaded()
            else:
                self.cache.await_loaded(self)

    def loaded(self) -> None:
        """The cache has read Kafka to its end and the stream is at its tail: the stream has
        caught up (called by `_caught_up`, or by the cache for a stream that waited)."""
        then, self._caught_up_then = self._caught_up_then, None
        if then is not None and self.at_tail and not self.closed:
            then()
        elif then is not None:
            self._caught_up_then = then  # left the tail meanwhile: told when it is back

    def _step_indexed(self, log: TopicLog, terms: tuple[Term, ...],
                      placed: StartPositions) -> None:
        """A catch-up step of a filtered stream: only the cached records carrying one of its
        terms, each event's id the position reached just after its record."""
        progress = self.progress
        records, seen, more = log.candidates(terms, progress.offsets, self._seen,
                                             CATCH_UP_BATCH, self.cache.catch_up_bytes)
        encoder = self.encoder
        catch_up = self.catch_up
        if catch_up is not None and not catch_up.active():
            catch_up = None
        out: list[bytes] = []
        base = progress.offsets
        for m in records:
            if not encoder.matches(m) or (catch_up is not None and not catch_up.admits(m)):
                continue
            at = ProgressState(log.positions_at(m[SEQ], base))
            out.append(encoder.event(m, at.token_bytes()))
        if more:
            assert seen is not None
            self.progress = ProgressState(log.positions_at(seen, base))
            self._seen = seen
        else:
            # every record the cache holds from the stream's positions on is passed
            tail = log.tail()
            self.progress = ProgressState({p: max(at, tail.get(p, at)) for p, at in base.items()})
            self._seen = None
        if out:
            self.sink.write(event_block(b"".join(out), len(out)))
        if more:
            self.schedule()
            return
        self._caught_up(placed)

    def _fetch(self, p: int, pos: int) -> None:
        self._fetching = True
        d = self.cache.fetch(p, pos, FETCH_BATCH, self.cache.catch_up_bytes)
        d.addCallback(self._fetched, p, pos, self._epoch)
        d.addErrback(self._fetch_failed, self._epoch)

    def _fetched(self, result: FetchResult, p: int, pos: int, epoch: int) -> None:
        if epoch != self._epoch:
            return  # asked before the partition started over (restart scheduled a step)
        self._fetching = False
        self._cursor = self._seen = None
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

    def _fetch_failed(self, failure: Any, epoch: int) -> None:
        if epoch != self._epoch:
            return
        self._fetching = False
        if self.closed:
            return
        if failure.check(HistoryBusy):  # waiting its turn, not a failure worth an event
            self._call = self.cache.reactor.callLater(HISTORY_BUSY_RETRY, self._retry)
            return
        self.cache.history_unavailable(-1, -1, str(failure.value))
        self._call = self.cache.reactor.callLater(1.0, self._retry)
