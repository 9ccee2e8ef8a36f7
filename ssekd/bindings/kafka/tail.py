"""The streams of one topic that are at its tail, and how each new batch reaches them.

Streams at the tail that share an encoder (route, filters, id format) form one `TailGroup`:
each batch is encoded once for the group and written to every member. A topic may have tens of
thousands of groups - a stream per item (`/items/{id}`, a key filter) or per user (a filter on
the guard's identity) - so a record must not visit every group. `TailRouter` keeps the groups in
an index by the one thing each filter needs a record to carry (its *term*: a key, a header's
value, or a field of its JSON value, see `ssekd.bindings.kafka.log_index`): a record visits the
groups indexed under its key and under each of its headers' values, plus the groups that may take
any record (no filter). The cost of a record is then one lookup per key or header it carries plus
the groups that take it, whatever the number of groups.

Value filters (an ssekd addition) cost a record one JSON parse, made only while some group has
one, and one lookup per distinct pointer the groups name (`/status`, `/owner`): the groups are
listed under (pointer, value), so 100 filters on one pointer cost a record what one does. A
record whose value is not JSON matches no value filter and is counted once (`not_json`).

Progress without per-group work: every stream at the tail has passed every record the cache
took, so all of them are at the same position - the cache's tail, one past the last record of
each partition. A group keeps no position of its own; the id of an event is the tail's position
just after its record, made once per record for every group that takes it. The one exception is
a group placed *ahead* of the tail: a browser that resumes with an id while the cache is still
loading the topic (after a restart) is at the tail of what the cache holds, yet past it in some
partitions. Such a group keeps those positions (its `floor`): it passes over records below them,
its ids name them, and once the tail passes them it merges with the group of its encoder.

Writes come last, one per group and batch. A member whose transport pauses while the batch is
being written (on HTTP/2 a write to one stream can pause every stream of the connection) leaves
with the position its group wrote up to: after the batch if its group's write was done, before
it otherwise.

Everything here runs on the reactor thread.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from ssekd.bindings.kafka.log_index import Term
from ssekd.bindings.kafka.message import HEADERS, KEY, OFFSET, PARTITION, VALUE, Message
from ssekd.bindings.kafka.topic_log import TopicLog
from ssekd.bindings.kafka.value_path import NOT_JSON, UNPARSED, ParsedValue, ValuePath
from ssekd.event_ids import ProgressState
from ssekd.spi.stream import write_each

if TYPE_CHECKING:
    from ssekd.bindings.kafka.subscription import EventEncoder, Subscription


class TailGroup:
    """Streams at the tail with the same encoder (and, rarely, the same `floor`)."""

    __slots__ = ("encoder", "floor", "key", "members", "out")

    def __init__(self, encoder: EventEncoder, floor: dict[int, int], key: Hashable) -> None:
        self.encoder = encoder
        #: Partitions the group is ahead of the tail in: the next offset it reads there.
        self.floor = floor
        #: Its key in `TailRouter.groups`.
        self.key = key
        self.members: dict[Subscription, None] = {}
        #: The events of the batch being routed (None between batches).
        self.out: list[bytes] | None = None


def _group_key(encoder: EventEncoder, floor: dict[int, int]) -> Hashable:
    return (encoder.key, tuple(sorted(floor.items()))) if floor else encoder.key


def _positions(tail: dict[int, int], floor: dict[int, int]) -> dict[int, int]:
    """A group's position: the tail's, or its floor where that is further on."""
    if not floor:
        return tail
    out = dict(tail)
    for p, at in floor.items():
        if at > out.get(p, -1):
            out[p] = at
    return out


class TailRouter:
    """The tail groups of one topic, indexed by the terms their filters need."""

    __slots__ = ("_anything", "_by_header", "_by_key", "_by_value", "_counted", "_floored",
                 "_header_names", "_multi", "_not_json", "_unwritten", "_before",
                 "_value_paths", "group_of", "groups", "log")

    def __init__(self, log: TopicLog) -> None:
        self.log = log
        self.groups: dict[Hashable, TailGroup] = {}
        #: The group of each subscription at the tail.
        self.group_of: dict[Subscription, TailGroup] = {}
        #: Groups that may take any record (no filter): visited for every record.
        self._anything: dict[TailGroup, None] = {}
        #: Groups by key, and by header (name, value), that their filters need.
        self._by_key: dict[bytes, dict[TailGroup, None]] = {}
        self._by_header: dict[tuple[str, bytes], dict[TailGroup, None]] = {}
        #: Header names some group's term names, with how many terms name each.
        self._header_names: dict[str, int] = {}
        #: Groups by (JSON pointer's text, canonical value), and the pointers with how many
        #: terms name each (a record's value is parsed while there is one).
        self._by_value: dict[tuple[str, bytes], dict[TailGroup, None]] = {}
        self._value_paths: dict[ValuePath, int] = {}
        #: Per not-JSON counter of the groups with value terms: [counter, how many groups].
        self._not_json: dict[int, list[Any]] = {}
        #: Groups listed under more than one term (a record may name them twice).
        self._multi = 0
        #: Groups with a floor.
        self._floored: dict[TailGroup, None] = {}
        #: Per filtered-records counter: [counter, how many indexed groups count into it].
        self._counted: dict[int, list[Any]] = {}
        #: While a batch is written: the groups not written yet, and the tail before the batch.
        self._unwritten: dict[TailGroup, None] = {}
        self._before: dict[int, int] = {}

    # -- membership ---------------------------------------------------------------------------

    def join(self, s: Subscription) -> None:
        """`s` read everything the cache holds: it gets the batches of its group from now on."""
        tail = self.log.tail()
        floor = {p: at for p, at in s.progress.offsets.items() if at > tail.get(p, -1)}
        key = _group_key(s.encoder, floor)
        g = self.groups.get(key)
        if g is None:
            g = self.groups[key] = TailGroup(s.encoder, floor, key)
            self._index(g)
        g.members[s] = None
        self.group_of[s] = g

    def leave(self, s: Subscription) -> ProgressState:
        """`s` stops getting batches; returns the position its group wrote up to."""
        g = self.group_of.pop(s)
        del g.members[s]
        if not g.members:
            self._drop(g)
        before = g in self._unwritten
        return ProgressState(_positions(self._before if before else self.log.tail(), g.floor))

    def positions(self, s: Subscription) -> dict[int, int]:
        """Where `s` (at the tail) is in every partition: what its group wrote up to."""
        g = self.group_of[s]
        return dict(_positions(self._before if g in self._unwritten else self.log.tail(),
                               g.floor))

    def position(self, s: Subscription, partition: int) -> int | None:
        """Where `s` (at the tail) is in `partition`, None when it has no position there."""
        g = self.group_of.get(s)
        if g is None:
            return None
        part = self.log.partitions.get(partition)
        at = g.floor.get(partition)
        if part is None:
            return at
        return part.next if at is None or at < part.next else at

    def __len__(self) -> int:
        return len(self.group_of)

    def members(self) -> Iterator[Subscription]:
        return iter(self.group_of)

    # -- the index ----------------------------------------------------------------------------

    def _index(self, g: TailGroup) -> None:
        if g.floor:
            self._floored[g] = None
        terms = g.encoder.terms
        if terms is None:
            self._anything[g] = None
            return
        for term in terms:
            listed = self._lists(term, create=True)
            assert listed is not None
            listed[g] = None
        if len(terms) > 1:
            self._multi += 1
        _count_in(self._counted, g.encoder.filtered, 1)
        if any(isinstance(name, ValuePath) for name, _ in terms):
            _count_in(self._not_json, g.encoder.not_json, 1)

    def _drop(self, g: TailGroup) -> None:
        """Take a group out of everything (its last member left)."""
        if self.groups.get(g.key) is g:
            del self.groups[g.key]
        self._floored.pop(g, None)
        terms = g.encoder.terms
        if terms is None:
            self._anything.pop(g, None)
            return
        for term in terms:
            listed = self._lists(term, create=False)
            if listed is not None:
                listed.pop(g, None)
                if not listed:
                    self._unlist(term)
        if len(terms) > 1:
            self._multi -= 1
        _count_in(self._counted, g.encoder.filtered, -1)
        if any(isinstance(name, ValuePath) for name, _ in terms):
            _count_in(self._not_json, g.encoder.not_json, -1)

    def _lists(self, term: Term, create: bool) -> dict[TailGroup, None] | None:
        name, value = term
        if name is None:
            listed = self._by_key.get(value)
            if listed is None and create:
                listed = self._by_key[value] = {}
            return listed
        if isinstance(name, ValuePath):
            listed = self._by_value.get((name.text, value))
            if listed is None and create:
                listed = self._by_value[(name.text, value)] = {}
                self._value_paths[name] = self._value_paths.get(name, 0) + 1
            return listed
        listed = self._by_header.get((name, value))
        if listed is None and create:
            listed = self._by_header[(name, value)] = {}
            self._header_names[name] = self._header_names.get(name, 0) + 1
        return listed

    def _unlist(self, term: Term) -> None:
        name, value = term
        if name is None:
            del self._by_key[value]
            return
        if isinstance(name, ValuePath):
            del self._by_value[(name.text, value)]
            left = self._value_paths[name] - 1
            if left:
                self._value_paths[name] = left
            else:
                del self._value_paths[name]
            return
        del self._by_header[(name, value)]
        left = self._header_names[name] - 1
        if left:
            self._header_names[name] = left
        else:
            del self._header_names[name]

    def sizes(self) -> dict[str, int]:
        """What the index holds (for tests and figures)."""
        return {"groups": len(self.groups), "keys": len(self._by_key),
                "headers": len(self._by_header), "header_names": len(self._header_names),
                "values": len(self._by_value), "pointers": len(self._value_paths),
                "anything": len(self._anything), "floored": len(self._floored),
                "counters": len(self._counted) + len(self._not_json)}

    # -- a batch ------------------------------------------------------------------------------

    def route(self, fresh: Sequence[Message], before: dict[int, int]) -> None:
        """Encode `fresh` (the records the cache just took, the tail having been at `before`)
        for the groups that take them, then write each group's events to its members."""
        if not self.groups:
            return
        touched: dict[TailGroup, None] = {}
        # groups that take every record: the batch is encoded once per id format (the path of
        # a broadcast, and of a stream at the tail of a topic the cache is loading)
        made: dict[Hashable, bytes] = {}
        for g in self._anything:
            if g.floor:
                continue
            shape = g.encoder.shape
            data = made.get(shape)
            if data is None:
                data = made[shape] = g.encoder.encode(fresh, ProgressState(before), None)
            if data:
                g.out = [data]
                touched[g] = None
        taken: dict[int, list[Any]] = {}
        if self._by_key or self._by_header or self._by_value or self._floored:
            self._route_each(fresh, before, touched, taken)
        self._count_filtered(len(fresh), taken)
        self._write(touched, before)
        if self._floored:
            self.settle()

    def _route_each(self, fresh: Sequence[Message], before: dict[int, int],
                    touched: dict[TailGroup, None], taken: dict[int, list[Any]]) -> None:
        """Record by record: the groups indexed under its key or a header value it carries
        (and groups with a floor that take every record). `taken` counts, per filtered-records
        counter, the records indexed groups took."""
        tail = ProgressState(before)
        by_key = self._by_key
        by_header = self._by_header
        by_value = self._by_value
        names = self._header_names
        paths = list(self._value_paths)
        floored_anything = [g for g in self._anything if g.floor]
        multi = self._multi > 0
        not_json = 0
        for m in fresh:
            p = m[PARTITION]
            tail.move(p, m[OFFSET] + 1)  # its token is made only if a group takes the record
            found: list[TailGroup] = floored_anything
            if by_key and m[KEY] is not None:
                listed = by_key.get(m[KEY])
                if listed:
                    found = [*found, *listed]
            if names and m[HEADERS]:
                for n, v in m[HEADERS]:
                    if n in names and v is not None:
                        listed = by_header.get((n, v))
                        if listed:
                            found = [*found, *listed]
            parsed = UNPARSED
            if paths:
                parsed = ParsedValue(m[VALUE])  # once per record, whatever the groups
                if parsed.doc is NOT_JSON:
                    not_json += m[VALUE] is not None
                else:
                    for path in paths:
                        at = parsed.at(path)  # once per pointer, whatever the filters
                        if at is not None:
                            listed = by_value.get((path.text, at))
                            if listed:
                                found = [*found, *listed]
            if not found:
                continue
            token = tail.token_bytes()
            if multi and len(found) > 1:
                found = list(dict.fromkeys(found))
            made: tuple[Hashable, bytes] | None = None
            for g in found:
                encoder = g.encoder
                if encoder.terms is not None:
                    if not (encoder.matches(m) if parsed is UNPARSED
                            else encoder.matches(m, parsed)):
                        continue
                    counter = encoder.filtered
                    entry = taken.get(id(counter))
                    if entry is None:
                        taken[id(counter)] = [counter, 1]
                    else:
                        entry[1] += 1
                if g.floor:
                    floor_at = g.floor.get(p)
                    if floor_at is not None and m[OFFSET] < floor_at:
                        continue  # passed before it joined the tail
                    event = encoder.event(m, ProgressState(
                        _positions(tail.offsets, g.floor)).token_bytes())
                elif made is not None and made[0] == encoder.shape:
                    event = made[1]
                else:
                    event = encoder.event(m, token)
                    if made is None:
                        made = (encoder.shape, event)
                if g.out is None:
                    g.out = [event]
                    touched[g] = None
                else:
                    g.out.append(event)
        if not_json:
            for counter, _ in self._not_json.values():
                counter.value += not_json

    def _count_filtered(self, records: int, taken: dict[int, list[Any]]) -> None:
        """Each indexed group held back every record of the batch it did not take."""
        for ident, (counter, groups) in self._counted.items():
            entry = taken.get(ident)
            counter.value += records * groups - (entry[1] if entry is not None else 0)

    def _write(self, touched: dict[TailGroup, None], before: dict[int, int]) -> None:
        self._unwritten = dict(touched)
        self._before = before
        try:
            for g in touched:
                out = g.out or ()
                # one piece as it is: a join would copy it, and lose the count of an EventBlock
                data = out[0] if len(out) == 1 else b"".join(out)
                g.out = None
                del self._unwritten[g]
                # each member's sink, as `Subscription.write` would, in one call for all
                write_each([s.sink for s in g.members], data)
        finally:
            for g in self._unwritten:
                g.out = None
            self._unwritten = {}
            self._before = {}

    def settle(self) -> None:
        """Drop the floors the tail has reached, merging such groups with their encoder's."""
        tail = self.log.tail()
        for g in list(self._floored):
            g.floor = {p: at for p, at in g.floor.items() if at > tail.get(p, -1)}
            key = _group_key(g.encoder, g.floor)
            if key == g.key:
                continue
            if not g.floor:
                del self._floored[g]
            if self.groups.get(g.key) is g:
                del self.groups[g.key]
            into = self.groups.get(key)
            if into is None:
                g.key = key
                self.groups[key] = g
                continue
            for s in g.members:
                into.members[s] = None
                self.group_of[s] = into
            g.members.clear()
            self._drop(g)


def _count_in(counters: dict[int, list[Any]], counter: Any, groups: int) -> None:
    """Add `groups` to the number of groups counting into `counter` (dropped at none)."""
    entry = counters.get(id(counter))
    if entry is None:
        counters[id(counter)] = [counter, groups]
        return
    entry[1] += groups
    if not entry[1]:
        del counters[id(counter)]
