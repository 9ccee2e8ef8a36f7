"""Filtered streams at scale: thousands of streams on one topic, each with a filter of its own.

The shapes real users run are not one broadcast but a stream per item (`/items/{id}`, a key
filter from the path) or per user (a filter on the token's identity): thousands of distinct
filter groups on one topic. Starts its own broker (tansu) and daemon (`twistd -n ssekd`, with
workers: each process stays under this machine's open-file limit) on free ports.

1. `items`: a compacted topic of 50,000 keys (one record each), then 20,000 streams of one key
   each (`/items/<key>`) plus one unfiltered stream, while a producer updates random keys at
   1,000 records/s for 5 minutes. Every stream must get exactly its key's records, in order
   (the value carries the key's sequence number: its latest value when it opened, then every
   update); latency is the record's timestamp to its arrival, over every event of every key
   stream.
2. `users`: 10,000 streams behind a JWT guard, each filtered on its token's identity (a header
   filter, `${guarded['jwt0'].identity}`), while records for random users come at 1,000/s.
3. `curve`: how many records/s the daemon sustains against the number of distinct groups
   (100; 1,000; 10,000; 20,000 key streams, each beside the unfiltered one), with the same
   broadcast-only run (no key stream) beside it: the producer writes as fast as it can and the
   rate is what the unfiltered stream receives.
4. `group_bytes`: what one more filter group costs in memory, measured in-process with
   tracemalloc (the tail group, its index entries, the encoder and filter, the subscription;
   not the connection, which bench/workers.py measures).
5. `router`: the cache's cost per record at the tail, in-process (no sockets, no Kafka): one
   unfiltered stream beside 0 to 20,000 key streams over 50,000 keys, batches of 500 records.
6. `value`: the same for value filters (an ssekd addition): 1,000 streams over 100 distinct
   filters on the JSON value (two pointers), beside the same streams on key filters and no
   filtered stream at all. A value filter costs a record one JSON parse while any group has
   one, plus one lookup per distinct pointer: not a visit of every group.
7. `broker` (only when named): the users scenario's records read by a bare confluent-kafka
   consumer with the tail consumer's fetch settings, without ssekd, to tell the development
   broker's own latency from the daemon's (it grows with the topic's length: see README).

Prints a table and writes bench/results/filtered.json.

    python -m bench.filtered            # 2,000 / 1,000 streams, 30 s: a few minutes
    FULL=1 python -m bench.filtered     # the issue's sizes: 20,000 / 10,000 streams, 5 minutes
"""

from __future__ import annotations

import argparse
import gc
import json
import multiprocessing as mp
import os
import random
import select
import socket
import sys
import time
import tracemalloc
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import NewTopic
from cryptography.hazmat.primitives.asymmetric import ec

from bench.common import table, write_result
from bench.fanout import rig as fanout
from bench.jwt_guard import AUDIENCE, ISSUER, _jwk, _token
from tests.support import zilla_config as zc

#: Streams per load-client process (each stream is a socket: well under the fd limit).
PER_CLIENT = 5_000
#: Streams per daemon worker at most.
PER_WORKER = 12_000
#: The tail consumer's fetch settings as the benches run it (`fetch.wait.max.ms` from
#: tests/support/zilla_config.py's FAST_FETCH, the rest ssekd's defaults).
TAIL_FETCH = {"fetch.wait.max.ms": 10, "fetch.queue.backoff.ms": 5,
              "queued.max.messages.kbytes": 16384}

def config(jwk: dict[str, Any]) -> fanout.Config:
    """The bench's zilla.yaml for `fanout.Rig`: the fan-out config with room for 20,000 streams
    (from one address), the filtered routes, and `/mine` behind a JWT guard with the key
    `jwk`."""
    guarded = {"jwt0": ["read"]}

    def built(port: int, bootstrap: str, metrics_port: int) -> zc.Node:
        config = fanout.config(port, bootstrap, metrics_port)
        config["guards"] = {"jwt0": zc.jwt_guard(ISSUER, AUDIENCE, [jwk], challenge=30)}
        bindings = config["bindings"]
        bindings["tcp"]["options"]["limits"] = {"connections-per-ip": 20000}
        bindings["http"] = zc.http_server(
            authorization=zc.authorization(
                credentials={"query": {"access_token": "{credentials}"}}),
            routes=[zc.header_route("/mine", "sse", guarded=guarded),
                    zc.header_route("/*", "sse")])
        del bindings["http"]["exit"]
        bindings["sse"]["options"] = {"limits": {"streams": 20000}}
        bindings["sse_kafka"] = zc.sse_kafka([
            zc.sse_route("/items/{id}", "items", filters=[{"key": "${params.id}"}]),
            zc.sse_route("/keyed/{topic}/{id}", filters=[{"key": "${params.id}"}]),
            zc.sse_route("/mine", "activity", guarded=guarded,
                         filters=[{"headers": {"user": "${guarded['jwt0'].identity}"}}]),
            zc.sse_route("/events/{topic}")])
        return config
    return built


# -- load clients ---------------------------------------------------------------------------

class Streams:
    """Many SSE streams in one process, each checked event by event.

    Every value is `<name> <seq> <timestamp> <pad>`: a stream expects its own name and the seq
    after the last one it got, starting at 0 (a key's value when the stream opened, or a user's
    first record), so a missed, repeated or reordered record shows as a fault. Latency is taken
    on every event but the snapshot (seq 0 when `snapshot`: it was written before the stream
    opened).

    With `compacted`, the rule of a compacted topic (the curve's): a stream that fell behind
    (paused by its transport, then caught up from the cache) is owed each key's latest value,
    not every update, so a seq past the next one is not a fault but counts as `coalesced`; a
    repeated or older seq still is one, and `complete` still asks for the key's last seq.
    """

    def __init__(self, port: int, paths: list[str], names: list[str], snapshot: bool,
                 compacted: bool = False) -> None:
        self.names = names
        self.snapshot = snapshot
        self.compacted = compacted
        self.coalesced = 0  # updates a compacted stream skipped for a later value of its key
        self.next = [0] * len(paths)  # the seq each stream expects next
        self.faults = 0
        self.events = 0
        self.latencies: list[float] = []
        self.socks: list[socket.socket] = []
        self.bufs: list[bytes] = []
        self.headers_seen = [False] * len(paths)
        self.poll = select.epoll()
        self.by_fd: dict[int, int] = {}
        for i, path in enumerate(paths):
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall(f"GET {path} HTTP/1.1\r\nHost: b\r\n\r\n".encode())
            s.setblocking(False)
            self.socks.append(s)
            self.bufs.append(b"")
            self.by_fd[s.fileno()] = i
            self.poll.register(s.fileno(), select.EPOLLIN)

    def read(self, seconds: float) -> None:
        end = time.time() + seconds
        while time.time() < end:
            for fd, _ in self.poll.poll(0.01):
                i = self.by_fd[fd]
                try:
                    data = self.socks[i].recv(65536)
                except BlockingIOError:
                    continue
                if not data:
                    self.poll.unregister(fd)
                    self.faults += 1  # a stream must not end
                    continue
                self._take(i, self.bufs[i] + data)

    def _take(self, i: int, data: bytes) -> None:
        if not self.headers_seen[i]:
            head = data.find(b"\r\n\r\n")
            if head < 0:
                self.bufs[i] = data
                return
            self.headers_seen[i] = True
            data = data[head + 4:]
        whole = data.rfind(b"\n") + 1  # lines after it are not complete yet
        self.bufs[i] = data[whole:]
        now = time.time()
        for line in data[:whole].split(b"\n"):
            if not line.startswith(b"data:"):
                continue
            name, seq, ts, _ = line[5:].split(b" ", 3)
            n = int(seq)
            if name.decode() != self.names[i] or n < self.next[i] or (
                    n > self.next[i] and not self.compacted):
                self.faults += 1
            elif n > self.next[i]:
                self.coalesced += n - self.next[i]
            self.next[i] = n + 1
            self.events += 1
            if not (self.snapshot and seq == b"0"):
                self.latencies.append(now - float(ts))

    def complete(self, final: dict[str, int]) -> int:
        """Streams whose last seq is their name's last (no record for a name: none came)."""
        return sum(1 for i, n in enumerate(self.names) if self.next[i] == final.get(n, -1) + 1)


def _client(port: int, paths: list[str], names: list[str], snapshot: bool, ready: Any,
            control: Any, out: Any) -> None:
    """Open the streams (with `snapshot`, wait for each one's seq 0), read until told the last
    seq of every name and each stream has it (or the time given runs out), then report."""
    streams = Streams(port, paths, names, snapshot)
    started = time.time()
    while snapshot and min(streams.next) == 0 and time.time() - started < 600:
        streams.read(0.2)
    ready.put(len(paths))
    final: dict[str, int] | None = None
    deadline = float("inf")
    while final is None or (streams.complete(final) < len(paths) and time.time() < deadline):
        streams.read(0.2)
        if final is None and not control.empty():
            final, wait = control.get()
            deadline = time.time() + wait
    out.put({"streams": len(paths), "complete": streams.complete(final),
             "faults": streams.faults, "events": streams.events,
             "latencies": streams.latencies[::max(1, len(streams.latencies) // 20000)],
             "cpu": time.process_time()})
    for s in streams.socks:
        s.close()


def run_streams(rig: fanout.Rig, paths: list[str], names: list[str], snapshot: bool,
                produce: Any, wait: float = 300.0) -> dict[str, Any]:
    """Open `paths` over enough client processes (with `snapshot`, until each got its seq 0),
    run `produce()` -> {name: last seq}, then collect what every stream got."""
    ctx = mp.get_context("fork")
    chunks = [list(range(i, min(i + PER_CLIENT, len(paths))))
              for i in range(0, len(paths), PER_CLIENT)]
    ready: Any = ctx.Queue()
    out: Any = ctx.Queue()
    controls = [ctx.Queue() for _ in chunks]
    t0 = time.time()
    procs = [ctx.Process(target=_client, args=(rig.port, [paths[i] for i in c],
                                               [names[i] for i in c], snapshot, ready,
                                               controls[k], out))
             for k, c in enumerate(chunks)]
    for p in procs:
        p.start()
    for _ in procs:
        ready.get(timeout=900)
    opened = time.time() - t0
    time.sleep(1.0)
    rss0 = rig.rss()
    cpu0 = rig.cpu()
    t1 = time.time()
    last = produce()
    seconds = time.time() - t1
    cpu = rig.cpu() - cpu0
    for q in controls:
        q.put((last, wait))
    produced = time.time()
    results = [out.get(timeout=wait + 120) for _ in procs]
    # how long after the last record was written every stream had all of its records (or
    # the wait ran out): the broker's and the daemon's lag at the end of the run
    settled = time.time() - produced
    for p in procs:
        p.join(30)
    lat = sorted(x for r in results for x in r["latencies"])
    return {
        "streams": len(paths), "open_seconds": round(opened, 1),
        "complete": sum(r["complete"] for r in results),
        "faults": sum(r["faults"] for r in results),
        "events": sum(r["events"] for r in results),
        "produce_seconds": round(seconds, 1),
        "settle_seconds": round(settled, 1),
        "p50_ms": round(fanout.percentile(lat, 0.5) * 1000, 1),
        "p99_ms": round(fanout.percentile(lat, 0.99) * 1000, 1),
        "max_ms": round(max(lat, default=float("nan")) * 1000, 1),
        "daemon_cpu_pct": round(100 * cpu / seconds, 1),
        "rss_mib": round(rig.rss() / 2**20, 1),
        "rss_mib_before_producing": round(rss0 / 2**20, 1),
        "load_avg": round(os.getloadavg()[0], 2),
    }


# -- producing ------------------------------------------------------------------------------

def _value(name: str, seq: int) -> bytes:
    return b"%s %d %.6f " % (name.encode(), seq, time.time()) + b"x" * 60


def _producer(rig: fanout.Rig) -> Producer:
    return Producer({"bootstrap.servers": rig.broker.bootstrap, "linger.ms": 2,
                     "enable.idempotence": True})


def _send(p: Producer, topic: str, key: str, value: bytes,
          headers: list[tuple[str, bytes]] | None = None) -> None:
    while True:
        try:
            p.produce(topic, value, key=key.encode(), headers=headers)
            return
        except BufferError:
            p.poll(0.05)


def paced(p: Producer, rate: float, seconds: float, one: Any) -> None:
    start = time.time()
    sent = 0
    while (elapsed := time.time() - start) < seconds:
        due = int(elapsed * rate) + 1
        while sent < due:
            one()
            sent += 1
        p.poll(0)
        time.sleep(0.002)
    p.flush(60)


def compacted_topic(rig: fanout.Rig, name: str, keys: int) -> dict[str, int]:
    rig.admin.create_topics([NewTopic(name, 4, 1, config={"cleanup.policy": "compact"})]
                            )[name].result(10)
    p = _producer(rig)
    for k in range(keys):
        _send(p, name, f"item-{k}", _value(f"item-{k}", 0))
        if k % 5000 == 0:
            p.poll(0)
    p.flush(120)
    return {f"item-{k}": 0 for k in range(keys)}


# -- scenarios --------------------------------------------------------------------------------

def items(rig: fanout.Rig, streams: int, keys: int, rate: float, seconds: float,
          with_broadcast: bool = True) -> dict[str, Any]:
    """`streams` key streams (distinct keys) and one unfiltered stream on a compacted topic of
    `keys` keys, while random keys are updated at `rate`/s for `seconds`."""
    last = compacted_topic(rig, "items", keys)
    chosen = random.Random(7).sample(range(keys), streams)
    paths = [f"/items/item-{k}" for k in chosen]
    names = [f"item-{k}" for k in chosen]
    p = _producer(rig)
    rng = random.Random(11)

    def one() -> None:
        name = f"item-{rng.randrange(keys)}"
        last[name] += 1
        _send(p, "items", name, _value(name, last[name]))

    result = run_streams(rig, paths, names, True,
                         lambda: (paced(p, rate, seconds, one), last)[1])
    result["keys"] = keys
    result["rate"] = rate
    result["updates"] = sum(last.values())
    return result


def users(rig: fanout.Rig, streams: int, rate: float, seconds: float,
          private: Any) -> dict[str, Any]:
    """`streams` JWT-guarded streams, each filtered on its token's identity (a header), while
    records for random users come at `rate`/s."""
    rig.admin.create_topics([NewTopic("activity", 4, 1)])["activity"].result(10)
    names = [f"user-{i}" for i in range(streams)]
    tokens = [_token(private, "ES256", "bench", 3600, sub=n) for n in names]
    paths = [f"/mine?access_token={t}" for t in tokens]
    last = {n: -1 for n in names}
    p = _producer(rig)
    rng = random.Random(13)

    def one() -> None:
        name = names[rng.randrange(streams)]
        last[name] += 1
        # keyed by user: one partition per user, so a user's records keep their order
        _send(p, "activity", name, _value(name, last[name]), [("user", name.encode())])

    result = run_streams(rig, paths, names, False,
                         lambda: (paced(p, rate, seconds, one),
                                  {n: s for n, s in last.items() if s >= 0})[1])
    result["rate"] = rate
    return result


def curve_point(rig: fanout.Rig, groups: int, keys: int, records: int) -> dict[str, Any]:
    """`groups` key streams and the unfiltered stream on a topic of `keys` keys; the producer
    writes `records` updates as fast as it can; records/s is `records` over the time from the
    first update to the last one arriving on the unfiltered stream.

    The topic is compacted, so a stream that falls behind (its client reads slower than the
    daemon writes, and the transport pauses it) is not owed every update: when it catches up
    it gets each key's latest value from where it was (as a consumer of a compacted topic
    would). The run is over when the last update arrives; `received` says how many of the
    updates the stream got on the way."""
    topic = f"curve-{groups}-{time.monotonic_ns()}"
    compacted_topic(rig, topic, keys)
    chosen = random.Random(groups).sample(range(keys), groups)
    ctx = mp.get_context("fork")
    ready: Any = ctx.Queue()
    out: Any = ctx.Queue()
    chunks = [chosen[i:i + PER_CLIENT] for i in range(0, len(chosen), PER_CLIENT)]
    # the key streams only hold their connections here (their delivery is `items`' check);
    # the unfiltered stream times the run
    holders = [ctx.Process(target=_hold, args=(rig.port,
                                               [f"/keyed/{topic}/item-{k}" for k in c],
                                               ready, out))
               for c in chunks]
    for h in holders:
        h.start()
    for _ in holders:
        ready.get(timeout=600)
    sock = socket.create_connection(("127.0.0.1", rig.port))
    sock.sendall(f"GET /events/{topic} HTTP/1.1\r\nHost: b\r\n\r\n".encode())
    got = _count(sock, keys, 120)  # the snapshot: one record per key
    assert got >= keys, f"the unfiltered stream got {got} of {keys} snapshot records"
    time.sleep(1.0)
    cpu0 = rig.cpu()
    p = _producer(rig)
    rng = random.Random(5)
    t0 = time.time()
    for i in range(records):
        name = f"item-{rng.randrange(keys)}"
        _send(p, topic, name, _value(name, 1 + i))
        if i % 2000 == 0:
            p.poll(0)
    p.flush(120)
    produced = time.time() - t0
    got, reached = _until(sock, b" %d " % records, 300)
    elapsed = time.time() - t0
    assert reached, f"the last update did not reach the unfiltered stream ({got} events came)"
    cpu = rig.cpu() - cpu0
    sock.close()
    for _ in holders:
        out.put(None)
    for h in holders:
        h.join(60)
    return {"groups": groups, "records": records, "received": got,
            "records_per_s": round(records / elapsed), "produce_per_s": round(records / produced),
            "daemon_cpu_s": round(cpu, 2),
            # every worker's cache takes every record: the cost of one record in one process
            "cpu_us_per_record": round(cpu * 1e6 / (records * max(1, len(rig.ssekd.processes()) - 1)), 2),
            "load_avg": round(os.getloadavg()[0], 2)}


def _hold(port: int, paths: list[str], ready: Any, done: Any) -> None:
    socks = []
    for path in paths:
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: b\r\n\r\n".encode())
        socks.append(s)
    ready.put(len(socks))
    poll = select.epoll()
    for s in socks:
        s.setblocking(False)
        poll.register(s.fileno(), select.EPOLLIN)
    by_fd = {s.fileno(): s for s in socks}
    while True:  # drain (a stream that is not read would pause its subscription)
        for fd, _ in poll.poll(0.1):
            try:
                by_fd[fd].recv(65536)
            except BlockingIOError:
                pass
        if not done.empty():
            break
    for s in socks:
        s.close()


def _until(sock: socket.socket, mark: bytes, timeout: float) -> tuple[int, bool]:
    """Read a stream until an event whose data holds `mark` came (or `timeout` seconds
    passed); return the events counted and whether it came."""
    sock.settimeout(1.0)
    got = 0
    rest = b""
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            data = sock.recv(1 << 20)
        except TimeoutError:
            continue
        if not data:
            break
        data = rest + data
        whole = data.rfind(b"\n") + 1
        rest = data[whole:]
        lines = data[:whole]
        got += lines.count(b"data:")
        for line in lines.split(b"\n"):
            if line.startswith(b"data:") and mark in line:
                return got, True
    return got, False


def _count(sock: socket.socket, n: int, timeout: float) -> int:
    """Read a stream until `n` events came (or `timeout` seconds passed); return the count."""
    sock.settimeout(1.0)
    got = 0
    tail = b""
    deadline = time.time() + timeout
    while got < n and time.time() < deadline:
        try:
            data = sock.recv(1 << 20)
        except TimeoutError:
            continue
        if not data:
            break
        got += (tail + data).count(b"\ndata:")
        tail = data[-6:]
    return got


def _paced_users(bootstrap: str, rate: float, seconds: float) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 2, "enable.idempotence": True})
    n = 0

    def one() -> None:
        nonlocal n
        name = f"user-{n % 10_000}"
        n += 1
        _send(p, "activity", name, _value(name, n), [("user", name.encode())])

    paced(p, rate, seconds, one)


def broker_alone(rate: float, seconds: float, every: float = 15.0,
                 fetch: dict[str, Any] | None = None,
                 partitions: int = 4) -> list[dict[str, Any]]:
    """The users scenario's records read by a bare confluent-kafka consumer with the tail
    consumer's fetch settings (or `fetch`: librdkafka properties in their place), no ssekd:
    how the development broker itself serves a topic of `partitions` that grows at `rate` for
    `seconds` (p99 of write-to-read latency per `every` seconds)."""
    from confluent_kafka import Consumer, TopicPartition

    from ssekd.dev.broker import start_broker
    broker = start_broker()
    try:
        admin = fanout.AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("activity", partitions, 1)])["activity"].result(10)
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "bench",
                             "enable.auto.commit": False, "enable.partition.eof": True,
                             **(fetch if fetch is not None else TAIL_FETCH)})
        consumer.assign([TopicPartition("activity", p, 0) for p in range(partitions)])
        producer = mp.get_context("fork").Process(target=_paced_users,
                                                  args=(broker.bootstrap, rate, seconds))
        producer.start()
        rows: list[dict[str, Any]] = []
        got = 0
        lat: list[float] = []
        t0 = mark = time.time()
        while time.time() - t0 < seconds + every:
            first = consumer.poll(0.1)
            if first is not None:
                now = time.time()
                for m in [first, *consumer.consume(1000, 0)]:
                    if m.error() is None:
                        got += 1
                        lat.append(now - float(m.value().split(b" ")[2]))
            if time.time() - mark >= every:
                mark = time.time()
                lat.sort()
                rows.append({"seconds": round(mark - t0), "received": got,
                             "written": min(int((mark - t0) * rate), int(seconds * rate)),
                             "p99_ms": round(fanout.percentile(lat, 0.99) * 1000, 1) if lat else None})
                lat = []
        producer.join(60)
        consumer.close()
        return rows
    finally:
        broker.stop()


class _Nothing:
    """The kafka client and the stream sink of an in-process cache: they take and drop."""

    def consume(self, *a: Any, **kw: Any) -> None:
        pass

    def write(self, data: bytes) -> None:
        pass

    def end(self) -> None:
        pass


def _in_process(groups: int, max_messages: int = 100_000) -> tuple[Any, Any]:
    """A topic's cache on a MemoryReactorClock (4 partitions, at their end) with one unfiltered
    stream and `groups` streams of distinct keys (`item-<n>`) at its tail: (clock, cache)."""
    from twisted.internet.testing import MemoryReactorClock

    from ssekd.bindings.kafka.cache import CacheServer
    from ssekd.bindings.kafka.start import Start
    from ssekd.bindings.kafka.topic_log import CacheBounds
    from ssekd.bindings.sse_kafka.encoder import Filter, KafkaEventEncoder
    from ssekd.telemetry.events import EventLog
    from ssekd.telemetry.metrics import Counter

    clock = MemoryReactorClock()
    server = CacheServer(clock, _Nothing(), "c", EventLog("b"),  # type: ignore[arg-type]
                         bounds=CacheBounds(max_messages=max_messages))
    cache = server.topic("t")
    cache.on_metadata(4, False)
    for p in range(4):
        cache.on_end(p, 0)
    counter = Counter()  # one per topic, as sse-kafka's metrics give
    cache.subscribe(KafkaEventEncoder("t"), _Nothing(), Start())
    for g in range(groups):
        cache.subscribe(KafkaEventEncoder("t", (Filter(key=b"item-%d" % g),), filtered=counter),
                        _Nothing(), Start())
    while clock.getDelayedCalls():
        clock.advance(0)
    return clock, cache


def group_bytes(groups: int = 10_000) -> dict[str, Any]:
    """Memory per filter group, in-process: `groups` streams of distinct keys at the tail of
    one topic (router, index, encoder, filter, subscription; no connection)."""
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    _, cache = _in_process(groups)
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    assert len(cache.groups) == groups + 1
    return {"groups": groups, "bytes_per_group": round((after - before) / groups)}


def router_cost(groups: tuple[int, ...] = (0, 100, 1_000, 10_000, 20_000),
                records: int = 100_000) -> list[dict[str, Any]]:
    """Microseconds per record for the cache to take a batch at the tail and hand it to the
    groups that take its records, in-process, against the number of key groups."""
    from ssekd.bindings.kafka.message import new_message

    # keys to partitions as a producer's hash would; a fetch brings each partition's records
    # together, so each batch of 500 holds four runs, one per partition
    out = []
    keys = [i * 7919 % 50_000 for i in range(records)]
    nxt = [0] * 4
    batch = []
    for start in range(0, records, 500):
        for p in range(4):
            for k in keys[start:start + 500]:
                if k % 4 == p:
                    batch.append(new_message(p, nxt[p], b"item-%d" % k, b"%d " % k + b"x" * 60))
                    nxt[p] += 1
    for n in groups:
        _, cache = _in_process(n, max_messages=50_000)
        t0 = time.perf_counter()
        for i in range(0, records, 500):
            cache.on_records(batch[i:i + 500])
        out.append({"groups": n,
                    "us_per_record": round((time.perf_counter() - t0) / records * 1e6, 2)})
    return out


def value_cost(records: int = 50_000) -> list[dict[str, Any]]:
    """CPU microseconds per record for the cache to route a batch at the tail to 1,000 streams
    over 100 distinct value filters (10 streams each), in-process, beside the same streams on
    key filters and no stream at all (best of 3): what a JSON value filter costs a record."""
    from ssekd.bindings.kafka.message import PARTITION, new_message
    from ssekd.bindings.kafka.start import Start
    from ssekd.bindings.sse_kafka.encoder import Filter, KafkaEventEncoder
    from ssekd.bindings.sse_kafka.proxy import value_conditions
    from ssekd.telemetry.metrics import Counter

    rng = random.Random(3)
    batch = []
    nxt = [0] * 4
    for i in range(records):
        p = i % 4
        # the same item as key and as the value's owner: key filters and value filters take
        # the same records (a tenth of them), so the difference is what reading JSON costs
        n = rng.randrange(1_000)
        doc = {"id": i, "owner": f"user-{n}", "status": rng.choice(["open", "closed", "held"]),
               "region": rng.choice(["eu", "us", "ap"]), "pad": "x" * 40}
        batch.append(new_message(p, nxt[p], b"user-%d" % n, json.dumps(doc).encode()))
        nxt[p] += 1
    batch.sort(key=lambda m: m[PARTITION])  # a fetch brings each partition's records together

    def filters(kind: str, n: int) -> tuple[Any, ...]:
        if kind == "key":
            return (Filter(key=b"user-%d" % n),)
        # 100 distinct filters over two pointers: 80 on the owner, 20 on owner and status
        spec: dict[str, Any] = {"/owner": f"user-{n}"}
        if n % 5 == 0:
            spec["/status"] = ["open", "closed", "held"]
        return (Filter(values=value_conditions(spec, str)),)

    def once(kind: str) -> float:
        _, cache = _in_process(0, max_messages=50_000)
        counter, not_json = Counter(), Counter()
        if kind != "none":
            for n in range(100):
                encoder = KafkaEventEncoder("t", filters(kind, n), filtered=counter,
                                            not_json=not_json)
                for _ in range(10):
                    cache.subscribe(encoder, _Nothing(), Start())
        clock = cache.reactor
        while clock.getDelayedCalls():
            clock.advance(0)
        t0 = time.process_time()  # CPU time: the machine may be shared
        for i in range(0, records, 500):
            cache.on_records(batch[i:i + 500])
        return (time.process_time() - t0) / records * 1e6

    # best of 3 per kind, interleaved
    best: dict[str, float] = {}
    for _ in range(3):
        for kind in ("none", "key", "value"):
            us = once(kind)
            best[kind] = min(best.get(kind, us), us)
    return [{"filters": kind, "streams": 1 + (1000 if kind != "none" else 0),
             "us_per_record": round(best[kind], 2)} for kind in ("none", "key", "value")]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", action="append",
                        choices=["items", "users", "curve", "group_bytes", "router", "value",
                                 "broker"])
    parser.add_argument("--broker-fetch", type=json.loads, metavar="JSON",
                        help="`broker`: librdkafka properties in place of the tail consumer's "
                             "fetch settings, e.g. '{}' for librdkafka's defaults")
    parser.add_argument("--broker-partitions", type=int, default=4,
                        help="`broker`: the topic's partitions (4)")
    args = parser.parse_args(argv)
    full = bool(os.environ.get("FULL")) and not args.quick
    only = set(args.only or ["items", "users", "curve", "group_bytes", "router", "value"])
    seconds = 300 if full else 30
    results: dict[str, Any] = {"full": full}
    private = ec.generate_private_key(ec.SECP256R1())
    jwk = _jwk(private, "ES256", "bench")
    if "group_bytes" in only:
        results["group_bytes"] = group_bytes()
    if "router" in only:
        results["router"] = router_cost()
    if "value" in only:
        results["value"] = value_cost()
    if "items" in only:
        n = 20_000 if full else 2_000
        rig = fanout.Rig(config(jwk), workers=max(1, -(-n // PER_WORKER)))
        try:
            results["items"] = items(rig, n, 50_000, 1000, seconds)
        finally:
            rig.close()
    if "users" in only:
        n = 10_000 if full else 1_000
        rig = fanout.Rig(config(jwk),
                         workers=max(1, -(-n // PER_WORKER)))
        try:
            results["users"] = users(rig, n, 1000, seconds, private)
        finally:
            rig.close()
    if "broker" in only:  # asked by name: the development broker alone, no ssekd
        results["broker_alone"] = broker_alone(1000, seconds, fetch=args.broker_fetch,
                                               partitions=args.broker_partitions)
        results["broker_settings"] = {"fetch": args.broker_fetch or TAIL_FETCH,
                                      "partitions": args.broker_partitions}
    if "curve" in only:
        points = [0, 100, 1_000, 10_000, 20_000] if full else [0, 100, 1_000, 2_000]
        records = 200_000 if full else 50_000
        results["curve"] = []
        for groups in points:
            rig = fanout.Rig(config(jwk), workers=2)
            try:
                results["curve"].append(curve_point(rig, groups, 50_000, records))
            finally:
                rig.close()
    path = write_result("filtered", results)
    print_table(results)
    print(f"\nwritten to {path}")
    return 0


def print_table(r: dict[str, Any]) -> None:
    rows = []
    for name in ("items", "users"):
        x = r.get(name)
        if x:
            rows.append([name, x["streams"], f"{x['complete']}/{x['streams']}", x["faults"],
                         x["events"], x["p50_ms"], x["p99_ms"], x["daemon_cpu_pct"],
                         x["rss_mib"], x["open_seconds"]])
    if rows:
        print(table("filtered streams (every stream checked event by event)",
                    ["scenario", "streams", "complete", "faults", "events", "p50 ms", "p99 ms",
                     "daemon CPU %", "RSS MiB", "open s"], rows))
    if r.get("curve"):
        print()
        print(table("sustained records/s against distinct filter groups (0 = broadcast only)",
                    ["groups", "records/s", "produced/s", "events on the stream",
                     "daemon CPU s", "CPU µs/record", "load"],
                    [[c["groups"], c["records_per_s"], c["produce_per_s"],
                      f"{c['received']:,}/{c['records']:,}", c["daemon_cpu_s"],
                      c["cpu_us_per_record"], c["load_avg"]] for c in r["curve"]]))
    if r.get("broker_alone"):
        print()
        print(table("the development broker alone: the users records read by a bare consumer "
                    "with the tail consumer's fetch settings",
                    ["seconds", "written", "received", "p99 ms (last interval)"],
                    [[x["seconds"], x["written"], x["received"], x["p99_ms"]]
                     for x in r["broker_alone"]]))
    if r.get("router"):
        print()
        print(table("the cache's cost per record at the tail (in-process, one unfiltered stream "
                    "beside the key streams)", ["key groups", "µs/record"],
                    [[x["groups"], x["us_per_record"]] for x in r["router"]]))
    if r.get("value"):
        print()
        print(table("value filters at the tail: 1,000 streams over 100 distinct filters "
                    "(in-process, beside the unfiltered stream)", ["filters", "streams",
                                                                  "CPU µs/record"],
                    [[x["filters"], x["streams"], x["us_per_record"]] for x in r["value"]]))
    if r.get("group_bytes"):
        g = r["group_bytes"]
        print(f"\nmemory per filter group: {g['bytes_per_group']} bytes "
              f"({g['groups']:,} groups, in-process, no connection)")


if __name__ == "__main__":
    sys.exit(main())
