"""Kafka records to SSE events for one (topic, filters, id format): `KafkaEventEncoder`.

One encoder object is shared by every stream of the same route and filters, and the cache
encodes each record once per group of streams at the same position (see
`ssekd.bindings.kafka.subscription`).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from ssekd.bindings.kafka.message import Message
from ssekd.bindings.kafka.subscription import CatchUp
from ssekd.bindings.sse.wire import CR, END, ID, ID_DATA, LF, event_bytes, id_data_event
from ssekd.progress import (
    ETAG_FORMAT,
    MAX_ID_LENGTH,
    ProgressState,
    b64url,
    clean_etag,
    format_event_id,
)
from ssekd.telemetry.metrics import Counter


@dataclass(frozen=True)
class Filter:
    """All of: key equal (when given) and each header present with that value (docs/protocol.md)."""

    key: bytes | None = None
    headers: tuple[tuple[str, bytes], ...] = ()

    def matches(self, m: Message) -> bool:
        if self.key is not None and m.key != self.key:
            return False
        for name, value in self.headers:
            if not any(n == name and v == value for n, v in m.headers):
                return False
        return True


class KafkaEventEncoder:
    """Encodes records as `id:`/`event:`/`data:` events, advancing a stream's progress."""

    __slots__ = ("__weakref__", "_key", "filtered", "filters", "id_format", "topic")

    def __init__(self, topic: str, filters: tuple[Filter, ...] = (),
                 id_format: str = ETAG_FORMAT, filtered: Counter | None = None) -> None:
        self.topic = topic
        self.filters = filters
        self.id_format = id_format
        #: Records the filters held back (once per encoding, i.e. per group of streams).
        self.filtered = filtered or Counter()
        self._key: Hashable = (topic, filters, id_format)

    @property
    def key(self) -> Hashable:
        return self._key

    def matches(self, m: Message) -> bool:
        """Filters are any-of; a route with no filters takes everything."""
        return not self.filters or any(f.matches(m) for f in self.filters)

    def encode(self, records: Sequence[Message], progress: ProgressState,
               catch_up: CatchUp | None) -> bytes:
        if catch_up is not None and not catch_up.active():
            catch_up = None
        if self.filters or catch_up is not None or self.id_format != ETAG_FORMAT:
            return self._encode_filtered(records, progress, catch_up)
        # The path every unfiltered stream takes, at the tail and catching up: per record one
        # token (`advance`) and the pieces of its event appended to one list, joined once.
        out: list[bytes] = []
        append = out.append
        get = progress.offsets.get
        advance = progress.advance
        for m in records:
            p = m.partition
            pos = get(p)
            if pos is not None and m.offset < pos:
                continue  # already passed: never twice
            value = m.value
            if m.headers or value is None or LF in value or CR in value:
                progress.set(p, m.offset + 1)
                append(self._event(m, progress))
                continue
            append(ID)
            append(advance(p, m.offset + 1))
            append(ID_DATA)
            append(value)
            append(END)
        return b"".join(out)

    def _encode_filtered(self, records: Sequence[Message], progress: ProgressState,
                         catch_up: CatchUp | None) -> bytes:
        """Routes with filters or the key id format, and streams still catching up."""
        out: list[bytes] = []
        offsets = progress.offsets
        plain_ids = self.id_format == ETAG_FORMAT
        for m in records:
            p = m.partition
            pos = offsets.get(p)
            if pos is not None and m.offset < pos:
                continue  # already passed: never twice
            progress.set(p, m.offset + 1)
            if self.filters and not self.matches(m):
                self.filtered.value += 1
                continue
            if catch_up is not None and not catch_up.admits(m):
                continue
            value = m.value
            if plain_ids and not m.headers and value is not None \
                    and LF not in value and CR not in value:
                out.append(id_data_event(progress.token_bytes(), value))
                continue
            out.append(self._event(m, progress))
        return b"".join(out)

    def _event(self, m: Message, progress: ProgressState) -> bytes:
        fmt = self.id_format
        etag = clean_etag(m.header("etag")) if m.headers else None
        token = progress.token()
        event_id = format_event_id(fmt, token, etag, m.key)
        if etag is not None and len(event_id) > MAX_ID_LENGTH:
            # a browser would send it back and get 400: keep the id resumable instead
            event_id = format_event_id(fmt, token, None, m.key)
        if m.value is None:
            return event_bytes(event_id, "delete",
                               None if m.key is None else b64url(m.key).encode())
        return event_bytes(event_id, None, m.value)
