"""When to look again for topics the cluster does not have, and when to stop looking.

A stream may name a topic that does not exist (yet): the tail consumer asks for metadata again
to notice when it is created. Asking twice a second for ever is a cost any client can impose
with a made-up name, so each missing topic is looked for again after 0.5 s, then 1 s, 2 s, ...
up to `cap`, and after `give_up_after` looks it is given up (its cache is dropped and its
streams end, so browsers come back later and start over). Bootstrap topics are never given up.

Pure bookkeeping on times handed in by the caller (the consumer thread's monotonic clock), so
it is tested without a thread or a broker.
"""

from __future__ import annotations

#: Seconds before the first look again; each later one waits twice as long, up to the cap.
FIRST_DELAY = 0.5
#: Longest wait between two looks for a missing topic.
MAX_DELAY = 60.0
#: Looks before a missing topic is given up, unless the cache_server says otherwise.
DEFAULT_GIVE_UP_AFTER = 10


class MissingTopics:
    """Per missing topic: how often it was looked for, and when it is due again."""

    def __init__(self, first: float = FIRST_DELAY, cap: float = MAX_DELAY) -> None:
        self.first = first
        self.cap = cap
        self._looks: dict[str, tuple[int, float]] = {}  # topic -> (looks so far, due)

    def __contains__(self, topic: object) -> bool:
        return topic in self._looks

    def missing(self, topic: str, now: float, give_up_after: int | None) -> bool:
        """The metadata read at `now` lacks `topic`; True when it is time to give it up.

        A read before the topic is due (one made for another topic or a new one) is not
        counted, so the looks and the back-off go by time, not by how often metadata is read.
        """
        looks, due = self._looks.get(topic, (0, now))
        if now < due:
            return False
        looks += 1
        if give_up_after is not None and looks >= give_up_after:
            self._looks.pop(topic, None)
            return True
        self._looks[topic] = (looks, now + min(self.first * 2 ** (looks - 1), self.cap))
        return False

    def forget(self, topic: str) -> None:
        """The topic was found, or is no longer followed."""
        self._looks.pop(topic, None)

    def next_due(self) -> float | None:
        """When metadata should next be read for a missing topic (None: none is missing)."""
        return min((due for _, due in self._looks.values()), default=None)
