"""Streams of several topics lose nothing and repeat nothing across all of them: a property
test over random interleavings of records across topics, random filters, cut points, pauses,
caches too small to hold a resume point, and a daemon restart while clients come back.

Like tests/bindings/kafka/test_filtered_resume.py for one topic: each *client* is a chain of
streams, each opened again with the last id the previous one delivered (the several-topic id,
`ssekd.event_ids.parse_topics_id` reads it, as sse-kafka does). A client ends with every
record of each of its topics its filters take, once, in each partition's order, each event
naming its topic. The caches run on a MemoryReactorClock with a fake Kafka per topic.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.internet.defer import Deferred
from twisted.internet.testing import MemoryReactorClock

from ssekd.bindings.kafka.cache import CacheServer
from ssekd.bindings.kafka.history import FetchResult
from ssekd.bindings.kafka.message import OFFSET, PARTITION
from ssekd.bindings.kafka.start import Start
from ssekd.bindings.kafka.topic_log import CacheBounds
from ssekd.bindings.sse_kafka.encoder import Filter, KafkaEventEncoder
from ssekd.bindings.sse_kafka.topics import TOPIC_AS_EVENT, TOPIC_AS_FIELD, TopicsSubscription
from ssekd.event_ids import ETAG_FORMAT, parse_topics_id
from ssekd.telemetry.events import EventLog
from tests.bindings.kafka.test_filtered_resume import (
    Kafka,
    copy,
    random_filters,
    random_record,
    settle,
)
from tests.support.subscriptions import Sink

TOPICS = ("alpha", "beta", "gamma")
_EVENT = re.compile(rb"id:([^\n]*)\n(?:topic:([^\n]*)\n)?(?:event:([^\n]*)\n)?"
                    rb"data:[^\n]*?p(\d+)o(\d+)[^\n]*\n\n")


class Cluster:
    """One fake Kafka per topic, behind the one client a cache server talks to."""

    def __init__(self, partitions: dict[str, int]) -> None:
        self.topics = {t: Kafka(n) for t, n in partitions.items()}

    def consume(self, *a: Any, **kw: Any) -> None:
        pass

    def fetch(self, topic: str, p: int, offset: int, limit: int,
              max_bytes: int) -> Deferred[FetchResult]:
        return self.topics[topic].fetch(topic, p, offset, limit, max_bytes)

    def answer(self) -> None:
        for k in self.topics.values():
            k.answer()

    @property
    def reads(self) -> bool:
        return any(k.reads for k in self.topics.values())


@dataclass
class Client:
    topics: tuple[str, ...]
    filters: tuple[Filter, ...]
    topic_as: str
    #: (topic, partition, offset) of every record received, in arrival order.
    got: list[tuple[str, int, int]] = field(default_factory=list)
    last_id: str | None = None
    sink: Sink | None = None
    stream: TopicsSubscription | None = None
    paused: bool = False
    seen_bytes: int = 0

    def read(self) -> None:
        assert self.sink is not None
        data = b"".join(self.sink.writes)
        for match in _EVENT.finditer(data, self.seen_bytes):
            event_id, topic_field, event_type, p, o = match.groups()
            topic = (topic_field if self.topic_as == TOPIC_AS_FIELD else event_type).decode()
            assert topic in self.topics, f"an event of {topic!r}"
            if self.topic_as == TOPIC_AS_FIELD:
                assert event_type is None, "the field form keeps the event type"
            self.last_id = event_id.decode()
            self.got.append((topic, int(p), int(o)))
            self.seen_bytes = match.end()
        assert data[self.seen_bytes:].count(b"\n\n") == 0, "an event the test could not read"


class World:
    def __init__(self, rng: random.Random, partitions: dict[str, int], max_messages: int) -> None:
        self.rng = rng
        self.clock = MemoryReactorClock()
        self.kafka = Cluster(partitions)
        self.max_messages = max_messages
        self.encoders: dict[Any, KafkaEventEncoder] = {}
        self.clients: list[Client] = []
        self.server = self._server()
        self.fed = {t: [0] * n for t, n in partitions.items()}

    def _server(self) -> CacheServer:
        server = CacheServer(self.clock, self.kafka, "cache", EventLog("t"),  # type: ignore[arg-type]
                             bounds=CacheBounds(max_messages=self.max_messages),
                             partition_wait=self.rng.choice([0.0, 5.0]))
        for t, kafka in self.kafka.topics.items():
            cache = server.topic(t)
            cache.on_metadata(len(kafka.records), False)
            for p in range(len(kafka.records)):
                cache.on_end(p, 0)
        return server

    def encoder(self, topic: str, c: Client) -> KafkaEventEncoder:
        key = (topic, c.filters)
        enc = self.encoders.get(key)
        if enc is None:
            enc = self.encoders[key] = KafkaEventEncoder(topic, c.filters, ETAG_FORMAT)
        return enc

    def open(self, c: Client) -> None:
        resume = {} if c.last_id is None else parse_topics_id(c.last_id, c.topics)
        c.sink = Sink()
        c.seen_bytes = 0
        c.paused = False
        stream = c.stream = TopicsSubscription(c.topics, c.sink, c.topic_as)
        for t in stream.topics:
            # a client that never got an event starts where every client starts: offset 0
            at = resume.get(t) if c.last_id is not None else \
                {p: 0 for p in range(len(self.kafka.topics[t].records))}
            assert at is not None, f"the id {c.last_id!r} has no part for {t}"
            stream.add(t, self.server.topic(t).subscribe(self.encoder(t, c), stream.sinks[t],
                                                         Start(resume=at)))

    def close(self, c: Client) -> None:
        assert c.stream is not None
        c.read()
        c.stream.close()
        assert c.stream.closed
        c.stream = None

    def feed(self, most: int) -> None:
        t = self.rng.choice(sorted(self.fed))
        fed = self.fed[t]
        records = self.kafka.topics[t].records
        p = self.rng.randrange(len(fed))
        behind = records[p][fed[p]:fed[p] + most]
        cache = self.server.topic(t)
        if behind:
            cache.on_records([copy(m) for m in behind])
            fed[p] += len(behind)
        if fed[p] == len(records[p]):
            cache.on_end(p, fed[p])

    def produce(self, keys: int) -> None:
        t = self.rng.choice(sorted(self.kafka.topics))
        random_record(self.rng, self.kafka.topics[t], keys)

    def run(self) -> None:
        settle(self.kafka, self.clock)
        for c in self.clients:
            if c.stream is not None:
                c.read()

    def restart(self) -> None:
        for c in self.clients:
            if c.stream is not None:
                self.close(c)
        self.server = self._server()
        self.fed = {t: [0] * len(f) for t, f in self.fed.items()}
        for c in self.clients:
            self.open(c)

    def caught_up(self) -> bool:
        return all(f == len(r) for t, fed in self.fed.items()
                   for f, r in zip(fed, self.kafka.topics[t].records, strict=True))


def simulate(seed: int, partitions: dict[str, int], keys: int, max_messages: int, clients: int,
             steps: int) -> World:
    rng = random.Random(seed)
    world = World(rng, partitions, max_messages)
    for _ in range(clients):
        topics = tuple(rng.sample(TOPICS, rng.choice([2, 3])))
        c = Client(topics, random_filters(rng, keys), rng.choice([TOPIC_AS_EVENT, TOPIC_AS_FIELD]))
        world.clients.append(c)
        world.open(c)
    world.run()
    for _ in range(steps):
        action = rng.random()
        if action < 0.35:
            for _ in range(rng.randint(1, 25)):
                world.produce(keys)
            world.feed(rng.randint(1, 40))
        elif action < 0.55:
            world.feed(rng.randint(1, 40))
        elif action < 0.72:
            c = rng.choice(world.clients)
            if c.stream is None:
                world.open(c)
            else:
                world.close(c)
        elif action < 0.87:
            c = rng.choice(world.clients)
            if c.stream is not None:
                c.stream.resume() if c.paused else c.stream.pause()
                c.paused = not c.paused
        elif action < 0.89:
            world.restart()
        world.run()
    for _ in range(10_000):
        if world.caught_up():
            break
        world.feed(100)
    for t, fed in world.fed.items():
        for p, at in enumerate(fed):
            world.server.topic(t).on_end(p, at)
    for c in world.clients:
        if c.stream is None:
            world.open(c)
        elif c.paused:
            c.stream.resume()
            c.paused = False
    for _ in range(200):
        world.run()
    return world


def check(world: World) -> None:
    for i, c in enumerate(world.clients):
        wanted = sorted((t, m[PARTITION], m[OFFSET]) for t in c.topics
                        for records in world.kafka.topics[t].records for m in records
                        if not c.filters or any(f.matches(m) for f in c.filters))
        got = c.got
        assert len(got) == len(set(got)), f"client {i} ({c.topics}) got a record twice"
        assert sorted(got) == wanted, \
            f"client {i} ({c.topics}, {c.filters}): missing {sorted(set(wanted) - set(got))[:5]}"
        for t in c.topics:
            for p in range(len(world.kafka.topics[t].records)):
                offsets = [o for q, r, o in got if (q, r) == (t, p)]
                assert offsets == sorted(offsets), f"client {i}: {t}/{p} out of order"


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32),
       partitions=st.tuples(st.integers(1, 3), st.integers(1, 3), st.integers(1, 3)),
       keys=st.sampled_from([2, 5, 12]), max_messages=st.sampled_from([8, 60, 100_000]),
       clients=st.integers(1, 12))
def test_every_client_gets_each_record_of_each_topic_once(
        seed: int, partitions: tuple[int, int, int], keys: int, max_messages: int,
        clients: int) -> None:
    world = simulate(seed, dict(zip(TOPICS, partitions, strict=True)), keys, max_messages,
                     clients, steps=100)
    check(world)
    for c in world.clients:
        world.close(c)
    for t in TOPICS:
        assert len(world.server.topic(t).tail) == 0, "a closed stream stayed at a tail"
