"""Kafka records to SSE events for one (topic, filters, id format): `KafkaEventEncoder`.

One encoder object is shared by every stream of the same route and filters. At the tail the
cache visits an encoder only for the records its filters can take (`terms`, see
`ssekd.bindings.kafka.tail`) and makes each event once for every encoder of the same id format
(`event`); a stream catching up encodes its own records (`encode`, see
`ssekd.bindings.kafka.subscription`).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from ssekd import hotpath
from ssekd.bindings.kafka.log_index import Term
from ssekd.bindings.kafka.message import HEADERS, KEY, VALUE, Message, header
from ssekd.bindings.kafka.subscription import CatchUp
from ssekd.bindings.kafka.value_path import UNPARSED, ParsedValue, ValuePath
from ssekd.bindings.sse.wire import CR, LF, event_bytes, id_data_event
from ssekd.event_ids import (
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
    """All of: key equal (when given), each header present with that value, and each JSON
    pointer of `values` at one of its values in the record's JSON value (docs/protocol.md)."""

    key: bytes | None = None
    headers: tuple[tuple[str, bytes], ...] = ()
    #: (pointer, the canonical JSON of the values it may hold): an ssekd addition.
    values: tuple[tuple[ValuePath, frozenset[bytes]], ...] = ()

    @property
    def terms(self) -> tuple[Term, ...] | None:
        """The part of the filter the cache indexes records by: the key when it names one, else
        its first header, else its first pointer with each of its values (sse-kafka lists a
        value taken from the request first, being the most selective); None for an empty
        filter, which takes every record."""
        if self.key is not None:
            return ((None, self.key),)
        if self.headers:
            return (self.headers[0],)
        if self.values:
            path, allowed = self.values[0]
            return tuple((path, v) for v in sorted(allowed))
        return None

    def matches(self, m: Message, parsed: Any = UNPARSED) -> bool:
        """`parsed`: the record's value as a `ParsedValue`, when the caller parsed it."""
        if self.key is not None and m[KEY] != self.key:
            return False
        for name, value in self.headers:
            if not any(n == name and v == value for n, v in m[HEADERS]):
                return False
        if self.values:
            if parsed is UNPARSED:
                parsed = ParsedValue(m[VALUE])
            for path, allowed in self.values:
                if parsed.at(path) not in allowed:
                    return False
        return True


class KafkaEventEncoder:
    """Encodes records as `id:`/`event:`/`data:` events, advancing a stream's progress."""

    __slots__ = ("__weakref__", "_hot", "_json", "_key", "_terms", "filtered", "filters",
                 "id_format", "not_json", "topic")

    def __init__(self, topic: str, filters: tuple[Filter, ...] = (),
                 id_format: str = ETAG_FORMAT, filtered: Counter | None = None,
                 not_json: Counter | None = None, hot: ModuleType | None = None) -> None:
        #: The hot path's implementation (`ssekd.hotpath.IMPL`); tests pass the pure module
        #: and the compiled twin in turn, each with its own `ProgressState`.
        self._hot = hot if hot is not None else hotpath.IMPL
        self.topic = topic
        self.filters = filters
        self.id_format = id_format
        #: Records at the tail the filters held back (counted once per group of streams by
        #: the cache's tail router; a stream catching up reads only what its filters can take).
        self.filtered = filtered or Counter()
        #: Records at the tail a value filter could not read as JSON (once per record).
        self.not_json = not_json or Counter()
        self._key: Hashable = (topic, filters, id_format)
        per_filter = [f.terms for f in filters]
        # an empty filter takes every record, and so do no filters
        self._terms: tuple[Term, ...] | None = \
            tuple(dict.fromkeys(t for ts in per_filter if ts for t in ts)) \
            if filters and all(per_filter) else None
        #: Whether a filter looks into the value (parse it once for all of them).
        self._json = any(f.values for f in filters)

    @property
    def key(self) -> Hashable:
        return self._key

    @property
    def shape(self) -> Hashable:
        """Encoders of one shape make the same event of a record at the same position."""
        return self.id_format

    @property
    def terms(self) -> tuple[Term, ...] | None:
        """A record this encoder takes carries one of these (any-of filters: one per filter);
        None when any record may be taken (no filters, or an empty one)."""
        return self._terms

    def matches(self, m: Message, parsed: Any = UNPARSED) -> bool:
        """Filters are any-of; a route with no filters takes everything. `parsed`: the value
        as a `ParsedValue`, when the caller parsed it already."""
        if not self.filters:
            return True
        if self._json and parsed is UNPARSED:
            parsed = ParsedValue(m[VALUE])
        return any(f.matches(m, parsed) for f in self.filters)

    def event(self, m: Message, token: bytes) -> bytes:
        """The event of a record this encoder takes, its id made of `token` (the position
        just after it)."""
        value = m[VALUE]
        if self.id_format == ETAG_FORMAT and not m[HEADERS] and value is not None \
                and LF not in value and CR not in value:
            return id_data_event(token, value)
        return self._event_at(m, token.decode("ascii"))

    def encode(self, records: Sequence[Message], progress: ProgressState,
               catch_up: CatchUp | None) -> bytes:
        """The events of `records` for a stream at `progress` (moved past them). Its loops
        run a record at a time, every record of a topic read from its start passing through
        them: they are part of the hot path (`ssekd.hotpath`), compiled when they can be."""
        if catch_up is not None and not catch_up.active():
            catch_up = None
        hot = self._hot
        if self.filters or catch_up is not None or self.id_format != ETAG_FORMAT:
            # routes with filters or the key id format, and streams still catching up
            return hot.encode_filtered(  # type: ignore[no-any-return]
                records, progress, self.matches if self.filters else None,
                catch_up.admits if catch_up is not None else None,
                self.id_format == ETAG_FORMAT, self._event)
        # the path every unfiltered stream takes, at the tail and catching up
        return hot.encode_plain(records, progress, self._event)  # type: ignore[no-any-return]

    def _event(self, m: Message, progress: ProgressState) -> bytes:
        return self._event_at(m, progress.token())

    def _event_at(self, m: Message, token: str) -> bytes:
        fmt = self.id_format
        etag = clean_etag(header(m, "etag")) if m[HEADERS] else None
        event_id = format_event_id(fmt, token, etag, m[KEY])
        if etag is not None and len(event_id) > MAX_ID_LENGTH:
            # a browser would send it back and get 400: keep the id resumable instead
            event_id = format_event_id(fmt, token, None, m[KEY])
        if m[VALUE] is None:
            return event_bytes(event_id, "delete",
                               None if m[KEY] is None else b64url(m[KEY]).encode())
        return event_bytes(event_id, None, m[VALUE])
