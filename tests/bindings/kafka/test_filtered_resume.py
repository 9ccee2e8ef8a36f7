"""Filtered streams at the tail and catching up lose nothing and repeat nothing, however many
groups share a topic: a property test over random filters, id formats, cut points, pauses,
caches too small to hold a resume point, and a daemon restart while clients come back.

Each *client* is what a browser does: a chain of streams, each opened again with the last id
the previous one delivered. Whatever happens in between, a client ends with every record its
filters take, each once, in each partition's order. The cache runs on a MemoryReactorClock with
a fake Kafka that answers history reads from the test's own record of what was produced.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass, field
from typing import Any, Protocol

from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.internet.defer import Deferred
from twisted.internet.testing import MemoryReactorClock

from ssekd.bindings.kafka.cache import CacheServer, TopicCache
from ssekd.bindings.kafka.history import FetchResult
from ssekd.bindings.kafka.message import (
    HEADERS,
    KEY,
    OFFSET,
    PARTITION,
    SIZE,
    TIMESTAMP,
    VALUE,
    Message,
    new_message,
)
from ssekd.bindings.kafka.start import Start
from ssekd.bindings.kafka.subscription import Subscription
from ssekd.bindings.kafka.topic_log import CacheBounds
from ssekd.bindings.sse_kafka.encoder import Filter, KafkaEventEncoder
from ssekd.bindings.sse_kafka.proxy import value_conditions
from ssekd.event_ids import ETAG_FORMAT, KEY_ETAG_FORMAT, ProgressId, parse_last_event_id
from ssekd.telemetry.events import EventLog
from tests.support.subscriptions import Sink

TOPIC = "t"
_EVENT = re.compile(rb"id:([^\n]*)\n(?:event:[^\n]*\n)?data:[^\n]*?p(\d+)o(\d+)[^\n]*\n\n")


class Kafka:
    """The records produced, per partition, and history reads answered on a later turn."""

    def __init__(self, partitions: int) -> None:
        self.records: list[list[Message]] = [[] for _ in range(partitions)]
        self.reads: list[tuple[int, int, int, Deferred[FetchResult]]] = []

    def consume(self, *a: Any, **kw: Any) -> None:
        pass

    def fetch(self, topic: str, p: int, offset: int, limit: int,
              max_bytes: int) -> Deferred[FetchResult]:
        d: Deferred[FetchResult] = Deferred()
        self.reads.append((p, offset, limit, d))
        return d

    def answer(self) -> None:
        reads, self.reads = self.reads, []
        for p, offset, limit, d in reads:
            held = self.records[p][offset:offset + limit]
            out, size = [], 0
            for m in held:
                out.append(copy(m))
                size += m[SIZE]
                if size >= 64 * 1024:
                    break
            end = len(self.records[p]) if offset + len(out) >= len(self.records[p]) else None
            d.callback(FetchResult(out, end))


class Answering(Protocol):
    """A fake Kafka whose history reads wait for `answer`."""

    @property
    def reads(self) -> Any: ...

    def answer(self) -> None: ...


def settle(kafka: Answering, clock: MemoryReactorClock) -> None:
    """Answer history reads and run due calls until neither is left (at most 50 turns)."""
    for _ in range(50):
        kafka.answer()
        if not any(c.getTime() <= clock.seconds() for c in clock.getDelayedCalls()) \
                and not kafka.reads:
            break
        clock.advance(0)


def copy(m: Message) -> Message:
    """A record as a new fetch gives it (a new tuple, numbered when it is read)."""
    return new_message(m[PARTITION], m[OFFSET], m[KEY], m[VALUE], m[HEADERS], m[TIMESTAMP])


@dataclass
class Client:
    filters: tuple[Filter, ...]
    id_format: str
    #: (partition, offset) of every record received, in arrival order.
    got: list[tuple[int, int]] = field(default_factory=list)
    last_id: str | None = None
    sink: Sink | None = None
    sub: Subscription | None = None
    seen_bytes: int = 0

    def read(self) -> None:
        """Take the complete events the current stream wrote since the last read."""
        assert self.sink is not None
        data = b"".join(self.sink.writes)
        for match in _EVENT.finditer(data, self.seen_bytes):
            self.last_id = match.group(1).decode()
            self.got.append((int(match.group(2)), int(match.group(3))))
            self.seen_bytes = match.end()

    def takes(self, m: Message) -> bool:
        return not self.filters or any(oracle(f, m) for f in self.filters)


def oracle(f: Filter, m: Message) -> bool:
    """What a filter takes, worked out apart from the code under test for the value part: the
    record's value read with `json.loads`, the field walked by hand, equal as JSON values."""
    if f.key is not None and m[KEY] != f.key:
        return False
    if not all((n, v) in m[HEADERS] for n, v in f.headers):
        return False
    if not f.values:
        return True
    try:
        doc = json.loads(m[VALUE] or b"")
    except ValueError:
        return False
    for path, allowed in f.values:
        field = doc
        for token in path.text.split("/")[1:]:
            if not isinstance(field, dict) or token not in field:
                return False
            field = field[token]
        if isinstance(field, (dict, list)):
            return False
        wanted = [json.loads(a) for a in allowed]
        if not any(field == w and isinstance(field, bool) == isinstance(w, bool)
                   for w in wanted):
            return False
    return True


KEYS = [b"k%d" % i for i in range(12)]
USERS = [b"u%d" % i for i in range(4)]


STATUS = ["open", "closed", "held"]


def value_filter(rng: random.Random) -> dict[str, Any]:
    """A filter's `value` block as a config writes it (equality or a set, on one or two
    fields, a number sometimes)."""
    kind = rng.randrange(4)
    if kind == 0:
        return {"/status": rng.choice(STATUS)}
    if kind == 1:
        return {"/status": rng.sample(STATUS, 2)}
    if kind == 2:
        return {"/n": rng.choice([1, 2, 2.0])}
    return {"/status": rng.choice(STATUS), "/meta/owner": [u.decode() for u in USERS[:2]]}


def random_filters(rng: random.Random, keys: int) -> tuple[Filter, ...]:
    k = lambda: KEYS[rng.randrange(keys)]  # noqa: E731
    u = lambda: USERS[rng.randrange(len(USERS))]  # noqa: E731
    v = lambda: value_conditions(value_filter(rng), str)  # noqa: E731
    kind = rng.randrange(11)
    if kind == 7:
        return (Filter(values=v()),)
    if kind == 8:
        return (Filter(values=v()), Filter(values=v()))
    if kind == 9:
        return (Filter(key=k(), values=v()),)
    if kind == 10:
        return (Filter(headers=(("user", u()),), values=v()), Filter(values=v()))
    if kind == 0:
        return ()
    if kind == 1:
        return (Filter(key=k()),)
    if kind == 2:
        return (Filter(headers=(("user", u()),)),)
    if kind == 3:
        return (Filter(key=k(), headers=(("user", u()),)),)
    if kind == 4:
        return (Filter(key=k()), Filter(key=k()))
    if kind == 5:
        return (Filter(key=k()), Filter(headers=(("user", u()),)))
    return (Filter(headers=(("user", u()), ("colour", b"red"))),)


def random_record(rng: random.Random, kafka: Kafka, keys: int) -> Message:
    p = rng.randrange(len(kafka.records))
    o = len(kafka.records[p])
    headers: list[tuple[str, bytes | None]] = []
    if rng.random() < 0.7:
        headers.append(("user", USERS[rng.randrange(len(USERS))]))
    if rng.random() < 0.3:
        headers.append(("colour", rng.choice([b"red", b"blue"])))
    if rng.random() < 0.2:
        headers.append(("etag", b"e%d" % o))
    key = None if rng.random() < 0.1 else KEYS[rng.randrange(keys)]
    rng.shuffle(headers)
    m = new_message(p, o, key, random_value(rng, p, o), tuple(headers))
    kafka.records[p].append(m)
    return m


def random_value(rng: random.Random, p: int, o: int) -> bytes:
    """Mostly JSON objects with a `status`, a number `n` and an owner (or without some of
    them, or with one of another type), now and then a value that is not JSON."""
    if rng.random() < 0.1:
        return b"p%do%d" % (p, o)
    doc: dict[str, Any] = {"id": f"p{p}o{o}"}
    if rng.random() < 0.8:
        doc["status"] = rng.choice(STATUS) if rng.random() < 0.9 else [rng.choice(STATUS)]
    if rng.random() < 0.7:
        doc["n"] = rng.choice([1, 2, 3, 2.0, "2"])
    if rng.random() < 0.6:
        doc["meta"] = {"owner": rng.choice(USERS).decode()}
    return json.dumps(doc).encode()


class World:
    """A cache server fed from `kafka` at its own pace, and the clients reading it."""

    def __init__(self, rng: random.Random, partitions: int, max_messages: int,
                 compacted: bool = False) -> None:
        self.rng = rng
        self.compacted = compacted
        self.clock = MemoryReactorClock()
        self.kafka = Kafka(partitions)
        self.max_messages = max_messages
        self.encoders: dict[Any, KafkaEventEncoder] = {}
        self.clients: list[Client] = []
        self.server, self.cache = self._server()
        #: How far the cache's consumer has read each partition.
        self.fed = [0] * partitions
        for p in range(partitions):
            self.cache.on_end(p, 0)

    def _server(self) -> tuple[CacheServer, TopicCache]:
        # partition-wait 0: streams are placed in each partition as the cache hears of it, so
        # ids made before the cache knew every partition (and resumes from them) are checked
        server = CacheServer(self.clock, self.kafka, "cache", EventLog("t"),  # type: ignore[arg-type]
                             bounds=CacheBounds(max_messages=self.max_messages),
                             partition_wait=self.rng.choice([0.0, 5.0]))
        cache = server.topic(TOPIC)
        cache.on_metadata(len(self.kafka.records), self.compacted)
        return server, cache

    def encoder(self, c: Client) -> KafkaEventEncoder:
        key = (c.filters, c.id_format)
        enc = self.encoders.get(key)
        if enc is None:
            enc = self.encoders[key] = KafkaEventEncoder(TOPIC, c.filters, c.id_format)
        return enc

    def open(self, c: Client) -> None:
        if c.last_id is None:
            # a client that never got an event starts where every client starts: offset 0
            start = Start(resume={p: 0 for p in range(len(self.kafka.records))})
        else:
            start = Start(resume=parse_last_event_id(c.last_id))
        c.sink = Sink()
        c.seen_bytes = 0
        c.sub = self.cache.subscribe(self.encoder(c), c.sink, start)

    def close(self, c: Client) -> None:
        assert c.sub is not None
        c.read()
        c.sub.close()
        c.sub = None

    def feed(self, most: int) -> None:
        """The consumer reads up to `most` records of one partition, then says it reached the
        end when it did."""
        p = self.rng.randrange(len(self.fed))
        behind = self.kafka.records[p][self.fed[p]:self.fed[p] + most]
        if behind:
            self.cache.on_records([copy(m) for m in behind])
            self.fed[p] += len(behind)
        if self.fed[p] == len(self.kafka.records[p]):
            self.cache.on_end(p, self.fed[p])

    def run(self) -> None:
        settle(self.kafka, self.clock)
        for c in self.clients:
            if c.sub is not None:
                c.read()

    def restart(self) -> None:
        """The daemon restarts: every stream ends, a new cache loads the topic from the start,
        and the clients come back with their last ids while it loads."""
        for c in self.clients:
            if c.sub is not None:
                self.close(c)
        self.server, self.cache = self._server()
        self.fed = [0] * len(self.fed)
        for c in self.clients:
            self.open(c)


def simulate(seed: int, partitions: int, keys: int, max_messages: int, clients: int,
             steps: int, compacted: bool = False) -> World:
    rng = random.Random(seed)
    world = World(rng, partitions, max_messages, compacted)
    for _ in range(clients):
        c = Client(random_filters(rng, keys), rng.choice([ETAG_FORMAT, KEY_ETAG_FORMAT]))
        world.clients.append(c)
        world.open(c)
    world.run()
    for _ in range(steps):
        action = rng.random()
        if action < 0.35:
            for _ in range(rng.randint(1, 25)):
                random_record(rng, world.kafka, keys)
            world.feed(rng.randint(1, 40))
        elif action < 0.55:
            world.feed(rng.randint(1, 40))
        elif action < 0.7:
            c = rng.choice(world.clients)
            if c.sub is None:
                world.open(c)
            else:
                world.close(c)
        elif action < 0.85:
            c = rng.choice(world.clients)
            if c.sub is not None:
                c.sub.resume() if c.sub.paused else c.sub.pause()
        elif action < 0.87:
            world.restart()
        world.run()
    # the producer stops; the cache reads everything; every client comes back and reads on
    for _ in range(10_000):
        if all(f == len(r) for f, r in zip(world.fed, world.kafka.records, strict=True)):
            break
        world.feed(100)
    for p in range(partitions):
        world.cache.on_end(p, world.fed[p])
    for c in world.clients:
        if c.sub is None:
            world.open(c)
        elif c.sub.paused:
            c.sub.resume()
    for _ in range(200):
        world.run()
    return world


def check(world: World) -> None:
    produced = [m for records in world.kafka.records for m in records]
    for i, c in enumerate(world.clients):
        wanted = sorted((m[PARTITION], m[OFFSET]) for m in produced if c.takes(m))
        got = c.got
        assert len(got) == len(set(got)), f"client {i} ({c.filters}) got a record twice"
        assert sorted(got) == wanted, \
            f"client {i} ({c.filters}, {c.id_format}): missing {sorted(set(wanted) - set(got))[:5]}"
        for p in range(len(world.kafka.records)):
            offsets = [o for q, o in got if q == p]
            assert offsets == sorted(offsets), f"client {i}: partition {p} out of order"


def check_compacted(world: World) -> None:
    """A compacted topic's cache keeps the latest record of each key: a client may miss records
    replaced before it read them, but never gets one twice or out of order, and ends with the
    latest record of every key its filters take."""
    latest: dict[tuple[int, bytes | None], Message] = {}
    for records in world.kafka.records:
        for m in records:
            latest[(m[PARTITION], m[KEY] if m[KEY] is not None else b"%d" % m[OFFSET])] = m
    for i, c in enumerate(world.clients):
        for p in range(len(world.kafka.records)):
            offsets = [o for q, o in c.got if q == p]
            assert offsets == sorted(set(offsets)), f"client {i}: partition {p} twice or out of order"
        missing = [(m[PARTITION], m[OFFSET]) for m in latest.values()
                   if c.takes(m) and (m[PARTITION], m[OFFSET]) not in set(c.got)]
        assert not missing, f"client {i} ({c.filters}): latest records missing: {missing[:5]}"


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32), partitions=st.integers(1, 3), keys=st.sampled_from([2, 5, 12]),
       max_messages=st.sampled_from([8, 60, 100_000]), clients=st.integers(1, 24))
def test_every_client_gets_each_record_its_filters_take_once(
        seed: int, partitions: int, keys: int, max_messages: int, clients: int) -> None:
    world = simulate(seed, partitions, keys, max_messages, clients, steps=120)
    check(world)
    # every stream is still open: closing them leaves the tail's index empty
    for c in world.clients:
        world.close(c)
    assert world.cache.tail.sizes() == {"groups": 0, "keys": 0, "headers": 0,
                                        "header_names": 0, "values": 0, "pointers": 0,
                                        "anything": 0, "floored": 0,
                                        "counters": 0}


def test_an_id_resumed_ahead_of_a_loading_cache_delivers_only_what_follows_it() -> None:
    """A daemon restarts; a client comes back with an id further on than the new cache has
    loaded: it is at the tail of what the cache holds, ahead of it, and gets nothing it had
    (the records the cache loads up to its id), then the rest with exact ids."""
    rng = random.Random(1)
    world = World(rng, 2, 100_000)
    kafka = world.kafka
    for o in range(10):
        for p in (0, 1):
            kafka.records[p].append(new_message(p, o, b"k1", b"p%do%d" % (p, o)))
    c = Client((Filter(key=b"k1"),), ETAG_FORMAT)
    world.clients.append(c)
    world.open(c)
    while world.fed != [10, 10]:
        world.feed(3)
    world.run()
    assert len(c.got) == 20
    world.restart()
    for p in (0, 1):  # the new cache hears of both partitions: records before the client's id
        world.cache.on_records([copy(m) for m in kafka.records[p][:4]])
        world.fed[p] = 4
    world.run()
    assert c.sub is not None and c.sub.at_tail, "at the tail of what the cache holds"
    assert world.cache.tail.sizes()["floored"] == 1, "and ahead of it"
    while world.fed != [10, 10]:
        world.feed(3)
        world.run()
    assert len(c.got) == 20, "nothing it had comes again"
    kafka.records[0].append(new_message(0, 10, b"k1", b"p0o10"))
    kafka.records[1].append(new_message(1, 10, b"k1", b"p1o10"))
    while world.fed != [11, 11]:
        world.feed(5)
        world.run()
    assert sorted(c.got[20:]) == [(0, 10), (1, 10)]
    assert world.cache.tail.sizes()["floored"] == 0, "the tail passed its floor: merged"
    assert c.last_id is not None and ProgressId.decode(c.last_id) == {0: 11, 1: 11}


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32), partitions=st.integers(1, 3), keys=st.sampled_from([2, 12]),
       max_messages=st.sampled_from([8, 100_000]), clients=st.integers(1, 16))
def test_on_a_compacted_topic_clients_end_with_every_latest_value_once(
        seed: int, partitions: int, keys: int, max_messages: int, clients: int) -> None:
    check_compacted(simulate(seed, partitions, keys, max_messages, clients, steps=120,
                             compacted=True))
