"""The per-record and per-event work of a stream, in one module Cython compiles as it is.

This file is plain, typed Python and runs as such (the pure path). When Cython and a C compiler
were there at build time, the same source was also compiled into the twin extension module
`ssekd.hotpath._kernels_c`, which `ssekd.hotpath` imports instead. Nothing here may depend on
which one runs: tests feed the same records to both and compare the bytes.

What is here, and why it is here rather than beside its callers:

- `records_of_batch`: a batch of confluent-kafka records into the cache's plain tuples
  (`ssekd.bindings.kafka.message`), on the consumer thread, holding the GIL the reactor needs
  while it runs: a cold read of a topic passes every record through it.
- `ProgressState`: a stream's progress token, remade per event (`advance`).
- `encode_plain` / `encode_filtered`: the encoder's loops over records
  (`ssekd.bindings.sse_kafka.encoder`), which make each record's event.
- `observe_ages`: the delivery latency of each record of a batch delivered at the tail
  (`ssekd.telemetry.delivery`), a histogram observation per record.

Compiled, what costs is the interpreter's dispatch of each bytecode, attribute and global
lookups, and boxed arithmetic; the calls into C (`bytes.join`, dict lookups, concatenation) stay
the same. So the code is kept the same shape in both, with C types declared (via `cython`, or
`ssekd.hotpath.cython_shadow` where Cython is not installed) where they remove boxing, and
fields of `ProgressState` read from its C struct instead of its `__slots__`.

Leaf module: it imports nothing of ssekd but the `EventBlock` contract, so the kafka message
module, the event ids and the encoder can all import it without a cycle.
"""

from __future__ import annotations

import binascii
from bisect import bisect_left
from collections.abc import Callable, Iterable, Mapping
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from ssekd.spi.stream import EventBlock

if TYPE_CHECKING:
    from ssekd.hotpath import cython_shadow as cython
else:
    try:
        import cython
    except ImportError:  # the pure path, where Cython is not installed
        from ssekd.hotpath import cython_shadow as cython

#: Whether this is the compiled twin (Cython makes `cython.compiled` True there).
COMPILED: bool = cython.compiled

# -- records ------------------------------------------------------------------------------------

#: Bytes of object overhead counted per record against the cache's byte bound.
RECORD_OVERHEAD = 120


def records_of_batch(records: Iterable[Any], take_seq: Callable[[], int],
                     partition: Any, offset: Any, key: Any, value: Any, headers: Any,
                     timestamp: Any) -> list[Any]:
    """Each record as the tuple (partition, offset, key, value, headers, timestamp, seq, size)
    of `ssekd.bindings.kafka.message` (which documents the fields and calls this).

    The accessors are confluent-kafka's `Message` methods, passed in unbound (a C call each,
    no bound method made per record) so this module needs nothing of confluent-kafka. Compiled,
    the loop costs the seven calls it cannot do without and the tuple; interpreted, as much
    again in bytecode dispatch."""
    out: list[Any] = []
    size: cython.Py_ssize_t
    overhead: cython.Py_ssize_t = RECORD_OVERHEAD  # a C local: no global lookup per record
    for r in records:
        k = key(r)
        v = value(r)
        h = headers(r)
        kind, ts = timestamp(r)
        size = overhead
        if k is not None:
            size += len(k)
        if v is not None:
            size += len(v)
        if h:  # most records have none
            h = tuple(h)
            for name, hv in h:
                size += len(name)
                if hv is not None:
                    size += len(hv)
        else:
            h = ()
        out.append((partition(r), offset(r), k, v, h, ts if kind else 0, take_seq(), size))
    return out


@cython.locals(records=list, total=cython.Py_ssize_t, n=cython.Py_ssize_t, m=tuple,
               bound=cython.Py_ssize_t)
def within_bytes(records: list[Any], max_bytes: int) -> list[Any]:
    """The first `records` whose sizes (field 7 of the tuple) add up to `max_bytes`, but at
    least one: a catch-up step or a history read is bounded in bytes however small its records
    are, and never empty while there is a record to give (`ssekd.bindings.kafka.message`).

    Every record a stream catches up on passes through here once: compiled, a C loop over the
    list; interpreted, a few records that fit are summed in C (`sum` of a `map`)."""
    if not cython.compiled and len(records) <= 256 \
            and sum(map(_size, records)) < max_bytes:
        return records
    bound = max_bytes
    total = 0
    n = 0
    for m in records:
        total += m[7]
        n += 1
        if total >= bound:
            return records[:n]
    return records


_size = itemgetter(7)


# -- progress tokens ----------------------------------------------------------------------------

VERSION = 0x01

_B64_TO_URLSAFE = bytes.maketrans(b"+/", b"-_")

#: The first varint byte of a zigzag value `z`, by `z & 0x7F`: alone (z < 128) or followed by
#: more groups (high bit set).
_LAST_GROUP = [bytes((i,)) for i in range(0x80)]
_MORE_GROUP = [bytes((i | 0x80,)) for i in range(0x80)]


def uvarint(z: int) -> bytes:
    """LEB128 of a non-negative value, low 7-bit group first (short ones without a loop)."""
    if z < 0x80:
        return _LAST_GROUP[z]
    if z < 0x4000:
        return _MORE_GROUP[z & 0x7F] + _LAST_GROUP[z >> 7]
    if z < 0x20_0000:
        return bytes(((z & 0x7F) | 0x80, ((z >> 7) & 0x7F) | 0x80, z >> 14))
    out = bytearray()
    while z > 0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def b64url_bytes(raw: bytes) -> bytes:
    """base64url of `raw` with padding, as ASCII bytes."""
    return binascii.b2a_base64(raw, newline=False).translate(_B64_TO_URLSAFE)


def _low_pairs() -> list[list[list[bytes]]]:
    """The two base64url characters that depend on an offset's low varint group, for every
    place that group can take in its 3-byte base64 group and every value of the bits of its
    neighbours that share those characters: `[place][neighbour bits][offset % 64]`.

    The low group of an offset with more groups is `((offset % 64) << 1) | 0x80`. Base64 maps
    bytes b0 b1 b2 to characters b0>>2, (b0&3)<<4|b1>>4, (b1&15)<<2|b2>>6, b2&63, so the low
    group at place 0 (b0) decides characters 0-1 with the high 4 bits of b1; at place 1,
    characters 1-2 with the low 2 bits of b0 and the high 2 bits of b2; at place 2, characters
    2-3 with the low 4 bits of b1. 3 x 16 x 64 pairs, made once (one base64 call per row)."""
    places: list[list[list[bytes]]] = []
    for place in range(3):
        rows = []
        for bits in range(16):
            raw = bytearray()
            for low in range(0x80, 0x100, 2):
                raw += (bytes((low, bits << 4, 0)) if place == 0 else
                        bytes((bits >> 2, low, (bits & 3) << 6)) if place == 1 else
                        bytes((0, bits, low)))
            enc = b64url_bytes(bytes(raw))
            rows.append([enc[i + place:i + place + 2] for i in range(0, 256, 4)])
        places.append(rows)
    return places


_LOW_PAIRS = _low_pairs()


def _pair(partition: int, next_offset: int) -> bytes:
    """varint(partition) + varint(next offset) for non-negative values (zigzag of v is 2v)."""
    return uvarint(partition << 1) + uvarint(next_offset << 1)


def _prefix(partitions: int) -> bytes:
    """The token's version and partition count (the count's zigzag varint: twice the count):
    one bytes object per count, shared by every stream (each holds one while it is open)."""
    while len(_PREFIXES) <= partitions:
        _PREFIXES.append(bytes((VERSION,)) + uvarint(len(_PREFIXES) << 1))
    return _PREFIXES[partitions]  # type: ignore[no-any-return, unused-ignore]


_PREFIXES: list[bytes] = []
#: `_quads` until a partition is hot: one empty list for all (never changed in place: a hot
#: partition's row of `_LOW_PAIRS` replaces it).
_NO_QUADS: list[bytes] = []


@cython.final
@cython.cclass
class ProgressState:
    """A stream's mutable progress, with the encoded token cached between changes.

    Encoding happens once per event (shared by every subscriber of a tail group), so each
    partition's varint pair is kept encoded and only the changed one is redone; the token is
    assembled from those pieces and base64url-encoded with binascii (no per-event sorting).

    `advance` is the per-event path of the encoder. Consecutive records mostly come from the
    same partition (Kafka fetches and the cache both keep a partition's records together), so it
    keeps that *hot* partition's surroundings pre-joined: the token bytes before its offset
    varint (`_left`: version, count, lower partitions, its own id) and after its low varint group
    (the offset's higher groups, then higher partitions), which change only when the
    partition changes or every 64 offsets.

    Those 64 offsets differ only in the low group's byte, and base64 turns each 3-byte group of
    the token into 4 characters of its own, two of which depend on that byte: so the token is
    kept encoded too, as the characters before those two (`_before`), the 64 ways they can read
    (`_quads`, by offset modulo 64, a row of the table made at import) and the characters after
    them (`_after`), made in three base64 calls when the high groups change. A token is then
    two concatenations.

    Compiled, an extension type: its fields are C struct members (read without a lookup) and
    `advance`, `set` and `token_bytes` are called from `encode_plain` as C functions; the
    `offsets` dict is what other modules read (a property: a field of an extension type is not
    visible from Python otherwise). Final, so those calls need not look for an override.
    """

    __slots__ = ("_after", "_before", "_chunks", "_high", "_hot", "_last", "_left", "_offsets",
                 "_order", "_prefix", "_quads", "_right", "_stale", "_token")

    # The fields' C types when compiled (no values here: __slots__ holds them when interpreted).
    _offsets: dict[int, int]
    _chunks: dict[int, bytes]
    _order: list[int]
    _prefix: bytes
    _token: object  # the token's bytes, or None until asked for again
    #: Partitions `move`d whose pair in `_chunks` is not made yet; None until the first `move`
    #: (a filtered stream's): an empty set is 216 bytes, and every open stream, idle or not,
    #: holds one of these (bench/idle_memory.py).
    _stale: set[int] | None
    _hot: cython.longlong
    _last: cython.longlong
    _high: cython.longlong
    _left: bytes
    _right: bytes
    _before: bytes
    _after: bytes
    _quads: list[bytes]

    def __init__(self, offsets: Mapping[int, int] | None = None) -> None:
        self._offsets = dict(offsets or {})
        self._chunks = {p: _pair(p, o) for p, o in self._offsets.items()}
        self._order = sorted(self._offsets)
        self._prefix = _prefix(len(self._offsets))
        self._token = None
        self._stale = None
        self._hot = self._last = -1  # none yet; partitions are never negative
        self._left = self._right = self._before = self._after = b""
        self._quads = _NO_QUADS
        self._high = -1

    @property
    def offsets(self) -> dict[int, int]:
        """Partition -> the next offset to read (the dict itself: callers read, never write)."""
        return self._offsets

    def copy(self) -> ProgressState:
        self._cool()
        self._make_stale()
        other: ProgressState = ProgressState.__new__(ProgressState)
        other._stale = None
        other._offsets = dict(self._offsets)
        other._chunks = dict(self._chunks)
        other._order = list(self._order)
        other._prefix = self._prefix
        other._token = self._token
        other._hot = other._last = -1
        other._left = other._right = other._before = other._after = b""
        other._quads = _NO_QUADS
        other._high = -1
        return other

    def get(self, partition: int) -> int | None:
        return self._offsets.get(partition)

    @cython.ccall
    def set(self, partition: int, next_offset: int) -> None:
        old = self._offsets.get(partition)
        if old == next_offset:
            return
        self._cool()
        self._offsets[partition] = next_offset
        self._chunks[partition] = _pair(partition, next_offset)
        self._token = None
        if old is None:
            self._reorder()

    def move(self, partition: int, next_offset: int) -> None:
        """`set`, the token made only when asked for (`token_bytes`): for a reader that passes
        many records and needs the id of few (the tail of filtered streams)."""
        if self._hot >= 0:
            self._cool()
        old = self._offsets.get(partition)
        if old == next_offset:
            return
        self._offsets[partition] = next_offset
        stale = self._stale
        if stale is None:
            stale = self._stale = set()
        stale.add(partition)
        self._token = None
        if old is None:
            self._reorder()

    @cython.ccall
    def _make_stale(self) -> None:
        """Make the pairs of the partitions `move`d since the last token."""
        stale = self._stale
        if stale:
            offsets, chunks = self._offsets, self._chunks
            for p in stale:
                if p in offsets:
                    chunks[p] = _pair(p, offsets[p])
            stale.clear()

    def drop(self, partition: int) -> None:
        if self._offsets.pop(partition, None) is not None:
            self._cool()
            self._chunks.pop(partition, None)
            self._token = None
            self._reorder()

    @cython.ccall
    def advance(self, partition: cython.longlong, next_offset: cython.longlong) -> bytes:
        """`set(partition, next_offset)`, then the token as ASCII bytes: the per-event path."""
        if partition != self._hot:
            if partition != self._last:
                # records alternating between partitions: no surroundings worth keeping
                self._last = partition
                self.set(partition, next_offset)
                return self.token_bytes()
            self._heat(partition, next_offset)
        self._offsets[partition] = next_offset
        if next_offset >> 6 != self._high:
            if next_offset < 0x40:  # one varint group: no table for so few offsets
                token: bytes = b64url_bytes(self._left + _LAST_GROUP[next_offset << 1]
                                            + self._right)
                self._token = token
                return token
            self._encode_high(next_offset >> 6)
        token = self._before + self._quads[next_offset & 0x3F] + self._after
        self._token = token
        return token

    @cython.ccall
    def _encode_high(self, high: cython.longlong) -> None:
        """The hot partition's offset reached new high varint groups (`high`, the offset over
        64): encode the token around the two characters its low group decides: `_before`,
        `_quads` (one of the shared `_LOW_PAIRS` rows) and `_after`."""
        self._high = high
        left = self._left
        tail = uvarint(high) + self._right
        cut = len(left) - len(left) % 3
        pre = left[cut:]
        post = tail[:2 - len(pre)]
        place = len(pre)
        if place == 0:
            bits = post[0] >> 4 if post else 0
        elif place == 1:
            bits = (pre[0] & 3) << 2 | (post[0] >> 6 if post else 0)
        else:
            bits = pre[1] & 15
        # the group with any low group: the characters it does not decide, padded when short
        group = b64url_bytes(pre + b"\x80" + post)
        self._before = b64url_bytes(left[:cut]) + group[:place]
        self._after = group[place + 2:] + b64url_bytes(tail[len(post):])
        self._quads = _LOW_PAIRS[place][bits]

    @cython.ccall
    def _heat(self, partition: int, next_offset: int) -> None:
        """Make `partition` the hot one (adding it if new)."""
        self._cool()
        self._make_stale()
        if partition not in self._offsets:
            self.set(partition, next_offset)
        chunks = self._chunks
        order = self._order
        i = order.index(partition)
        self._left = (self._prefix + b"".join([chunks[p] for p in order[:i]])
                      + uvarint(partition << 1))
        self._right = b"".join([chunks[p] for p in order[i + 1:]])
        self._high = -1
        self._hot = partition

    @cython.ccall
    def _cool(self) -> None:
        """Store the hot partition's pair again, before anything reads or changes the others."""
        hot = self._hot
        if hot >= 0:
            self._hot = -1
            if hot in self._offsets:
                self._chunks[hot] = _pair(hot, self._offsets[hot])

    @cython.ccall
    def _reorder(self) -> None:
        self._order = sorted(self._offsets)
        self._prefix = _prefix(len(self._offsets))

    def key(self) -> tuple[tuple[int, int], ...]:
        """A hashable snapshot, to find subscribers whose ids would be identical."""
        return tuple(sorted(self._offsets.items()))

    @cython.ccall
    def token_bytes(self) -> bytes:
        """The token as ASCII bytes (what goes on the wire)."""
        if self._token is None:
            self._cool()
            self._make_stale()
            chunks = self._chunks
            raw = self._prefix + b"".join([chunks[p] for p in self._order])
            self._token = b64url_bytes(raw)
        token: bytes = self._token  # type: ignore[assignment]  # set just above
        return token

    def token(self) -> str:
        return self.token_bytes().decode("ascii")


# -- events -------------------------------------------------------------------------------------

#: The pieces of the commonest event, an id and one data line: `ID`, the id, `ID_DATA`, the
#: data, `END` (`ssekd.bindings.sse.wire` has the same; a test checks they agree). The loops
#: write them as literals, which the compiled twin reads without a lookup.
ID = b"id:"
ID_DATA = b"\ndata:"
END = b"\n\n"
#: The bytes that end a field line (10 and 13 in the loops); data holding neither fits one
#: `data:` line.
LF, CR = 10, 13

#: Makes the event of a record that is not a plain one (headers, a tombstone, CR or LF in the
#: value, another id format) from the record and the stream's progress just after it.
SlowEvent = Callable[[Any, ProgressState], bytes]


@cython.annotation_typing(False)  # an EventBlock: compiled, `-> bytes` would refuse a subclass
def _block(data: bytes, events: int) -> bytes:
    block = EventBlock(data)
    block.events = events
    return block


@cython.annotation_typing(False)  # returns an EventBlock (see `_block`): types stated here
@cython.locals(progress=ProgressState, out=list, offsets=dict, events=cython.Py_ssize_t, m=tuple,
               nxt=cython.longlong, last=cython.longlong, partition=cython.longlong)
def encode_plain(records: Iterable[Any], progress: ProgressState, slow_event: SlowEvent) -> bytes:
    """The events of `records` for a stream with no filters and the `${etag}` id format, at the
    tail and catching up: per record its token and the pieces of its event appended to one
    list, joined once; records already passed are skipped (never twice). An `EventBlock`, or
    b"" when there is no event.

    The token of a record of the hot partition whose offset is in the same 64 as the last one
    (`ProgressState.advance`'s commonest case) is not made at all: its three pieces (`_before`,
    its `_quads` entry, `_after`) go in the list as they are, and only the last such token is
    joined, for `token_bytes`: two bytes objects fewer per event.

    Written for the compiled twin: `out.append` called as such (Cython makes it a C call; a
    bound method kept in a local would be a generic call), the event's pieces as literals (no
    global lookups), LF and CR as ints (`bytes.__contains__` of an int is one memchr), offsets
    compared as the ints they are and unboxed once."""
    out = []
    offsets = progress._offsets
    events = 0
    last = -1  # the next offset of the last event whose token was left in pieces, if any
    for m in records:
        p = m[0]
        offset = m[1]
        pos = offsets.get(p)
        if pos is not None and offset < pos:
            continue  # already passed: never twice
        value = m[3]
        events += 1
        if m[4] or value is None or 10 in value or 13 in value:  # headers, tombstone, LF, CR
            progress.set(p, offset + 1)
            out.append(slow_event(m, progress))
            last = -1
            continue
        nxt = offset + 1
        partition = p
        out.append(b"id:")  # ID
        if partition == progress._hot and nxt >> 6 == progress._high:
            offsets[p] = nxt
            out.append(progress._before)
            out.append(progress._quads[nxt & 0x3F])
            out.append(progress._after)
            last = nxt
        else:
            out.append(progress.advance(partition, nxt))
            last = -1
        out.append(b"\ndata:")  # ID_DATA
        out.append(value)
        out.append(b"\n\n")  # END
    if not events:
        return b""
    if last >= 0:
        progress._token = progress._before + progress._quads[last & 0x3F] + progress._after
    return _block(b"".join(out), events)


@cython.annotation_typing(False)
@cython.locals(progress=ProgressState, out=list, offsets=dict, m=tuple)
def encode_filtered(records: Iterable[Any], progress: ProgressState,
                    matches: Callable[[Any], bool] | None,
                    admits: Callable[[Any], bool] | None, plain_ids: bool,
                    slow_event: SlowEvent) -> bytes:
    """The events of `records` for a stream with filters (`matches`), or the key id format
    (not `plain_ids`), or still catching up (`admits`): every record passed moves the progress,
    the ones taken make an event. An `EventBlock`, or b"" when there is no event."""
    out: list[bytes] = []
    offsets = progress._offsets
    for m in records:
        p = m[0]
        offset = m[1]
        pos = offsets.get(p)
        if pos is not None and offset < pos:
            continue  # already passed: never twice
        progress.set(p, offset + 1)
        if matches is not None and not matches(m):
            continue
        if admits is not None and not admits(m):
            continue
        value = m[3]
        if plain_ids and not m[4] and value is not None and 10 not in value \
                and 13 not in value:
            out.append(b"id:" + progress.token_bytes() + b"\ndata:" + value + b"\n\n")
            continue
        out.append(slow_event(m, progress))
    return _block(b"".join(out), len(out)) if out else b""


# -- delivery latency ---------------------------------------------------------------------------

@cython.locals(now=cython.double, total=cython.double, value=cython.double, t=cython.longlong,
               times=cython.Py_ssize_t)
def observe_ages(counts: list[int], bounds: tuple[float, ...], now: float, stamps: list[int],
                 times: int, total: float) -> float:
    """Each of `stamps` (Kafka timestamps, ms) observed `times` times, as an age in seconds at
    `now` (ms; never below 0), in the histogram whose bucket bounds and counts these are;
    returns its sum, `total` with the ages added in order (the same float a call per record
    would make). Once per record of a batch at the tail: a Python method call each, before."""
    for t in stamps:
        value = max(0.0, now - t) / 1000.0
        counts[bisect_left(bounds, value)] += times
        total += value * times
    return total
