"""Event ids: Zilla's `progress` token and the two id formats built on it (docs/protocol.md).

A `progress` token says, for each partition a stream has seen, the *next* offset to read. It is
the only state a browser keeps, so it must round-trip exactly: `ProgressId.encode` is byte-exact
with Zilla (the vectors in `vectors/event-ids.json`), and `parse_last_event_id` never raises -
whatever a client sends back (huge varints, negative values, unknown alphabets, 10,000 partitions)
becomes either a resume map or `None` ("undecodable: resume from the historical start").
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Mapping, Sequence

VERSION = 0x01

#: Ids longer than this are refused with 400 (docs/protocol.md); it also bounds what the parser reads.
MAX_ID_LENGTH = 254

#: Upper bound on partitions listed in a token we accept. A 254-character id cannot list more
#: than ~100; the cap keeps a hand-made token from making us allocate or loop on its say-so.
MAX_PARTITIONS = 10_000

#: A zigzag LEB128 varint of a 64-bit value never needs more than 10 bytes.
MAX_VARINT_BYTES = 10

_INT64_MAX = (1 << 63) - 1
#: Matched with `fullmatch`: `$` would also match before a final newline.
_URLSAFE = re.compile(r"[A-Za-z0-9_-]*={0,2}")

ETAG_FORMAT = "${etag}"
KEY_ETAG_FORMAT = '["${base64(key)}","${etag}"]'
#: An ssekd addition (Zilla #42): the key as text where it can go in a JSON string as it is.
KEY_TEXT_FORMAT = '["${key}","${etag}"]'
#: The formats whose id is a `[key, progress]` array.
KEYED_FORMATS = (KEY_ETAG_FORMAT, KEY_TEXT_FORMAT)

#: What keeps a key out of the text form: what JSON would have to escape (a quote, a backslash,
#: control characters) - the key then would not read as it is between the quotes.
_NOT_VERBATIM = re.compile(r'["\\\x00-\x1f\x7f]')


class UndecodableId(ValueError):
    """A last event id that does not decode; `reason` says why (for the event log)."""


def zigzag_varint(value: int) -> bytes:
    """Zigzag-encode a signed 64-bit value as LEB128, low 7-bit group first."""
    z = ((value << 1) ^ (value >> 63)) & 0xFFFF_FFFF_FFFF_FFFF
    out = bytearray()
    while True:
        group = z & 0x7F
        z >>= 7
        if z:
            out.append(group | 0x80)
        else:
            out.append(group)
            return bytes(out)


def read_varint(data: bytes, pos: int) -> tuple[int, int]:
    """Read one zigzag varint at `pos`; return (value, next position). Raises UndecodableId."""
    z = 0
    shift = 0
    for i in range(MAX_VARINT_BYTES):
        if pos + i >= len(data):
            raise UndecodableId("token cut short")
        b = data[pos + i]
        z |= (b & 0x7F) << shift
        if not b & 0x80:
            if z >> 64:
                raise UndecodableId("varint larger than 64 bits")
            return (z >> 1) ^ -(z & 1), pos + i + 1
        shift += 7
    raise UndecodableId("varint longer than 10 bytes")


def b64url(data: bytes) -> str:
    """base64url with `=` padding, the alphabet Zilla writes."""
    return base64.urlsafe_b64encode(data).decode("ascii")


def b64url_decode(text: str) -> bytes:
    """Strict base64url: only `A-Za-z0-9-_`, optional `=` padding. Raises UndecodableId."""
    if not _URLSAFE.fullmatch(text):
        raise UndecodableId("not base64url")
    body = text.rstrip("=")
    if len(body) % 4 == 1:
        raise UndecodableId("bad base64 length")
    if "=" in text and len(text) % 4:
        raise UndecodableId("bad base64 padding")
    try:
        return base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
    except (binascii.Error, ValueError) as e:  # pragma: no cover - the regex rules these out
        raise UndecodableId("not base64url") from e


class ProgressId:
    """Encode and decode the `progress` token (partition -> next offset to read)."""

    @staticmethod
    def encode(partitions: Mapping[int, int]) -> str:
        """The token for `partitions`, listed in ascending partition order."""
        out = bytearray((VERSION,))
        out += zigzag_varint(len(partitions))
        for p in sorted(partitions):
            out += zigzag_varint(p)
            out += zigzag_varint(partitions[p])
        return b64url(bytes(out))

    @staticmethod
    def decode(token: str) -> dict[int, int]:
        """The partition map of `token`. Raises UndecodableId with a reason."""
        if not token:
            raise UndecodableId("empty")
        data = b64url_decode(token)
        if not data or data[0] != VERSION:
            raise UndecodableId("unknown version")
        count, pos = read_varint(data, 1)
        if count < 0 or count > MAX_PARTITIONS:
            raise UndecodableId(f"partition count {count} out of range")
        # each entry takes at least two bytes: refuse before looping on a count the data lacks
        if count * 2 > len(data) - pos:
            raise UndecodableId("token cut short")
        partitions: dict[int, int] = {}
        for _ in range(count):
            partition, pos = read_varint(data, pos)
            offset, pos = read_varint(data, pos)
            if partition < 0 or partition > _INT64_MAX:
                raise UndecodableId(f"negative partition {partition}")
            if offset < 0:
                raise UndecodableId(f"negative offset {offset} for partition {partition}")
            if partition in partitions:
                raise UndecodableId(f"partition {partition} listed twice")
            partitions[partition] = offset
        if pos != len(data):
            raise UndecodableId("trailing bytes")
        return partitions


_B64_TO_URLSAFE = bytes.maketrans(b"+/", b"-_")

#: The first varint byte of a zigzag value `z`, by `z & 0x7F`: alone (z < 128) or followed by
#: more groups (high bit set).
_LAST_GROUP = [bytes((i,)) for i in range(0x80)]
_MORE_GROUP = [bytes((i | 0x80,)) for i in range(0x80)]


def _uvarint(z: int) -> bytes:
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


def _b64url_bytes(raw: bytes) -> bytes:
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
            enc = _b64url_bytes(bytes(raw))
            rows.append([enc[i + place:i + place + 2] for i in range(0, 256, 4)])
        places.append(rows)
    return places


_LOW_PAIRS = _low_pairs()


def _pair(partition: int, next_offset: int) -> bytes:
    """varint(partition) + varint(next offset) for non-negative values (zigzag of v is 2v)."""
    return _uvarint(partition << 1) + _uvarint(next_offset << 1)


def _prefix(count: int) -> bytes:
    """A token's first bytes for `count` partitions: shared (one per count), not one per
    stream."""
    while len(_PREFIXES) <= count:
        _PREFIXES.append(bytes((VERSION,)) + zigzag_varint(len(_PREFIXES)))
    return _PREFIXES[count]


_PREFIXES: list[bytes] = []


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
    """

    __slots__ = ("_after", "_before", "_chunks", "_high", "_hot", "_last", "_left", "_order",
                 "_prefix", "_quads", "_right", "_stale", "_token", "offsets")

    def __init__(self, offsets: Mapping[int, int] | None = None) -> None:
        self.offsets: dict[int, int] = dict(offsets or {})
        self._chunks: dict[int, bytes] = {p: _pair(p, o) for p, o in self.offsets.items()}
        # Every stream holds one of these while it is open, idle or not (bench/idle_memory.py):
        # what only some streams ever use is made when first needed, and what does not
        # change is a tuple or shared. The order is a tuple (read, never changed in place).
        self._order: tuple[int, ...] = tuple(sorted(self.offsets))
        self._prefix = _prefix(len(self.offsets))
        self._token: bytes | None = None
        #: Partitions `move`d whose pair in `_chunks` is not made yet; made at the first
        #: `move` (a filtered stream's): an empty set is 216 bytes.
        self._stale: set[int] | None = None
        self._hot = self._last = -1  # none yet; partitions are never negative
        self._left = self._right = self._before = self._after = b""
        self._quads: Sequence[bytes] = ()  # a row of the shared table once hot
        self._high = -1

    def copy(self) -> ProgressState:
        self._cool()
        self._make_stale()
        other = ProgressState.__new__(ProgressState)
        other._stale = None
        other.offsets = dict(self.offsets)
        other._chunks = dict(self._chunks)
        other._order = self._order
        other._prefix = self._prefix
        other._token = self._token
        other._hot = other._last = -1
        other._left = other._right = other._before = other._after = b""
        other._quads = ()
        other._high = -1
        return other

    def get(self, partition: int) -> int | None:
        return self.offsets.get(partition)

    def set(self, partition: int, next_offset: int) -> None:
        old = self.offsets.get(partition)
        if old == next_offset:
            return
        self._cool()
        self.offsets[partition] = next_offset
        self._chunks[partition] = _pair(partition, next_offset)
        self._token = None
        if old is None:
            self._reorder()

    def move(self, partition: int, next_offset: int) -> None:
        """`set`, the token made only when asked for (`token_bytes`): for a reader that passes
        many records and needs the id of few (the tail of filtered streams)."""
        if self._hot >= 0:
            self._cool()
        old = self.offsets.get(partition)
        if old == next_offset:
            return
        self.offsets[partition] = next_offset
        stale = self._stale
        if stale is None:
            stale = self._stale = set()
        stale.add(partition)
        self._token = None
        if old is None:
            self._reorder()

    def _make_stale(self) -> None:
        """Make the pairs of the partitions `move`d since the last token."""
        if self._stale:
            offsets, chunks = self.offsets, self._chunks
            for p in self._stale:
                if p in offsets:
                    chunks[p] = _pair(p, offsets[p])
            self._stale.clear()

    def drop(self, partition: int) -> None:
        if self.offsets.pop(partition, None) is not None:
            self._cool()
            self._chunks.pop(partition, None)
            self._token = None
            self._reorder()

    def advance(self, partition: int, next_offset: int) -> bytes:
        """`set(partition, next_offset)`, then the token as ASCII bytes: the per-event path."""
        if partition != self._hot:
            if partition != self._last:
                # records alternating between partitions: no surroundings worth keeping
                self._last = partition
                self.set(partition, next_offset)
                return self.token_bytes()
            self._heat(partition, next_offset)
        self.offsets[partition] = next_offset
        if next_offset >> 6 != self._high:
            if next_offset < 0x40:  # one varint group: no table for so few offsets
                raw = self._left + _LAST_GROUP[next_offset << 1] + self._right
                token = self._token = _b64url_bytes(raw)
                return token
            self._encode_high(next_offset >> 6)
        token = self._token = self._before + self._quads[next_offset & 0x3F] + self._after
        return token

    def _encode_high(self, high: int) -> None:
        """The hot partition's offset reached new high varint groups (`high`, the offset over
        64): encode the token around the two characters its low group decides: `_before`,
        `_quads` (one of the shared `_LOW_PAIRS` rows) and `_after`."""
        self._high = high
        left = self._left
        tail = _uvarint(high) + self._right
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
        group = _b64url_bytes(pre + b"\x80" + post)
        self._before = _b64url_bytes(left[:cut]) + group[:place]
        self._after = group[place + 2:] + _b64url_bytes(tail[len(post):])
        self._quads = _LOW_PAIRS[place][bits]

    def _heat(self, partition: int, next_offset: int) -> None:
        """Make `partition` the hot one (adding it if new)."""
        self._cool()
        self._make_stale()
        if partition not in self.offsets:
            self.set(partition, next_offset)
        chunks = self._chunks
        order = self._order
        i = order.index(partition)
        self._left = (self._prefix + b"".join([chunks[p] for p in order[:i]])
                      + _uvarint(partition << 1))
        self._right = b"".join([chunks[p] for p in order[i + 1:]])
        self._high = -1
        self._hot = partition

    def _cool(self) -> None:
        """Store the hot partition's pair again, before anything reads or changes the others."""
        hot = self._hot
        if hot >= 0:
            self._hot = -1
            if hot in self.offsets:
                self._chunks[hot] = _pair(hot, self.offsets[hot])

    def _reorder(self) -> None:
        self._order = tuple(sorted(self.offsets))
        self._prefix = _prefix(len(self.offsets))

    def key(self) -> tuple[tuple[int, int], ...]:
        """A hashable snapshot, to find subscribers whose ids would be identical."""
        return tuple(sorted(self.offsets.items()))

    def token_bytes(self) -> bytes:
        """The token as ASCII bytes (what goes on the wire)."""
        if self._token is None:
            self._cool()
            self._make_stale()
            chunks = self._chunks
            raw = self._prefix + b"".join([chunks[p] for p in self._order])
            self._token = binascii.b2a_base64(raw, newline=False).translate(_B64_TO_URLSAFE)
        return self._token

    def token(self) -> str:
        return self.token_bytes().decode("ascii")


def clean_etag(raw: bytes | None) -> str | None:
    """The etag text to put in an id, or None when there is none or it cannot go on the wire.

    An SSE id line ends at CR or LF and a browser drops ids containing NUL, so an etag with any
    of these (or that is not UTF-8) is left out rather than breaking the stream's framing.
    """
    if raw is None:
        return None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if "\r" in text or "\n" in text or "\0" in text:
        return None
    return text


def key_text(key: bytes) -> str:
    """The key as the text form of ids writes it: the key itself when it is UTF-8 with nothing
    JSON must escape, else its base64url (docs/protocol.md)."""
    try:
        text = key.decode("utf-8")
    except UnicodeDecodeError:
        return b64url(key)
    return b64url(key) if _NOT_VERBATIM.search(text) else text


def format_event_id(fmt: str, token: str, etag: str | None, key: bytes | None) -> str:
    """An event id in one of the formats of docs/protocol.md."""
    value = token if etag is None else f"{token}/{etag}"
    if fmt in KEYED_FORMATS:
        if key is None:
            k = "null"
        else:
            k = f'"{b64url(key) if fmt == KEY_ETAG_FORMAT else key_text(key)}"'
        # json.dumps of a plain token/etag is the bare quoted text, byte-identical to Zilla's,
        # and it still yields a valid JSON array when an etag carries a quote or backslash.
        return f"[{k},{json.dumps(value, ensure_ascii=False)}]"
    return value


def parse_last_event_id(text: str) -> dict[int, int]:
    """The resume map of a last event id in either format. Raises UndecodableId.

    The key form is a two-element JSON array whose second item is the `${etag}` form; both cut
    at the first `/` (Zilla's key-form parser also drops a character, which we must not).
    """
    if len(text) > MAX_ID_LENGTH:
        raise UndecodableId("longer than 254 characters")
    if text.startswith("["):
        try:
            value = json.loads(text)
        except (ValueError, RecursionError) as e:
            raise UndecodableId("not a JSON array") from e
        if (not isinstance(value, list) or len(value) != 2
                or not (value[0] is None or isinstance(value[0], str))
                or not isinstance(value[1], str)):
            raise UndecodableId("not a [key, progress] array")
        text = value[1]
    token = text.split("/", 1)[0]
    return ProgressId.decode(token)


# -- several topics on one stream (an ssekd addition) --------------------------------------------

#: Topics one stream may name at most: every topic's progress goes in each id, and an id longer
#: than `MAX_ID_LENGTH` cannot come back.
MAX_STREAM_TOPICS = 8

#: Separates the topics' parts of a several-topic token; not in the base64url alphabet.
TOPICS_SEPARATOR = "."
_TAG_LENGTH = 4
_TAG = re.compile(r"[A-Za-z0-9_-]{4}")


def topic_tag(topic: str) -> str:
    """Four base64url characters (24 bits of the CRC-32 of the name) that say which topic a part
    of a several-topic token is of, so a resume never gives one topic another's offsets."""
    crc = binascii.crc32(topic.encode("utf-8")) & 0xFFFFFF
    return base64.urlsafe_b64encode(crc.to_bytes(3, "big")).decode("ascii")


def topic_part(topic: str, token: str) -> str:
    """One topic's part of a several-topic token: its tag and its `progress` token unpadded."""
    return topic_tag(topic) + token.rstrip("=")


def format_topics_token(tokens: Mapping[str, str]) -> str:
    """The token of a stream of several topics: each topic's part (`topic_part`), in the order
    of the topics' names, joined by `.` (docs/protocol.md)."""
    return TOPICS_SEPARATOR.join(topic_part(t, tokens[t]) for t in sorted(tokens))


def parse_topics_id(text: str, topics: list[str] | tuple[str, ...]
                    ) -> dict[str, dict[int, int]]:
    """Each topic's resume map in the last event id of a several-topic stream (the `${etag}`
    form: the token, then optionally `/` and an etag). A topic of `topics` the id has no part
    for is left out (it starts like a new stream's); a part whose tag no topic has is ignored
    (the route's topics changed). Raises UndecodableId, never anything else."""
    if len(text) > MAX_ID_LENGTH:
        raise UndecodableId("longer than 254 characters")
    token = text.split("/", 1)[0]
    if not token:
        raise UndecodableId("empty")
    raw_parts = token.split(TOPICS_SEPARATOR)
    if len(raw_parts) > MAX_STREAM_TOPICS:
        raise UndecodableId(f"more than {MAX_STREAM_TOPICS} topics")
    parts: list[tuple[str, dict[int, int]]] = []
    for raw in raw_parts:
        tag = raw[:_TAG_LENGTH]
        if not _TAG.fullmatch(tag):
            raise UndecodableId("not a several-topic token")
        parts.append((tag, ProgressId.decode(raw[_TAG_LENGTH:])))
    out: dict[str, dict[int, int]] = {}
    used: set[int] = set()
    for topic in sorted(topics):
        tag = topic_tag(topic)
        for i, (part_tag, positions) in enumerate(parts):
            if i not in used and part_tag == tag:
                used.add(i)
                out[topic] = positions
                break
    return out
