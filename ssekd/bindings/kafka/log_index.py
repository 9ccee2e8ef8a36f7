"""The records a topic's cache holds, by what filters ask of them: a key, a header's value, or
a field of the JSON value (an ssekd addition: `ssekd.bindings.kafka.value_path`).

A filtered stream catching up (a browser opening `/items/42`, or coming back with its last event
id) needs only the records its filters can take. Reading the whole cache for them costs every
such stream the size of the cache: 20,000 streams of one key each over a 50,000-key topic would
read a billion records. The index lists, per *term* (a key, or one header's value), the cached
records that carry it, in arrival order, so such a stream reads its own records and nothing else.

It is built on the first read that needs it (a topic no filtered stream reads costs nothing), the
key list, each header name's list and each JSON pointer's list on their own (a header name or a
pointer is indexed only once a filter names it; names come from the config, values from
requests). From then on each record appended is listed under its terms, its value parsed once for
all the pointers indexed; a record whose value is not JSON is listed under none of them.
Records that leave the cache (evicted, or replaced by a newer value of their key on a compacted
topic) are not taken out one by one: readers pass over them (their `seq` is in `gone`), and once
such dead entries outnumber the live ones the index is made again from what the cache holds, so
it stays within twice the cache's records and a term whose records are all gone disappears with
them (keys that come and go leave nothing behind). A record's value is parsed again when it
leaves, to count its entries under the pointers: its fields are not kept beside it.

Everything here runs on the reactor thread.
"""

from __future__ import annotations

from collections.abc import Container, Iterable

from ssekd.bindings.kafka.message import HEADERS, KEY, SEQ, VALUE, Message
from ssekd.bindings.kafka.value_path import ValuePath, parse_value

#: A filter's indexable part: `(None, key)`, `(header name, value)`, or `(pointer, canonical
#: JSON of a scalar)`.
Term = tuple[str | ValuePath | None, bytes]

#: Dead entries the index keeps before it is made again (and at least as many as live ones).
REBUILD_AFTER = 1024


class LogIndex:
    """Cached records by term; the cache (`TopicLog`) feeds it and says when records die."""

    __slots__ = ("_headers", "_keys", "_replaced", "_values", "dead", "entries", "gone")

    def __init__(self, replaced: Container[int] = frozenset()) -> None:
        #: The cache's replaced records by `seq` (`TopicLog.replaced`): left out when listing.
        self._replaced = replaced
        #: The `seq`s of the records listed here that left the cache (`died`) since the index
        #: was made: readers pass over them.
        self.gone: set[int] = set()
        #: key -> records with that key (built on the first key term asked for)
        self._keys: dict[bytes, list[Message]] | None = None
        #: header name -> value -> records with that header value (per name, once asked for)
        self._headers: dict[str, dict[bytes, list[Message]]] = {}
        #: pointer -> canonical value -> records whose value has it there (per pointer, once
        #: asked for)
        self._values: dict[ValuePath, dict[bytes, list[Message]]] = {}
        #: Entries listed, and how many of them are records that left the cache since.
        self.entries = 0
        self.dead = 0

    def run(self, term: Term, window: Iterable[Message]) -> list[Message]:
        """The records listed under `term`, oldest first (dead ones among them). `window` is
        what the cache holds, read once to build the term's kind if it is not indexed yet."""
        name, value = term
        if name is None:
            if self._keys is None:
                self._keys = {}
                replaced = self._replaced
                for m in window:
                    if m[KEY] is not None and m[SEQ] not in replaced:
                        self._list_key(m)
            return self._keys.get(value, _NONE)
        if isinstance(name, ValuePath):
            found = self._values.get(name)
            if found is None:
                found = self._values[name] = {}
                replaced = self._replaced
                for m in window:
                    if m[VALUE] is not None and m[SEQ] not in replaced:
                        self._list_value(m, name, found, parse_value(m[VALUE]))
            return found.get(value, _NONE)
        by_value = self._headers.get(name)
        if by_value is None:
            by_value = self._headers[name] = {}
            replaced = self._replaced
            for m in window:
                if m[SEQ] not in replaced:
                    self._list_header(m, name, by_value)
        return by_value.get(value, _NONE)

    def add(self, m: Message) -> None:
        """List a record the cache just took."""
        if self._keys is not None and m[KEY] is not None:
            self._list_key(m)
        if self._headers and m[HEADERS]:
            for name, by_value in self._headers.items():
                self._list_header(m, name, by_value)
        if self._values and m[VALUE] is not None:
            doc = parse_value(m[VALUE])
            for path, found in self._values.items():
                self._list_value(m, path, found, doc)

    def died(self, m: Message) -> None:
        """A listed record left the cache (or was replaced): its entries are dead now."""
        n = self._count(m)
        if n:  # listed: readers of its runs must pass over it
            self.dead += n
            self.gone.add(m[SEQ])

    def worn(self) -> bool:
        """Whether dead entries are many enough to make the index again."""
        return self.dead > REBUILD_AFTER and self.dead * 2 > self.entries

    def rebuild(self, window: Iterable[Message]) -> None:
        """Make the index again from the records the cache holds (live ones only)."""
        keys = self._keys is not None
        names = list(self._headers)
        self._keys = {} if keys else None
        self._headers = {name: {} for name in names}
        self._values = {path: {} for path in self._values}
        self.entries = self.dead = 0
        self.gone = set()
        replaced = self._replaced
        for m in window:
            if m[SEQ] not in replaced:
                self.add(m)

    def sizes(self) -> tuple[int, int]:
        """(terms listed, entries listed): what the index holds, for tests and figures."""
        terms = len(self._keys or ()) + sum(len(v) for v in self._headers.values()) \
            + sum(len(v) for v in self._values.values())
        return terms, self.entries

    def _list_key(self, m: Message) -> None:
        keys = self._keys
        key = m[KEY]
        assert keys is not None and key is not None
        run = keys.get(key)
        if run is None:
            keys[key] = [m]
        else:
            run.append(m)
        self.entries += 1

    def _list_header(self, m: Message, name: str, by_value: dict[bytes, list[Message]]) -> None:
        # a record carrying the same header value twice is listed once
        for v in {v for n, v in m[HEADERS] if n == name and v is not None}:
            run = by_value.get(v)
            if run is None:
                by_value[v] = [m]
            else:
                run.append(m)
            self.entries += 1

    def _list_value(self, m: Message, path: ValuePath, found: dict[bytes, list[Message]],
                    doc: object) -> None:
        at = path.find(doc)
        if at is None:
            return
        run = found.get(at)
        if run is None:
            found[at] = [m]
        else:
            run.append(m)
        self.entries += 1

    def _count(self, m: Message) -> int:
        """How many entries `m` has (what `add` listed it under). With pointers indexed its
        value is parsed again: a record's fields are not kept beside it."""
        n = 1 if self._keys is not None and m[KEY] is not None else 0
        if self._headers and m[HEADERS]:
            for name in self._headers:
                n += len({v for k, v in m[HEADERS] if k == name and v is not None})
        if self._values and m[VALUE] is not None:
            doc = parse_value(m[VALUE])
            n += sum(1 for path in self._values if path.find(doc) is not None)
        return n


_NONE: list[Message] = []
