"""The record gate: a topic's model checks each record once, as it enters the cache.

`TopicCache` hands every batch from the tail consumer (and every end-of-partition mark) to its
gate when the topic has a model (cache_server `topics[].value`/`key`). The gate passes on the
records that satisfy the model (Avro turned into JSON when asked), in order, and drops the
others: they are never in the cache, so no stream - at the tail, catching up, or resuming - can
see one, and the check costs once per record however many streams read the topic.

Ids stay exact without the skipped records: an event id holds, per partition, the next offset to
read, so the event after a skipped record carries an offset past it, and a stream resuming from
an id before it reads on from there and finds it gone from the cache. Records read back from
Kafka for a stream older than the cache pass the same model (`check_history`); a read whose
records all fail is followed by the next one, so such a stream moves past them instead of
asking for the same records again.

A record whose schema is not held yet (the registry is fetching a new id, or is down) holds the
gate: it and every batch and end mark after it wait, in order, until the schema comes or the
catalog says there is none. Each skipped record is counted (`kafka.cache.invalid`) and reported
by a `BINDING_KAFKA_RECORD_INVALID` event with topic, partition, offset and the error - at most
one event per topic per second, the rest counted in the next one.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

from twisted.internet.defer import Deferred

from ssekd.bindings.kafka.history import FetchResult
from ssekd.bindings.kafka.message import KEY, OFFSET, PARTITION, VALUE, Message, with_value
from ssekd.catalogs.models import Invalid, Pending, TopicModel
from ssekd.telemetry.metrics import Counter

#: Seconds between two invalid-record events of one topic.
REPORT_INTERVAL = 1.0


class InvalidReport:
    """Counts invalid records and reports them, at most one event per `REPORT_INTERVAL`."""

    def __init__(self, topic: str, clock: Any, emit: Callable[[str, str], None],
                 counter: Counter) -> None:
        self.topic = topic
        self.clock = clock
        self.emit = emit
        self.counter = counter
        self._last = float("-inf")
        self._held_back = 0

    def invalid(self, m: Message, error: str) -> None:
        self.counter.value += 1
        now = self.clock.seconds()
        if now - self._last < REPORT_INTERVAL:
            self._held_back += 1
            return
        more = f" ({self._held_back} more invalid since the last report)" \
            if self._held_back else ""
        self._last, self._held_back = now, 0
        self.emit("BINDING_KAFKA_RECORD_INVALID",
                  f"{self.topic} partition {m[PARTITION]} offset {m[OFFSET]}: {error}{more}")


class RecordGate:
    """Between a topic's tail consumer and its cache: see the module."""

    def __init__(self, model: TopicModel, report: InvalidReport,
                 append: Callable[[list[Message]], None]) -> None:
        self.model = model
        self.report = report
        self._append = append
        #: Work in order: a [batch, next index, passed] list, or a call that must come after
        #: the records before it (an end of partition, a rewind): (function, partition, offset).
        self._queue: deque[list[Any] | tuple[Callable[[int, int], None], int, int]] = deque()
        self._waiting = False

    @property
    def ready(self) -> bool:
        """Whether streams can be served: the model's schemas are held."""
        return self.model.ready

    def records(self, batch: list[Message]) -> None:
        self._queue.append([batch, 0, []])
        self._drain()

    def then(self, call: Callable[[int, int], None], partition: int, offset: int) -> None:
        """`call(partition, offset)` once the records handed in before it have passed."""
        self._queue.append((call, partition, offset))
        self._drain()

    def _drain(self) -> None:
        queue, check = self._queue, self.model.check
        while queue and not self._waiting:
            item = queue[0]
            if isinstance(item, tuple):
                queue.popleft()
                call, partition, offset = item
                call(partition, offset)
                continue
            batch, i, passed = item
            n = len(batch)
            while i < n:
                m = batch[i]
                try:
                    key, value = check(m[KEY], m[VALUE])
                except Invalid as e:
                    self.report.invalid(m, str(e))
                except Pending as p:
                    item[1] = i
                    self._waiting = True
                    p.ready.addBoth(self._resume)
                    return
                else:
                    passed.append(m if value is m[VALUE] else with_value(m, value))
                i += 1
            queue.popleft()
            if passed:
                self._append(passed)

    def _resume(self, _: Any) -> None:
        self._waiting = False
        self._drain()

    # -- records read back from Kafka -------------------------------------------------------

    def check_history(self, result: FetchResult,
                      refetch: Callable[[int], Deferred[FetchResult]]) -> Deferred[FetchResult]:
        """`result` with the records that pass; when none does, the read after them instead.
        Invalid ones are not counted again (the tail counted them, or they predate it)."""
        passed: list[Message] = []
        records = result.records
        done: Deferred[FetchResult] = Deferred()

        def go(i: int) -> None:
            while i < len(records):
                m = records[i]
                try:
                    key, value = self.model.check(m[KEY], m[VALUE])
                except Invalid:
                    pass
                except Pending as p:
                    at = i
                    p.ready.addBoth(lambda _: go(at))  # noqa: B023 (the loop ends here)
                    return
                else:
                    passed.append(m if value is m[VALUE] else with_value(m, value))
                i += 1
            if passed or not records:
                done.callback(FetchResult(passed, result.end, result.error))
            else:
                refetch(records[-1][OFFSET] + 1).chainDeferred(done)

        go(0)
        return done

