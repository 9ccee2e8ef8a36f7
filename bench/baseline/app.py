"""The Kafka-to-SSE bridge a team would write in an afternoon, tuned: the benchmarks' baseline.

Starlette's `StreamingResponse` under uvicorn (uvloop, httptools), one confluent-kafka consumer
per process in a thread of its own, and per connection a bounded `asyncio.Queue`:

- the consumer thread takes records in batches (`consume(1000)`), encodes each batch once as
  SSE bytes (`id:<partition>-<offset>` then `data:`), and hands it to the event loop with one
  `call_soon_threadsafe` per batch: per-record work stays in the thread, the loop only fans out;
- the loop appends the batch to the topic's ring buffer (the last `RING` events) and puts the
  same bytes object on every subscriber's queue; a full queue means the client is not reading:
  its stream ends (EventSource reconnects with its last id and resumes from the ring);
- a request with `Last-Event-ID` (header or `?lastEventId=`) gets what the ring holds after that
  id, then the live batches; an id the ring no longer holds starts at the oldest it has. A
  request without one gets the whole ring, like ssekd's cache replay, so both serve the same
  events in the benchmark;
- the topic is assigned from its beginning the first time a stream asks for it.

    python bench/baseline/app.py --bootstrap 127.0.0.1:9092 --port 8080
    curl -N http://127.0.0.1:8080/events/<topic>

README.md beside this file says how it was tuned.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import itertools
import queue
import threading
from collections.abc import AsyncIterator
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route

#: Events each topic's ring buffer keeps for resuming clients.
RING = 300_000
#: Batches a client's queue holds before its stream is ended as too slow.
QUEUE_BATCHES = 1024
#: Records per consume() call in the consumer thread.
BATCH = 1000

_END = object()  # put on a queue that overflowed: the stream ends


class Topic:
    """One topic's ring buffer and live subscribers (event loop only)."""

    def __init__(self) -> None:
        #: SSE bytes of each event, oldest first; `ids` alongside, `seq` counts every event
        self.ring: collections.deque[bytes] = collections.deque()
        self.ids: collections.deque[bytes] = collections.deque()
        self.index: dict[bytes, int] = {}
        self.seq = 0
        self.subscribers: set[asyncio.Queue[Any]] = set()

    def publish(self, events: list[tuple[bytes, bytes]], chunk: bytes) -> None:
        ring, ids, index = self.ring, self.ids, self.index
        seq = self.seq
        for eid, event in events:
            seq += 1
            ring.append(event)
            ids.append(eid)
            index[eid] = seq
        self.seq = seq
        while len(ring) > RING:
            ring.popleft()
            del index[ids.popleft()]
        for q in list(self.subscribers):
            try:
                q.put_nowait(chunk)
            except asyncio.QueueFull:
                self.subscribers.discard(q)
                q.get_nowait()  # make room for the end marker
                q.put_nowait(_END)

    def replay(self, last_id: bytes | None) -> bytes:
        """The ring's events after `last_id` (all of them when it is None or unknown)."""
        skip = 0
        if last_id is not None:
            seq = self.index.get(last_id)
            if seq is not None:
                skip = seq - (self.seq - len(self.ring))
        return b"".join(itertools.islice(self.ring, skip, None))


class Bridge:
    """The shared consumer thread and the topics it feeds."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.topics: dict[str, Topic] = {}
        self.loop: asyncio.AbstractEventLoop | None = None
        self._wanted: queue.Queue[str] = queue.Queue()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="baseline-consumer", daemon=True)

    def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def topic(self, name: str) -> Topic:
        t = self.topics.get(name)
        if t is None:
            t = self.topics[name] = Topic()
            self._wanted.put(name)
        return t

    def _run(self) -> None:
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "sse-baseline",
                             "enable.auto.commit": False, "enable.partition.eof": False,
                             "fetch.wait.max.ms": 10, "fetch.queue.backoff.ms": 5,
                             "queued.max.messages.kbytes": 16384, "log_level": 3})
        loop = self.loop
        assert loop is not None
        try:
            while not self._stop.is_set():
                while not self._wanted.empty():
                    name = self._wanted.get_nowait()
                    meta = consumer.list_topics(name, timeout=5)
                    parts = meta.topics[name].partitions
                    consumer.incremental_assign(
                        [TopicPartition(name, p, OFFSET_BEGINNING) for p in parts])
                # wait for the first record only: consume(BATCH, timeout) would hold the records
                # it has until BATCH arrived or the timeout passed, adding latency at low rates
                first = consumer.poll(0.05)
                if first is None:
                    continue
                records = [first, *consumer.consume(BATCH - 1, 0)]
                by_topic: dict[str, list[tuple[bytes, bytes]]] = {}
                for r in records:
                    if r.error() is not None:
                        if r.error().code() != KafkaError._PARTITION_EOF:
                            print("kafka:", r.error().str(), flush=True)
                        continue
                    eid = b"%d-%d" % (r.partition(), r.offset())
                    value = r.value() or b""
                    by_topic.setdefault(r.topic(), []).append(
                        (eid, b"id:" + eid + b"\ndata:" + value + b"\n\n"))
                for name, events in by_topic.items():
                    chunk = b"".join(e for _, e in events)
                    loop.call_soon_threadsafe(self.topics[name].publish, events, chunk)
        finally:
            consumer.close()


def create_app(bootstrap: str) -> Starlette:
    bridge = Bridge(bootstrap)

    async def events(request: Request) -> StreamingResponse:
        topic = bridge.topic(request.path_params["topic"])
        last = request.headers.get("last-event-id") or request.query_params.get("lastEventId")
        q: asyncio.Queue[Any] = asyncio.Queue(QUEUE_BATCHES)
        # replay and subscribe in one step of the loop: no batch can fall between them
        backlog = topic.replay(last.encode() if last else None)
        topic.subscribers.add(q)

        async def body() -> AsyncIterator[bytes]:
            try:
                yield b"retry:2000\n\n" + backlog
                while True:
                    chunk = await q.get()
                    if chunk is _END:
                        return
                    yield chunk
            finally:
                topic.subscribers.discard(q)

        return StreamingResponse(body(), media_type="text/event-stream",
                                 headers={"cache-control": "no-cache"})

    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        bridge.start()
        yield
        bridge.stop()

    from contextlib import asynccontextmanager
    return Starlette(routes=[Route("/events/{topic}", events)],
                     lifespan=asynccontextmanager(lifespan))


def main() -> None:
    import uvicorn

    global RING

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--ring", type=int, default=RING, help="events kept per topic")
    args = parser.parse_args()
    RING = args.ring
    uvicorn.run(create_app(args.bootstrap), host=args.host, port=args.port, loop="uvloop",
                http="httptools", access_log=False, log_level="warning", backlog=16384,
                timeout_keep_alive=5)


if __name__ == "__main__":
    main()
