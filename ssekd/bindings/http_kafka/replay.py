"""Writes by correlation id, so that a request sent again does not write again.

A client that does not hear back (a timeout, a `503` while the broker was slow, a dropped
connection) sends the same request again with the same idempotency key: the same correlation id
(`headers.correlation_id`) to the same topic - the table's key is `<topic>/<correlation id>`.
This table says what became of the first one:

- `PENDING`: produced, the broker has not acknowledged it yet. The repeat waits for that same
  acknowledgement instead of producing again (a `503` said the outcome was not known: the write
  may still happen, and then it happens once);
- `WRITTEN`: acknowledged. The repeat is answered like the first (its reply, or `204`) without
  writing;
- `FAILED` (or not listed): nothing was written; the repeat writes.

Entries stay `window` seconds after they settle, at most `MAX_ENTRIES` of them and at most
`max_bytes` of memory (each costs its correlation id plus `ENTRY_BYTES`, measured; the oldest
settled ones go first). The idempotency key a client sends is bounded too
(`idempotency.max-length`), so no request can make one entry large. The table is per process:
after a restart, or on another worker, a write with a reply is still recognised by its reply on
the reply topic (the cache reads that topic from its start), a write without one is not.
"""

from __future__ import annotations

import collections
import enum
from typing import Any

from twisted.internet.defer import Deferred, fail, succeed
from twisted.python.failure import Failure

from ssekd.bindings.kafka.producer import Delivered

#: Correlation ids remembered at most (settled ones beyond it are forgotten, oldest first).
MAX_ENTRIES = 100_000
#: Bytes the table may hold at most, unless `idempotency.max-bytes` says otherwise.
MAX_BYTES = 64 * 1024 * 1024
#: What an entry costs besides its correlation id: the `Write`, its outcome and two table slots
#: (measured with tracemalloc on CPython 3.11: ~380 bytes).
ENTRY_BYTES = 400
#: Seconds a settled write is remembered, unless `idempotency.window` says otherwise.
DEFAULT_WINDOW = 600.0


class State(enum.Enum):
    PENDING = "pending"
    WRITTEN = "written"
    FAILED = "failed"


class Write:
    """One correlation id's write."""

    __slots__ = ("_outcome", "_waiting", "settled_at", "state")

    def __init__(self) -> None:
        self.state = State.PENDING
        self.settled_at = 0.0
        self._waiting: list[Deferred[Delivered]] = []
        self._outcome: Delivered | Failure | None = None

    def acknowledged(self) -> Deferred[Delivered]:
        """Fires with the broker's acknowledgement of this write, or fails as it did."""
        if self._outcome is None:
            d: Deferred[Delivered] = Deferred()
            self._waiting.append(d)
            return d
        if isinstance(self._outcome, Failure):
            return fail(self._outcome)
        return succeed(self._outcome)

    def settle(self, outcome: Delivered | Failure, now: float) -> None:
        self.state = State.FAILED if isinstance(outcome, Failure) else State.WRITTEN
        self.settled_at = now
        self._outcome = outcome
        waiting, self._waiting = self._waiting, []
        for d in waiting:
            if isinstance(outcome, Failure):
                d.errback(outcome)
            else:
                d.callback(outcome)


class Replays:
    """Correlation id -> `Write`, bounded in count and age."""

    def __init__(self, clock: Any, window: float = DEFAULT_WINDOW,
                 max_entries: int = MAX_ENTRIES, max_bytes: int = MAX_BYTES) -> None:
        self.clock = clock
        self.window = window
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        #: What the entries cost (`ENTRY_BYTES` plus each correlation id).
        self.bytes = 0
        self._writes: dict[str, Write] = {}
        #: Settled writes in the order they settled, to forget the oldest first.
        self._settled: collections.OrderedDict[str, Write] = collections.OrderedDict()

    def __len__(self) -> int:
        return len(self._writes)

    def get(self, correlation: str) -> Write | None:
        self._expire()
        return self._writes.get(correlation)

    def begin(self, correlation: str) -> Write:
        """A new write of `correlation` (replacing a failed one)."""
        self._expire()
        self._settled.pop(correlation, None)
        if correlation not in self._writes:
            self.bytes += _cost(correlation)
        write = self._writes[correlation] = Write()
        return write

    def settle(self, correlation: str, write: Write, outcome: Delivered | Failure) -> None:
        write.settle(outcome, self.clock.seconds())
        if self._writes.get(correlation) is write:
            self._settled[correlation] = write
            self._settled.move_to_end(correlation)
        self._expire()

    def _expire(self) -> None:
        """Forget settled writes older than the window, and the oldest settled ones while there
        are more than `max_entries` or they cost more than `max_bytes`. Pending ones stay (what
        waits for the broker is bounded by the client's `max-inflight-bytes`). Each call looks
        only at what it forgets, plus one."""
        settled = self._settled
        horizon = self.clock.seconds() - self.window
        while settled:
            correlation, write = next(iter(settled.items()))
            if write.settled_at >= horizon and len(self._writes) <= self.max_entries \
                    and self.bytes <= self.max_bytes:
                return
            del settled[correlation]
            if self._writes.get(correlation) is write:
                del self._writes[correlation]
                self.bytes -= _cost(correlation)


def _cost(correlation: str) -> int:
    return ENTRY_BYTES + len(correlation)
