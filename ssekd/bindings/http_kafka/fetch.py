"""The fetch capability: the live values of a topic, read from the cache the SSE streams use.

A fetch answers from the topic's cache once the cache has read every partition to its end (a
topic no stream followed yet is followed from then on; `503` with `Retry-After` when it is not
loaded within `max-wait` seconds). What it answers:

- with `merge` (`content-type: application/json`): a JSON array of the latest value of every
  key whose latest record the route's `filters` take (tombstones and empty values left out), in
  the order those records arrived. `ETag` is the progress of the topic (every partition's next
  offset, the token of docs/protocol.md);
- without `merge`: the latest such value alone (the route's filter names a key: one item),
  with the record's `content-type` header when the route's `content-types` take it (JSON and
  plain text by default), else as `application/octet-stream`: a writer's `text/html` is never
  served as a page of the daemon's origin (and every answer carries `nosniff` and a content
  security policy, `exchange.DATA_ONLY`); `ETag` is `<progress>/<etag>` when the record has an
  `etag` header, else `<progress>`; `404` when there is none (never written, or deleted), `204`
  for an empty value.

`If-None-Match` with a progress the client got before: `304` unless a record the route's filters
take, or a tombstone, arrived at or after that progress in some partition (or the cache no
longer holds that far back): the answer did not change. `Prefer: wait=N` holds such a request
until one arrives, or N seconds pass (at most `max-wait`), then answers `200` or `304`; a fetch
of one item that is not there waits for it the same way before its `404`.

For a compacted topic, the whole state must be in the cache: when its bounds made the cache
let go of a key's latest record (`cache.max-messages`, `max-bytes`), the fetch is `503` and an
event says so, rather than an answer with items missing.
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from twisted.web import http

from ssekd.bindings.http.roles import HttpContext
from ssekd.bindings.http_kafka.exchange import Exchange
from ssekd.bindings.http_kafka.headers import parse_prefer, progress_of, response_header
from ssekd.bindings.http_kafka.produce import RETRY_AFTER_LOADING, Settings, topic_refused
from ssekd.bindings.http_kafka.waits import KafkaExit, wait_for, when_loaded
from ssekd.bindings.kafka.cache import SchemaUnavailable, TopicCache, TopicLimitReached
from ssekd.bindings.kafka.message import HEADERS, KEY, PARTITION, SEQ, VALUE, Message, header
from ssekd.bindings.kafka.topic_log import TopicLog
from ssekd.event_ids import ProgressId, UndecodableId, clean_etag
from ssekd.patterns import Unresolvable, substitute
from ssekd.telemetry.events import EventLog

#: The media types a fetch serves a stored value as, unless its route's `content-types` says.
DEFAULT_CONTENT_TYPES = ("application/json", "application/*+json", "text/plain")
#: What any other stored type is served as: bytes, which no browser renders.
OCTET_STREAM = "application/octet-stream"
#: Bytes of candidate records one indexed read takes at a time.
_STEP_BYTES = 1 << 20
_STEP_RECORDS = 10_000


@dataclass(frozen=True)
class FetchFilter:
    """One of a fetch route's filters, resolved for a request: all of its parts must match."""

    key: bytes | None = None
    headers: tuple[tuple[str, bytes], ...] = ()

    def matches(self, m: Message) -> bool:
        if self.key is not None and m[KEY] != self.key:
            return False
        return all(any(n == name and v == value for n, v in m[HEADERS])
                   for name, value in self.headers)


@dataclass(frozen=True)
class FetchWith:
    """A fetch route's `with`, compiled (templates still hold `${...}`)."""

    topic: str
    #: (key template or None, ((header, value template), ...)) per filter
    filters: tuple[tuple[str | None, tuple[tuple[str, str], ...]], ...] = ()
    merge: bool = False
    #: The media types a stored value is served as (`*` in a pattern: any characters).
    content_types: tuple[str, ...] = DEFAULT_CONTENT_TYPES

    def served_as(self, stored: bytes | None) -> str | None:
        """The `Content-Type` of an answer whose record says `stored`: itself when the route
        takes its media type, `application/octet-stream` when not, None when it has none."""
        if stored is None or not response_header("content-type", stored):
            return None if stored is None else OCTET_STREAM
        text = stored.decode("latin-1")
        media = text.partition(";")[0].strip().lower()
        if any(fnmatch.fnmatchcase(media, allowed) for allowed in self.content_types):
            return text
        return OCTET_STREAM


class View:
    """What a fetch answers from one cache: its records now, and whether a change touches it."""

    def __init__(self, log: TopicLog, filters: tuple[FetchFilter, ...]) -> None:
        self.log = log
        self.filters = filters

    def takes(self, m: Message) -> bool:
        return not self.filters or any(f.matches(m) for f in self.filters)

    def touched_by(self, m: Message) -> bool:
        """Whether a new record may change the answer: one the filters take, or a tombstone (it
        carries no headers to be filtered by, and may delete a key of the answer)."""
        return m[VALUE] is None or self.takes(m)

    def records(self) -> list[Message]:
        """The latest record of each key the filters take (and each record without a key),
        in arrival order; deleted keys and empty values left out."""
        latest: dict[tuple[int, bytes], Message] = {}
        keyless: list[Message] = []
        for m in self._candidates():
            if m[KEY] is None:
                keyless.append(m)
            else:
                latest[(m[PARTITION], m[KEY])] = m  # arrival order: the last one wins
        # a key's latest record is the one to judge, even when an older one was taken
        found = [m for m in [*latest.values(), *keyless]
                 if m[VALUE] and self.takes(m) and not self._superseded(m)]
        found.sort(key=lambda m: m[SEQ])
        return found

    def _candidates(self) -> Iterable[Message]:
        """Every record the cache holds that the answer may come from: all of them, or - when
        each filter names a key - those of the keys (the cache's index)."""
        log = self.log
        keys = tuple((None, f.key) for f in self.filters if f.key is not None)
        if not self.filters or len(keys) != len(self.filters):
            return [m for m in log.window() if not log.is_replaced(m)]
        positions = dict.fromkeys(log.partitions, 0)
        out: list[Message] = []
        after: int | None = None
        while True:
            got, after, more = log.candidates(keys, positions, after, _STEP_RECORDS, _STEP_BYTES)
            out.extend(got)
            if not more:
                return out

    def _superseded(self, m: Message) -> bool:
        """A compacted cache marks a record replaced when its key has a newer one; a cache of a
        topic that is not compacted keeps them all, and `records` keeps only the last."""
        return self.log.is_replaced(m)

    def progress(self) -> dict[int, int]:
        return self.log.tail()

    def changed_since(self, since: Mapping[int, int]) -> bool:
        """Whether a record at or after `since` (a partition's next offset when the client
        was answered) may have changed the answer; True when the cache cannot tell (it no longer
        holds records that far back, or `since` is past what it has)."""
        log = self.log
        for p, part in log.partitions.items():
            at = since.get(p)
            if at is None:
                if part.next > part.origin:
                    return True  # a partition the client had not seen with records
                continue
            if at > part.next or at < part.start:
                return True
            if at == part.next:
                continue
            i = part.index_of(at)
            for m in part.records[i:]:
                if self.touched_by(m):
                    return True
        return False

    def incomplete(self) -> str | None:
        """Why the cache of a compacted topic may lack some key's latest value, else None."""
        log = self.log
        if not log.compacted:
            return None
        for p, part in log.partitions.items():
            if part.start > part.origin:
                return (f"the cache of {log.topic} let go of records of partition {p} "
                        f"(offsets below {part.start}): raise its cache_server's cache bounds "
                        f"to hold the whole topic")
        return None


class Fetching:
    """Answers the requests of fetch routes (one per http-kafka binding)."""

    def __init__(self, binding: str, settings: Settings, clock: Any, events: EventLog) -> None:
        self.binding = binding
        self.settings = settings
        self.clock = clock
        self.events = events

    def handle(self, exchange: Exchange, ctx: HttpContext, w: FetchWith, exit_: KafkaExit,
               params: Mapping[str, str]) -> None:
        request: Any = exchange.request
        path = request.path.decode("latin-1")
        identities = ctx.identities()
        try:
            topic = substitute(w.topic, params, identities)
            filters = tuple(FetchFilter(
                None if key is None else substitute(key, params, identities).encode("utf-8"),
                tuple((n, substitute(v, params, identities).encode("utf-8")) for n, v in hs))
                for key, hs in w.filters)
        except Unresolvable as e:
            self.events.emit(self.binding, "BINDING_HTTP_KAFKA_NO_ROUTE", f"{path}: {e}")
            exchange.answer(http.NOT_FOUND)
            return
        refused = topic_refused(topic, w.topic, self.settings)
        if refused is not None:
            self.events.emit(self.binding, "BINDING_HTTP_KAFKA_NO_ROUTE", f"{path}: {refused}")
            exchange.answer(http.NOT_FOUND)
            return
        prefer = parse_prefer(request.requestHeaders.getRawHeaders(b"prefer"))
        wait = min(prefer.wait or 0.0, self.settings.max_wait)
        since = _since(request.getHeader(b"if-none-match"))
        try:
            cache = exit_.topic(topic)
        except (TopicLimitReached, SchemaUnavailable) as e:
            self._unavailable(exchange, f"{topic}: {e}")
            return
        began = self.clock.seconds()
        loaded = exchange.hold(when_loaded(cache, self.clock, self.settings.max_wait))

        def then(ok: bool | None) -> None:
            if not ok:
                self._unavailable(exchange, f"the cache of {topic} is not loaded yet")
                return
            left = max(0.0, wait - (self.clock.seconds() - began))
            self._answer(exchange, cache, View(cache.log, filters), w, since, left)

        loaded.addCallback(then).addErrback(exchange.failed)

    def _answer(self, exchange: Exchange, cache: TopicCache, view: View, w: FetchWith,
                since: dict[int, int] | None, wait: float) -> None:
        merge = w.merge
        why = view.incomplete()
        if why is not None:
            self.events.emit(self.binding, "BINDING_HTTP_KAFKA_FETCH_INCOMPLETE", why)
            self._unavailable(exchange, why)
            return
        unchanged = since is not None and not view.changed_since(since)
        missing = not merge and since is None and not view.records()
        if (unchanged or missing) and wait > 0:
            self._hold(exchange, cache, view, w, since, wait, unchanged)
            return
        token = ProgressId.encode(view.progress())
        if merge:
            headers = [("content-type", "application/json"), ("etag", token)]
            if unchanged:
                exchange.answer(http.NOT_MODIFIED, headers)
                return
            records = view.records()
            body = b"[" + b",".join(m[VALUE] for m in records if m[VALUE]) + b"]"
            exchange.answer(http.OK, headers, body)
            return
        records = view.records()
        if not records:
            exchange.answer(http.NOT_FOUND)
            return
        m = records[-1]
        etag = clean_etag(header(m, "etag"))
        tag = token if etag is None else f"{token}/{etag}"
        headers = [("etag", tag)]
        content_type = w.served_as(header(m, "content-type"))
        if content_type is not None:
            headers.insert(0, ("content-type", content_type))
        if unchanged:
            exchange.answer(http.NOT_MODIFIED, headers)
        elif not m[VALUE]:
            exchange.answer(http.NO_CONTENT, headers)
        else:
            exchange.answer(http.OK, headers, m[VALUE])

    def _hold(self, exchange: Exchange, cache: TopicCache, view: View, w: FetchWith,
              since: dict[int, int] | None, wait: float, unchanged: bool) -> None:
        """Wait (at most `wait` seconds) until a record arrives that may change the answer,
        then answer with the time left: `200` when it did change, else wait again or `304`
        (`404` for an item still missing)."""
        began = self.clock.seconds()

        def touched(fresh: list[Message]) -> bool | None:
            if fresh:
                return True if any(view.touched_by(m) for m in fresh) else None
            # a partition reached its end or started over, or the topic was dropped: look again
            if unchanged:
                return True if since is None or view.changed_since(since) else None
            return True if view.records() else None

        def again(_: object) -> None:
            left = max(0.0, wait - (self.clock.seconds() - began))
            self._answer(exchange, cache, view, w, since, left)

        held = exchange.hold(wait_for(cache, self.clock, wait, touched))
        held.addCallback(again).addErrback(exchange.failed)

    def _unavailable(self, exchange: Exchange, reason: str) -> None:
        exchange.text(http.SERVICE_UNAVAILABLE, reason,
                      [("retry-after", str(max(1, math.ceil(RETRY_AFTER_LOADING))))])


def _since(raw: bytes | None) -> dict[int, int] | None:
    """The positions an `If-None-Match` names, or None (absent, `*`, or not one of ours: a
    value that does not decode never matches, so the answer is `200`)."""
    if raw is None:
        return None
    progress = progress_of(raw.decode("latin-1"))
    if progress is None:
        return None
    try:
        return ProgressId.decode(progress)
    except UndecodableId:
        return None
