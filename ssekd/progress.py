"""Event ids: Zilla's `progress` token and the two id formats built on it (SPEC §7).

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
from collections.abc import Mapping

VERSION = 0x01

#: Ids longer than this are refused with 400 (SPEC §6); it also bounds what the parser reads.
MAX_ID_LENGTH = 254

#: Upper bound on partitions listed in a token we accept. A 254-character id cannot list more
#: than ~100; the cap keeps a hand-made token from making us allocate or loop on its say-so.
MAX_PARTITIONS = 10_000

#: A zigzag LEB128 varint of a 64-bit value never needs more than 10 bytes.
MAX_VARINT_BYTES = 10

_INT64_MAX = (1 << 63) - 1
_URLSAFE = re.compile(r"^[A-Za-z0-9_-]*={0,2}$")

ETAG_FORMAT = "${etag}"
KEY_ETAG_FORMAT = '["${base64(key)}","${etag}"]'


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
    if not _URLSAFE.match(text):
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


def _pair(partition: int, next_offset: int) -> bytes:
    """varint(partition) + varint(next offset) for non-negative values (the hot path)."""
    out = bytearray()
    for v in (partition, next_offset):
        z = v << 1
        while z > 0x7F:
            out.append((z & 0x7F) | 0x80)
            z >>= 7
        out.append(z)
    return bytes(out)


class ProgressState:
    """A stream's mutable progress, with the encoded token cached between changes.

    Encoding happens once per event (shared by every subscriber of a tail group), so each
    partition's varint pair is kept encoded and only the changed one is redone; the token is
    assembled from those pieces and base64url-encoded with binascii (no per-event sorting).
    """

    __slots__ = ("_chunks", "_order", "_prefix", "_token", "offsets")

    def __init__(self, offsets: Mapping[int, int] | None = None) -> None:
        self.offsets: dict[int, int] = dict(offsets or {})
        self._chunks: dict[int, bytes] = {p: _pair(p, o) for p, o in self.offsets.items()}
        self._order: list[int] = sorted(self.offsets)
        self._prefix = bytes((VERSION,)) + zigzag_varint(len(self.offsets))
        self._token: bytes | None = None

    def copy(self) -> ProgressState:
        other = ProgressState.__new__(ProgressState)
        other.offsets = dict(self.offsets)
        other._chunks = dict(self._chunks)
        other._order = list(self._order)
        other._prefix = self._prefix
        other._token = self._token
        return other

    def get(self, partition: int) -> int | None:
        return self.offsets.get(partition)

    def set(self, partition: int, next_offset: int) -> None:
        old = self.offsets.get(partition)
        if old == next_offset:
            return
        self.offsets[partition] = next_offset
        self._chunks[partition] = _pair(partition, next_offset)
        self._token = None
        if old is None:
            self._reorder()

    def drop(self, partition: int) -> None:
        if self.offsets.pop(partition, None) is not None:
            self._chunks.pop(partition, None)
            self._token = None
            self._reorder()

    def _reorder(self) -> None:
        self._order = sorted(self.offsets)
        self._prefix = bytes((VERSION,)) + zigzag_varint(len(self.offsets))

    def key(self) -> tuple[tuple[int, int], ...]:
        """A hashable snapshot, to find subscribers whose ids would be identical."""
        return tuple(sorted(self.offsets.items()))

    def token_bytes(self) -> bytes:
        """The token as ASCII bytes (what goes on the wire)."""
        if self._token is None:
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


def format_event_id(fmt: str, token: str, etag: str | None, key: bytes | None) -> str:
    """An event id in one of the two formats of SPEC §7."""
    value = token if etag is None else f"{token}/{etag}"
    if fmt == KEY_ETAG_FORMAT:
        k = "null" if key is None else f'"{b64url(key)}"'
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
