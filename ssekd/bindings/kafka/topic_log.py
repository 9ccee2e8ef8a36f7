"""The bounded in-memory log of one topic: what late and reconnecting subscribers read from.

Each partition keeps its records in offset order; the topic keeps them in arrival order (`seq`)
to evict the oldest first and to serve catch-up reads as the tail saw them: a reader that went
through the log in arrival order only needs the next `seq` to read (its *cursor*), and a read is
then one list slice, however the partitions interleave. The
log is bounded by count, bytes and age (`CacheBounds`); eviction moves a partition's `start` so a
subscriber positioned before it knows to read from Kafka instead. For compacted topics only the
latest record of each key stays (a tombstone stays as the key's latest record, so a subscriber
resuming from an older position still learns of the delete); replaced records are dropped from
the arrival order once they are most of it, so a key that never changes does not hold back the
records that replaced others behind it.

A filtered stream reads only the records its filters can take, through the log's `LogIndex`
(`candidates`), and learns the position it reached after each of them from `positions_at`.

Everything here runs on the reactor thread.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from itertools import islice

from ssekd.bindings.kafka.log_index import LogIndex, Term
from ssekd.bindings.kafka.message import (
    KEY,
    OFFSET,
    PARTITION,
    SEQ,
    SIZE,
    SMALLEST,
    TIMESTAMP,
    Message,
    renumbered,
    within_bytes,
)


@dataclass(frozen=True)
class CacheBounds:
    """Per-topic limits of the cache (cache_server `options.cache`).

    Defaults: 100,000 messages, 64 MiB (payload + headers + ~120 bytes overhead each), one hour
    of age by record timestamp. Age does not apply to compacted topics: a key's latest value may
    be old and still be the current state.
    """

    max_messages: int = 100_000
    max_bytes: int = 64 * 1024 * 1024
    max_age_seconds: float = 3600.0


class PartitionLog:
    """Records of one partition held in memory, contiguous from `start`.

    `start` is the lowest offset from which the cache holds every record still relevant (all of
    them, or the latest per key when compacted); a position below it must be read from Kafka.
    `next` is one past the highest offset fetched. `origin` is where the cache began fetching.
    `live_from` is `next` when the consumer first reached the end of the partition; `at_end` says
    whether the last the consumer said of it was that it reached its end (no record since).
    """

    __slots__ = ("at_end", "head", "holes", "live_from", "next", "origin", "partition", "records",
                 "replaced", "start")

    def __init__(self, partition: int, origin: int, replaced: Replaced) -> None:
        self.partition = partition
        #: The topic's replaced records (`TopicLog.replaced`).
        self.replaced = replaced
        self.records: list[Message] = []
        self.head = 0
        self.start = origin
        self.next = origin
        self.origin = origin
        self.live_from: int | None = None
        self.at_end = False
        self.holes = 0

    def __len__(self) -> int:
        return len(self.records) - self.head

    def index_of(self, offset: int) -> int:
        """Index in `records` of the first record at or after `offset`."""
        return bisect.bisect_left(self.records, offset, lo=self.head, key=_offset)

    def _pop_head(self) -> Message:
        m = self.records[self.head]
        self.head += 1
        if m[SEQ] in self.replaced:
            self.holes -= 1
            self.replaced.release(m[SEQ])
        # drop the consumed prefix now and then; amortised O(1) per record
        if self.head > 1024 and self.head * 2 > len(self.records):
            del self.records[:self.head]
            self.head = 0
        return m

    def _squeeze(self) -> None:
        """Drop replaced records when they are most of the list (compacted topics)."""
        if self.holes > 1024 and self.holes * 2 > len(self.records) - self.head:
            self.records = self.replaced.without(self.records[self.head:])
            self.head = 0
            self.holes = 0


def _offset(m: Message) -> int:
    return m[OFFSET]


def _seq(m: Message) -> int:
    return m[SEQ]


class Replaced(dict[int, int]):
    """The records that left the cache while one of its lists still holds them: a newer record
    with the same key replaced them (compacted topics), or their partition started over.

    By `seq`, with how many of the two lists that keep every cached record (the arrival order
    and the record's partition's) still hold it: an entry goes when the last of them drops the
    record, so this stays as small as the replaced records those lists hold. A record cannot
    say itself that it was replaced (`message.py`: records are immutable tuples), so readers
    ask `m[SEQ] in log.replaced`.
    """

    def mark(self, seq: int) -> None:
        """The record `seq` was replaced; both lists hold it."""
        self[seq] = 2

    def release(self, seq: int) -> None:
        """One of the lists dropped the replaced record `seq`."""
        left = self[seq] - 1
        if left:
            self[seq] = left
        else:
            del self[seq]

    def without(self, records: list[Message]) -> list[Message]:
        """`records` less the replaced ones, which the list they were in drops."""
        kept: list[Message] = []
        for m in records:
            if m[SEQ] in self:
                self.release(m[SEQ])
            else:
                kept.append(m)
        return kept


#: Replaced records the arrival order keeps before it drops them (and at least half of it).
SQUEEZE_AFTER = 1024


class TopicLog:
    """The cache of one topic."""

    def __init__(self, topic: str, bounds: CacheBounds, compacted: bool = False,
                 oversized: Callable[[Message], None] | None = None) -> None:
        self.topic = topic
        self.bounds = bounds
        #: Told of each record evicted for being larger than `max_bytes` on its own.
        self.oversized = oversized
        self.compacted = compacted
        self.partitions: dict[int, PartitionLog] = {}
        #: Partition count from the broker's metadata, when known (to reject ids naming others).
        self.partition_count: int | None = None
        #: Whether streams are placed in the partitions heard of before every partition is
        #: (set by the cache once `partition-wait` passed since the count came: Zilla #1628).
        self.partial = False
        self.count = 0
        self.bytes = 0
        #: The `seq` of the last record appended (records are numbered when made: message.py).
        self.seq = 0
        #: Every record in arrival order from index `_first` (`seq`s ascending; replaced
        #: records are among them until `_squeeze_arrival` drops them).
        self._arrival: list[Message] = []
        self._first = 0
        #: Replaced records in `_arrival[_first:]`.
        self._holes = 0
        #: Records out of the cache that its lists still hold (`Replaced`).
        self.replaced = Replaced()
        #: Cached records by key and header value, once a filtered stream asked (`candidates`).
        self.index: LogIndex | None = None
        self._latest: dict[tuple[int, bytes], Message] = {}
        #: The highest `seq` of a record `rewind` took out (reads below it must filter).
        self._rewound_seq = 0

    # -- writing (from the consumer's batches) -------------------------------------------------

    def partition(self, p: int, origin: int) -> PartitionLog:
        part = self.partitions.get(p)
        if part is None:
            part = self.partitions[p] = PartitionLog(p, origin, self.replaced)
        return part

    def append(self, messages: Iterable[Message], now: float) -> list[Message]:
        """Add records fetched from Kafka; return those that are new (in order), then evict.

        A record at an offset the log already passed (a re-fetch: after a broker stalls,
        responses to a fetch and to its retry may both arrive) is dropped here, so subscribers
        never see it twice. A partition the broker lost comes through `rewind` instead.
        """
        fresh: list[Message] = []
        index = self.index
        for m in messages:
            p = m[PARTITION]
            part = self.partitions.get(p)
            if part is None:
                part = self.partition(p, m[OFFSET])
            elif m[OFFSET] < part.next:
                continue
            if m[SEQ] <= self.seq:  # made before the last one appended (a test, a late batch)
                m = renumbered(m)
            self.seq = m[SEQ]
            part.records.append(m)
            part.next = m[OFFSET] + 1
            part.at_end = False
            self._arrival.append(m)
            self.count += 1
            self.bytes += m[SIZE]
            if self.compacted and m[KEY] is not None:
                k = (p, m[KEY])
                old = self._latest.get(k)
                if old is not None:
                    self._replace(old)
                    part.holes += 1
                self._latest[k] = m
            if index is not None:
                index.add(m)
            fresh.append(m)
        if self.compacted:
            for part in self.partitions.values():
                part._squeeze()
        self.evict(now)
        return fresh

    def _replace(self, m: Message) -> None:
        """`m` leaves the cache but stays in the arrival order and its partition's list, marked
        (reads pass over it) until those drop it."""
        self.replaced.mark(m[SEQ])
        self._holes += 1
        self.count -= 1
        self.bytes -= m[SIZE]
        if self.index is not None:
            self.index.died(m)

    def loaded(self) -> bool:
        """Whether the consumer has reached the end of every partition once (readiness)."""
        count = self.partition_count
        if count is None:
            return False
        parts = self.partitions
        return all(p in parts and parts[p].live_from is not None for p in range(count))

    def reached_end(self, p: int, next_offset: int) -> None:
        """The consumer reached the end of partition `p`; `next_offset` came with fetched data."""
        part = self.partition(p, next_offset)
        if next_offset > part.next and part.next == part.start:
            # nothing held yet for this partition: the cache is complete from here
            part.start = next_offset
        part.next = max(part.next, next_offset)
        part.at_end = True
        if part.live_from is None:
            part.live_from = part.next

    def rewind(self, p: int, origin: int) -> None:
        """Partition `p` starts again at `origin`, below where the log reached it.

        The broker lost the partition (restarted empty, or an unclean leader election) and the
        tail consumer reads it again from what the broker now has. What the log held of `p`
        belongs to the lost incarnation: those records are taken out (marked replaced, so reads
        pass over them and eviction drops them) and `p` starts empty at `origin`.
        """
        old = self.partitions.get(p)
        if old is None:
            return
        replaced = self.replaced
        for m in old.records[old.head:]:
            # the old list goes: what it held stays in the arrival order only
            if m[SEQ] in replaced:
                replaced.release(m[SEQ])
                continue
            self._replace(m)
            replaced.release(m[SEQ])
            if m[KEY] is not None and self._latest.get((p, m[KEY])) is m:
                del self._latest[(p, m[KEY])]
        self.partitions[p] = PartitionLog(p, origin, replaced)
        self._rewound_seq = self.seq

    def evict(self, now: float) -> None:
        """Drop the oldest records until the log is within its bounds."""
        b = self.bounds
        oldest_ms = (now - b.max_age_seconds) * 1000.0
        arrival = self._arrival
        first = self._first
        replaced = self.replaced
        while first < len(arrival):
            m = arrival[first]
            if m[SEQ] in replaced:
                first += 1
                self._holes -= 1
                self._drop_replaced(m)
                replaced.release(m[SEQ])
                continue
            over = self.count > b.max_messages or self.bytes > b.max_bytes
            if not over and (self.compacted or not m[TIMESTAMP] or m[TIMESTAMP] >= oldest_ms):
                break
            first += 1
            if m[SIZE] > b.max_bytes and self.oversized is not None:
                self.oversized(m)
            part = self.partitions[m[PARTITION]]
            self._advance_head(part, m)
            self.count -= 1
            self.bytes -= m[SIZE]
            if self.compacted and m[KEY] is not None:
                k = (m[PARTITION], m[KEY])
                if self._latest.get(k) is m:
                    del self._latest[k]
            if self.index is not None:
                self.index.died(m)
        # drop the evicted prefix now and then; amortised O(1) per record
        if first > 1024 and first * 2 > len(arrival):
            del arrival[:first]
            first = 0
        self._first = first
        if self._holes > SQUEEZE_AFTER and self._holes * 2 > len(arrival) - first:
            self._squeeze_arrival()
        if self.index is not None and self.index.worn():
            self.index.rebuild(self.window())

    def _squeeze_arrival(self) -> None:
        """Drop replaced records from the arrival order (compacted topics: a key that never
        changes would otherwise keep every record replaced after it). Amortised O(1) per
        record: it runs once they are most of the list."""
        self._arrival = self.replaced.without(self._arrival[self._first:])
        self._first = 0
        self._holes = 0

    def window(self) -> Iterator[Message]:
        """The records the cache holds, in arrival order (replaced ones among them)."""
        return islice(self._arrival, self._first, None)

    def tail(self) -> dict[int, int]:
        """The next offset of each partition: where a stream that read everything is."""
        return {p: part.next for p, part in self.partitions.items()}

    def is_replaced(self, m: Message) -> bool:
        """Whether a record the cache held (and still lists) was replaced since."""
        return m[SEQ] in self.replaced

    def _drop_replaced(self, m: Message) -> None:
        part = self.partitions.get(m[PARTITION])
        if part is not None and len(part) and part.records[part.head] is m:
            part._pop_head()

    def _advance_head(self, part: PartitionLog, m: Message) -> None:
        # replaced records ahead of m in this partition go with it (they are older)
        while len(part):
            head = part._pop_head()
            if head is m:
                break
        part.start = m[OFFSET] + 1

    # -- reading ---------------------------------------------------------------------------

    def historical_start(self, p: int) -> int:
        """Where a stream with no position for `p` starts (docs/protocol.md: all the cache holds).

        For a compacted topic that is the beginning of the topic, so a late subscriber gets the
        whole current state even when the cache evicted part of it (read back from Kafka).
        """
        part = self.partitions[p]
        return part.origin if self.compacted else part.start

    def read(self, positions: dict[int, int], limit: int) -> list[Message]:
        """Up to `limit` cached records at or after each partition's position, in arrival order.

        The caller makes sure every position is at or above its partition's `start`.
        """
        got: list[Message] = []
        cursor: int | None = None
        while len(got) < limit:
            records, cursor = self.read_from(positions, cursor, limit - len(got))
            if not records:
                return got
            got += [m for m in records if m[OFFSET] >= positions.get(m[PARTITION], 0)]
        return got

    def start_cursor(self, positions: dict[int, int]) -> int:
        """The first `seq` a reader at `positions` has not processed: the earliest record at or
        after any of its positions (the encoder skips the others' older records)."""
        first = self.seq + 1
        for p, pos in positions.items():
            part = self.partitions.get(p)
            if part is not None:
                i = part.index_of(pos)
                if i < len(part.records):
                    first = min(first, part.records[i][SEQ])
        return first

    def read_from(self, positions: dict[int, int], cursor: int | None, limit: int,
                  max_bytes: int | None = None) -> tuple[list[Message], int]:
        """Records from `seq` `cursor` on (from `start_cursor` when None), and the next cursor.

        Records of partitions not in `positions` and replaced ones are left out; records before
        a partition's position are not (the encoder passes over them). An empty list means the
        reader is at the end of the log. At most `limit` records, and with `max_bytes` no more
        records than their `size` (an upper bound of what they encode to) fits, but at least one:
        a catch-up step is then bounded in bytes, however small the records are.
        """
        if cursor is None:
            cursor = self.start_cursor(positions)
        arrival = self._arrival
        first = self._first
        if first == len(arrival):
            return [], max(cursor, self.seq + 1)
        # a cursor below the oldest record: what was evicted there was either processed or
        # made the caller read from Kafka first (its position fell below the partition start)
        cursor = max(cursor, arrival[first][SEQ])
        everything = all(p in positions for p in self.partitions) and not self.compacted
        rewound = self._rewound_seq
        replaced = self.replaced
        if max_bytes is not None:  # no more records than the bound could hold are copied
            limit = min(limit, max_bytes // SMALLEST + 1)
        while True:
            i = bisect.bisect_left(arrival, cursor, lo=first, key=_seq)
            chunk = arrival[i:i + limit]
            if max_bytes is not None:
                chunk = within_bytes(chunk, max_bytes)
            if not chunk:
                return chunk, cursor
            cursor = chunk[-1][SEQ] + 1
            if everything and chunk[0][SEQ] > rewound:
                return chunk, cursor
            chunk = [m for m in chunk if m[SEQ] not in replaced and m[PARTITION] in positions]
            if chunk:
                return chunk, cursor


    def candidates(self, terms: tuple[Term, ...], positions: Mapping[int, int],
                   after: int | None, limit: int,
                   max_bytes: int) -> tuple[list[Message], int | None, bool]:
        """The cached records carrying one of `terms`, at or after their partition's position,
        from `seq` `after` on (exclusive; None: all the cache holds), in arrival order.

        Returns (records, the `seq` of the last one, whether more may follow): at most `limit`
        records and, by their sizes, `max_bytes` (but at least one), so that a stream catching
        up takes bounded steps. Records of partitions not in `positions` are left out. The
        records between those returned are ones the terms do not name: a stream that takes
        them has passed over everything up to the last (`positions_at`).
        """
        index = self.index
        if index is None:
            index = self.index = LogIndex(self.replaced)
        arrival, first = self._arrival, self._first
        if first == len(arrival):
            return [], after, False
        start = arrival[first][SEQ] if after is None else max(after + 1, arrival[first][SEQ])
        runs: list[Iterator[Message]] = []
        for term in terms:
            run = index.run(term, self.window())
            i = bisect.bisect_left(run, start, key=_seq)
            if i < len(run):
                runs.append(islice(run, i, None))
        if not runs:
            return [], after, False
        merged = runs[0] if len(runs) == 1 else heapq.merge(*runs, key=_seq)
        got: list[Message] = []
        total = 0
        last_seq = after
        gone = index.gone
        for m in merged:
            seq = m[SEQ]
            if seq == last_seq:
                continue  # named by two of the terms
            last_seq = seq
            if seq in gone:
                continue
            at = positions.get(m[PARTITION])
            if at is None or m[OFFSET] < at:
                continue
            got.append(m)
            total += m[SIZE]
            if len(got) >= limit or total >= max_bytes:
                return got, last_seq, True
        return got, last_seq, False

    def positions_at(self, seq: int, base: Mapping[int, int]) -> dict[int, int]:
        """The position of a reader that started at `base` and passed over every record the
        cache holds up to `seq` (inclusive): for each partition of `base`, one past the
        highest offset among them, or its `base` position if that is further on."""
        out = dict(base)
        for p, at in base.items():
            part = self.partitions.get(p)
            if part is None:
                continue
            records = part.records
            i = bisect.bisect_right(records, seq, lo=part.head, key=_seq)
            if i > part.head:
                reached = records[i - 1][OFFSET] + 1
                if reached > at:
                    out[p] = reached
        return out

