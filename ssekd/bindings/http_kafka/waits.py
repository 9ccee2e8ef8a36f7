"""Waiting on a topic's cache without blocking: for the cache to load, for a reply, for a change.

Everything here runs on the reactor thread and waits through `TopicCache.watch` (told of each
batch the cache takes) and a timer of the injected clock; a wait is a Deferred whose
cancellation (the client went away) stops both.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar, runtime_checkable

from twisted.internet.defer import Deferred, succeed

from ssekd.bindings.kafka.cache import TopicCache
from ssekd.bindings.kafka.message import Message, header
from ssekd.bindings.kafka.producer import Delivered, Record

T = TypeVar("T")

#: Bytes of candidates one look-up of a correlation id reads at most.
_LOOKUP_BYTES = 1 << 20


@runtime_checkable
class KafkaExit(Protocol):
    """What http-kafka needs of its exit (a kafka cache_client or cache_server): the cache of
    a topic, shared with the sse-kafka streams, and writes through the kafka client."""

    def topic(self, name: str) -> TopicCache: ...

    def produce(self, record: Record, acks: str) -> Deferred[Delivered]: ...

    def warm(self, acks: str, topics: Sequence[str] = ()) -> None:
        """Make the producer for `acks`, and learn `topics`, ahead of the first write (when
        the binding starts)."""


def wait_for(cache: TopicCache, clock: Any, timeout: float,
             check: Callable[[list[Message]], T | None]) -> Deferred[T | None]:
    """`check(fresh)` after each change of `cache` until it answers something else than None;
    fires with that answer, or with None after `timeout` seconds. `check([])` is asked first."""
    now = check([])
    if now is not None or timeout <= 0:
        return succeed(now)
    stop: list[Callable[[], None]] = []
    timer: list[Any] = []

    def cancel(_: Deferred[T | None]) -> None:
        done()

    d: Deferred[T | None] = Deferred(canceller=cancel)

    def done() -> None:
        while stop:
            stop.pop()()
        while timer:
            t = timer.pop()
            if t.active():
                t.cancel()

    def changed(fresh: list[Message]) -> None:
        if d.called:
            return
        answer = check(fresh)
        if answer is not None:
            done()
            d.callback(answer)

    def expired() -> None:
        timer.clear()
        done()
        if not d.called:
            d.callback(None)

    stop.append(cache.watch(changed))
    timer.append(clock.callLater(timeout, expired))
    return d


def when_loaded(cache: TopicCache, clock: Any, timeout: float) -> Deferred[bool | None]:
    """True once the cache has read every partition of its topic to its end (now, or within
    `timeout` seconds), else None: only then is "not there" an answer."""
    return wait_for(cache, clock, timeout, lambda _: True if cache.log.loaded() else None)


class Replies:
    """The replies on one reply topic, by correlation id: found in the cache, or waited for.

    One watcher on the topic's cache serves every request waiting for a reply there, looking
    each new record's correlation header up in a dict, so a thousand waiting requests cost a
    dict look-up per record, not a thousand comparisons."""

    def __init__(self, cache: TopicCache, header: str, clock: Any) -> None:
        self.cache = cache
        self.header = header
        self.clock = clock
        self._waiting: dict[bytes, list[Deferred[Message | None]]] = {}
        self._stop: Callable[[], None] | None = None

    def find(self, correlation: str) -> Message | None:
        """The first reply the cache holds for `correlation`."""
        log = self.cache.log
        found, _, _ = log.candidates(((self.header, correlation.encode("utf-8")),),
                                     dict.fromkeys(log.partitions, 0), None, 1, _LOOKUP_BYTES)
        return found[0] if found else None

    def wait(self, correlation: str, timeout: float) -> Deferred[Message | None]:
        """The reply for `correlation`: the one held, or the first to come within `timeout`
        seconds (else None)."""
        held = self.find(correlation)
        if held is not None or timeout <= 0:
            return succeed(held)
        key = correlation.encode("utf-8")
        timer: list[Any] = []

        def cancel(d: Deferred[Message | None]) -> None:
            self._forget(key, d)
            if timer and timer[0].active():
                timer[0].cancel()

        d: Deferred[Message | None] = Deferred(canceller=cancel)

        def expired() -> None:
            self._forget(key, d)
            if not d.called:
                d.callback(None)

        self._waiting.setdefault(key, []).append(d)
        timer.append(self.clock.callLater(timeout, expired))
        d.addBoth(self._disarm, timer)
        if self._stop is None:
            self._stop = self.cache.watch(self._records)
        return d

    @staticmethod
    def _disarm(result: T, timer: list[Any]) -> T:
        if timer and timer[0].active():
            timer[0].cancel()
        return result

    def _records(self, fresh: list[Message]) -> None:
        waiting = self._waiting
        for m in fresh:
            value = header(m, self.header)
            if value is None:
                continue
            ds = waiting.pop(value, None)
            for d in ds or ():
                if not d.called:
                    d.callback(m)
        self._unwatch_if_idle()

    def _forget(self, key: bytes, d: Deferred[Message | None]) -> None:
        ds = self._waiting.get(key)
        if ds is not None and d in ds:
            ds.remove(d)
            if not ds:
                del self._waiting[key]
        self._unwatch_if_idle()

    def _unwatch_if_idle(self) -> None:
        if not self._waiting and self._stop is not None:
            stop, self._stop = self._stop, None
            stop()
