"""Which topics the cluster has, as the write path must know before it produces.

Left to itself, librdkafka handles a record for a topic it has not seen in one of two ways, and
neither is what a client of http-kafka should get:

- with `allow.auto.create.topics` on (a producer's default) its metadata request asks the broker
  to create the topic, and a broker with `auto.create.topics.enable` (Kafka's default, and the
  development broker's) does: every made-up name a client POSTs becomes a topic;
- with it off (ssekd's producers always have it off) the record waits for the topic to appear
  until `message.timeout.ms`, and the client gets a `503` long after, for a topic that will
  never be there.

So a record waits here first. A topic the cluster was seen to have within `known_for` seconds
goes straight to the producer; any other is looked up - one metadata request for that topic,
which never creates it - on a thread of its own (the reactor never waits on the network), and
the writes waiting for it go on in the order they came, or fail as `missing`. A topic found
missing is answered missing for `missing_for` seconds without asking again, so a flood of
requests for one made-up name costs one lookup a second. What the table holds is bounded:
`max_remembered` topics (the oldest forgotten first) and `max_lookups` lookups waiting at once
(a flood of different made-up names is refused for now, not queued without end).
"""

from __future__ import annotations

import collections
import queue
import threading
from collections.abc import Callable
from typing import Any

from twisted.internet.defer import Deferred, fail, succeed
from twisted.logger import Logger

_log = Logger()

#: Seconds a topic seen in the cluster is trusted without asking again.
KNOWN_FOR = 300.0
#: Seconds a topic found missing is answered missing without asking again.
MISSING_FOR = 1.0
#: Topics whose answer is kept at most (found or missing), oldest forgotten first.
MAX_REMEMBERED = 10_000
#: Topics looked up (or waiting to be) at once at most.
MAX_LOOKUPS = 64


class LookupUnavailable(Exception):
    """The cluster could not say whether it has the topic (no broker answered), or too many
    lookups wait already: nothing was written, the writer may try again."""


class TopicDirectory:
    """Topic -> whether the cluster has it, as last seen, with lookups for the rest.

    Everything but `_run` is called on the reactor thread; `lookup(topic)` runs on this
    directory's thread and answers True (the cluster has it), False (it does not) or raises
    (it could not tell)."""

    def __init__(self, reactor: Any, lookup: Callable[[str], bool], name: str,
                 known_for: float = KNOWN_FOR, missing_for: float = MISSING_FOR,
                 max_remembered: int = MAX_REMEMBERED, max_lookups: int = MAX_LOOKUPS) -> None:
        self.reactor = reactor
        self.lookup = lookup
        self.name = name
        self.known_for = known_for
        self.missing_for = missing_for
        self.max_remembered = max_remembered
        self.max_lookups = max_lookups
        #: topic -> (found, when it was seen), oldest first
        self._seen: collections.OrderedDict[str, tuple[bool, float]] = collections.OrderedDict()
        #: topic -> the writes waiting for its lookup, in the order they came
        self._waiting: dict[str, list[Deferred[bool]]] = {}
        self._asks: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    # -- reactor thread ------------------------------------------------------------------------

    def known(self, topic: str) -> bool | None:
        """Whether the cluster has `topic` as lately seen, or None when it must be asked."""
        seen = self._seen.get(topic)
        if seen is None:
            return None
        found, when = seen
        if self.reactor.seconds() - when < (self.known_for if found else self.missing_for):
            return found
        return None

    def exists(self, topic: str) -> Deferred[bool]:
        """Fires True when the cluster has `topic`, False when it does not; fails with
        `LookupUnavailable` when that cannot be known now."""
        known = self.known(topic)
        if known is not None:
            return succeed(known)
        waiting = self._waiting.get(topic)
        if waiting is None:
            if len(self._waiting) >= self.max_lookups:
                return fail(LookupUnavailable(f"{len(self._waiting)} topics are being looked "
                                              f"up already"))
            if self._thread is None:
                return fail(LookupUnavailable("the kafka client is not running"))
            waiting = self._waiting[topic] = []
            self._asks.put(topic)
        d: Deferred[bool] = Deferred()
        waiting.append(d)
        return d

    def found(self, topic: str, present: bool) -> None:
        """What the cluster said of `topic` (a lookup, or a write that failed for a topic it
        no longer has)."""
        self._seen.pop(topic, None)
        self._seen[topic] = (present, self.reactor.seconds())
        while len(self._seen) > self.max_remembered:
            self._seen.popitem(last=False)

    def _answered(self, topic: str, present: bool | None, why: str) -> None:
        if present is not None:
            self.found(topic, present)
        for d in self._waiting.pop(topic, ()):
            if present is None:
                d.errback(LookupUnavailable(why))
            else:
                d.callback(present)

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, daemon=True,
                                            name=f"ssekd-kafka-{self.name}-topics")
            self._thread.start()

    def stop(self) -> threading.Thread | None:
        """Stop looking up; the writes still waiting fail. Returns the thread, to join off the
        reactor thread."""
        thread, self._thread = self._thread, None
        if thread is not None:
            self._asks.put(None)
        for topic in list(self._waiting):
            self._answered(topic, None, "the kafka client stopped")
        return thread

    # -- the lookup thread ---------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            topic = self._asks.get()
            if topic is None:
                return
            try:
                present: bool | None = self.lookup(topic)
                why = ""
            except Exception as e:  # noqa: BLE001 - any failure is "could not tell"
                present, why = None, f"the cluster did not say whether it has {topic}: {e}"
                _log.debug("{why}", why=why)
            self.reactor.callFromThread(self._answered, topic, present, why)
