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
from collections.abc import Mapping

from ssekd import hotpath

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


#: A stream's progress, its token remade per event: part of the hot path, compiled when it can
#: be (`ssekd.hotpath`), and imported from here by the rest of ssekd.
ProgressState = hotpath.ProgressState


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
