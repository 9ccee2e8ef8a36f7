"""When a tail consumer stopped receiving records the broker has: a stalled consumer.

A consumer can stay connected, its metadata and offset requests answered, and still receive
nothing: a broker whose fetch path is wedged for one connection (the development broker does it
under a steady load, after some minutes, while a new consumer reads the same offsets at full
speed), or a client library stuck in a fetch state it does not leave. Nothing fails, so nothing
reconnects; the streams just stop, the way Zilla #1340 describes ("stops sending updates after a
couple of days").

`StallWatch` notices it from outside the client library: every `timeout` seconds it looks at the
next offset the consumer has handed over for each partition; a partition that has not moved since
the look before, while the broker says it holds records from that offset on, is stalled, and the
tail consumer replaces its consumer with a new one that starts where the old one stood (nothing
lost: the cache drops what it already has). A partition the broker cannot answer for (no leader,
no connection) is not judged: those are the cluster's state, seen and reported elsewhere. After
a replacement the next look waits twice as long (up to `longest`), so a partition that stays
stuck costs a new consumer every ten minutes at most; records moving again bring the wait back.

The clock is injected so the timing is tested without sleeping. Used on the consumer's thread.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Generic, TypeVar

#: The default of the kafka client's `stall-timeout` option, in seconds.
DEFAULT_STALL_TIMEOUT = 30.0
#: The longest wait between looks while a partition stays stalled.
LONGEST_WAIT = 600.0

K = TypeVar("K")


class StallWatch(Generic[K]):
    """Says, now and then, which partitions have not moved since the look before."""

    def __init__(self, timeout: float, clock: Callable[[], float] = time.monotonic,
                 longest: float = LONGEST_WAIT) -> None:
        self.timeout = timeout
        self.longest = max(longest, timeout)
        self.clock = clock
        #: Seconds from one look to the next: `timeout`, doubled after each replacement.
        self.wait = timeout
        self._looked_at = clock()
        self._seen: dict[K, int] = {}

    def due(self) -> bool:
        """Whether it is time for a look."""
        return self.clock() - self._looked_at >= self.wait

    def still(self, reached: Mapping[K, int]) -> list[K]:
        """A look: the partitions of `reached` (next offset handed over, by partition) at the
        same offset as at the look before. The first look finds none."""
        seen = self._seen
        out = [k for k, at in reached.items() if seen.get(k) == at]
        self._seen = dict(reached)
        self._looked_at = self.clock()
        return out

    def replaced(self) -> None:
        """The consumer was replaced: the next look waits twice as long."""
        self.wait = min(self.wait * 2, self.longest)

    def flowing(self) -> None:
        """Nothing was stalled at the last look: the next one comes after `timeout`."""
        self.wait = self.timeout
