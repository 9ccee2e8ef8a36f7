"""The history consumer: the thread of a kafka client that serves one-off reads of offsets
older than the cache, each bounded in bytes. At most `max_history_reads` wait for it at once
(`KafkaClient.fetch`), and a stream that finds them all taken is told `HistoryBusy` and asks
again a little later (it waits without a queue that could grow with the number of streams). Its
consumer is closed once idle (`HISTORY_IDLE`): it would hold a connection, and retry it.
"""

from __future__ import annotations

import queue
import time
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, TopicPartition
from twisted.internet.defer import Deferred

from ssekd.bindings.kafka.consumer_thread import ClientContext, ConsumerThread
from ssekd.bindings.kafka.librdkafka import LibrdkafkaLog, close_consumer
from ssekd.bindings.kafka.message import OFFSET, SIZE, Message, from_confluent, within_bytes

#: Seconds a history consumer stays open without a request (it holds a connection).
HISTORY_IDLE = 30.0


class HistoryBusy(Exception):
    """Every history read slot is taken: the stream asks again later, nothing was queued."""


@dataclass
class FetchResult:
    """Records of one partition from `offset` on; `end` is the partition's end when reached
    (None when the read stopped for time or an error, so the caller must not skip ahead)."""

    records: list[Message]
    end: int | None
    error: str | None = None


@dataclass
class FetchRequest:
    """A history read waiting for the history thread (`KafkaClient.fetch`): `deferred` fires on
    the reactor thread with its `FetchResult`."""

    topic: str
    partition: int
    offset: int
    limit: int
    max_bytes: int
    deferred: Deferred[FetchResult]


class HistoryFetcher(ConsumerThread):
    """Owns the consumer that reads offsets older than the cache, one request at a time.

    Consecutive requests that continue where the last one stopped keep the assignment, so
    librdkafka's prefetch carries a long catch-up along without a seek per request. A request
    stops at its byte budget; records librdkafka already handed over past it are kept for the
    request that continues there (a seek otherwise), so the position stays exact.
    """

    #: Longest a request waits for records before answering with what it has (end=None).
    WAIT = 2.0

    def __init__(self, client: ClientContext) -> None:
        super().__init__(client, "history")
        self.requests: queue.Queue[FetchRequest | None] = queue.Queue()

    def stop(self) -> None:
        super().stop()
        self.requests.put(None)

    def run(self) -> None:
        client = self.client
        conf = client.settings.consumer_config(f"ssekd-{client.binding}-history")
        conf["logger"] = LibrdkafkaLog(client.event)
        consumer: Any = None
        current: _Position | None = None
        try:
            while not self.stopping.is_set():
                try:
                    req = self.requests.get(timeout=HISTORY_IDLE)
                except queue.Empty:
                    if consumer is not None:  # idle: no connection held (and retried) for it
                        close_consumer(consumer)
                        consumer, current = None, None
                    continue
                if req is None:
                    break
                if consumer is None:
                    consumer = Consumer(conf)
                try:
                    result, current = self._serve(consumer, req, current)
                except Exception as e:  # noqa: BLE001 - one failed read must not end the thread
                    result, current = FetchResult([], None, str(e)), None
                client.reactor.callFromThread(req.deferred.callback, result)
        finally:
            if consumer is not None:
                close_consumer(consumer)

    def _serve(self, consumer: Any, req: FetchRequest, current: _Position | None
               ) -> tuple[FetchResult, _Position | None]:
        got: list[Message] = []
        end: int | None = None
        if current is not None and current.at == (req.topic, req.partition, req.offset):
            got, end = current.leftover, current.end
        else:
            consumer.assign([TopicPartition(req.topic, req.partition, req.offset)])
        error: str | None = None
        size = sum(m[SIZE] for m in got)
        deadline = time.monotonic() + self.WAIT
        while (end is None and error is None and len(got) < req.limit and size < req.max_bytes
               and time.monotonic() < deadline and not self.stopping.is_set()):
            r = consumer.poll(0.05)
            if r is None:
                continue
            for rec in [r, *consumer.consume(req.limit - len(got), 0)]:
                e = rec.error()
                if e is not None:
                    if e.code() == KafkaError._PARTITION_EOF:
                        end = rec.offset()
                    else:
                        error = e.str()
                    continue
                if (rec.partition() == req.partition and rec.topic() == req.topic
                        and rec.offset() >= req.offset):
                    m = from_confluent(rec)
                    got.append(m)
                    size += m[SIZE]
        taken = within_bytes(got[:req.limit], req.max_bytes)
        rest = got[len(taken):]
        if error is not None or not taken:
            # after an end-of-partition (or nothing) librdkafka will not say "end" again for
            # this assignment: seek afresh next time
            return FetchResult(taken, None if rest else end, error), None
        if rest or end is None:
            return FetchResult(taken, None), _Position(
                (req.topic, req.partition, taken[-1][OFFSET] + 1), rest, end)
        return FetchResult(taken, end), None


@dataclass
class _Position:
    """Where the history consumer stands: the next offset it will hand over for (topic,
    partition), with the records it already took from librdkafka beyond the last answer."""

    at: tuple[str, int, int]
    leftover: list[Message]
    #: The partition's end, when librdkafka said so while handing over the leftover.
    end: int | None
