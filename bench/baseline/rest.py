"""The REST handler a team would write instead of http-kafka: the write benchmark's baseline.

    python bench/baseline/rest.py --bootstrap 127.0.0.1:9092 --port 8081 \
        --commands commands --replies replies

`POST /commands` writes the body to the commands topic (key: the `Idempotency-Key` header, or a
new UUID), waits for the broker's acknowledgement, then for the record on the replies topic that
carries the same `zilla:correlation-id`, and answers with its `:status`, `location` and value -
the request-reply that http-kafka's `reply-to` does, written the obvious way:

- Starlette under uvicorn (uvloop, httptools, access log off), as bench/baseline/app.py;
- one confluent-kafka `Producer` (idempotent, `linger.ms: 1`, as ssekd's), polled by a thread
  of its own that hands each delivery report to the event loop (`call_soon_threadsafe`), never
  a blocking `flush()` per request;
- one `Consumer` thread reading the replies topic from its end, which resolves the future of
  the request whose correlation id a reply carries (a dict look-up per reply);
- a reply not there within 30 s: `504`.

What it does not do, and ssekd does: recognise a repeated request (every POST writes), refuse
writes while the broker is down or too much is in flight (a request simply waits), If-Match,
async replies, HTTP/2, guards.
"""

from __future__ import annotations

import argparse
import asyncio
import threading
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from confluent_kafka import OFFSET_END, Consumer, Producer, TopicPartition
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

CORRELATION = "zilla:correlation-id"
REPLY_WAIT = 30.0


class Gateway:
    """The producer and the reply consumer, with the futures of the requests in flight."""

    def __init__(self, bootstrap: str, commands: str, replies: str) -> None:
        self.bootstrap, self.commands, self.replies = bootstrap, commands, replies
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1,
                                  "enable.idempotence": True, "log_level": 3})
        self.waiting: dict[bytes, asyncio.Future[Any]] = {}
        self.loop: asyncio.AbstractEventLoop | None = None
        self._stop = threading.Event()
        self._ready = threading.Event()

    def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        threading.Thread(target=self._poll, name="producer-poll", daemon=True).start()
        threading.Thread(target=self._replies, name="replies", daemon=True).start()
        self._ready.wait(20)

    def stop(self) -> None:
        self._stop.set()
        self.producer.flush(5)

    def _poll(self) -> None:
        while not self._stop.is_set():
            self.producer.poll(0.1)

    def _replies(self) -> None:
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "rest-baseline",
                             "enable.auto.commit": False, "fetch.wait.max.ms": 10,
                             "fetch.queue.backoff.ms": 5, "log_level": 3})
        meta = consumer.list_topics(self.replies, timeout=10).topics[self.replies]
        consumer.assign([TopicPartition(self.replies, p, OFFSET_END) for p in meta.partitions])
        self._ready.set()
        loop = self.loop
        assert loop is not None
        try:
            while not self._stop.is_set():
                first = consumer.poll(0.05)
                if first is None:
                    continue
                for m in [first, *consumer.consume(999, 0)]:
                    if m.error() is not None:
                        continue
                    correlation = next((v for n, v in m.headers() or () if n == CORRELATION),
                                       None)
                    if isinstance(correlation, bytes):
                        loop.call_soon_threadsafe(self._answered, correlation, m)
        finally:
            consumer.close()

    def _answered(self, correlation: bytes, reply: Any) -> None:
        future = self.waiting.pop(correlation, None)
        if future is not None and not future.done():
            future.set_result(reply)

    async def post(self, request: Request) -> Response:
        body = await request.body()
        key = request.headers.get("idempotency-key") or str(uuid.uuid4())
        correlation = uuid.uuid4().hex.encode()
        loop = asyncio.get_running_loop()
        reply: asyncio.Future[Any] = loop.create_future()
        delivered: asyncio.Future[Any] = loop.create_future()
        self.waiting[correlation] = reply  # before the write: the reply may be quick

        def report(error: Any, _: Any) -> None:  # producer-poll thread
            loop.call_soon_threadsafe(
                lambda: delivered.done() or delivered.set_result(error))

        self.producer.produce(self.commands, value=body, key=key.encode(),
                              headers=[(CORRELATION, correlation),
                                       ("zilla:reply-to", self.replies.encode())],
                              on_delivery=report)
        error = await delivered
        if error is not None:
            self.waiting.pop(correlation, None)
            return Response(str(error), status_code=503)
        try:
            answer = await asyncio.wait_for(reply, REPLY_WAIT)
        except TimeoutError:
            self.waiting.pop(correlation, None)
            return Response("no reply", status_code=504)
        headers = dict(answer.headers() or ())
        status = int(headers.get(":status", b"200"))
        out = {"location": headers["location"].decode()} if "location" in headers else {}
        return Response(answer.value() or b"", status_code=status, headers=out)


def make_app(bootstrap: str, commands: str, replies: str) -> Starlette:
    gateway = Gateway(bootstrap, commands, replies)

    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        gateway.start()
        yield
        gateway.stop()

    return Starlette(routes=[Route("/commands", gateway.post, methods=["POST"])],
                     lifespan=asynccontextmanager(lifespan))


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--port", type=int, default=8081)
    parser.add_argument("--commands", default="commands")
    parser.add_argument("--replies", default="replies")
    args = parser.parse_args()
    uvicorn.run(make_app(args.bootstrap, args.commands, args.replies), host="127.0.0.1",
                port=args.port, loop="uvloop", http="httptools", access_log=False,
                log_level="warning", backlog=16384)


if __name__ == "__main__":
    main()
