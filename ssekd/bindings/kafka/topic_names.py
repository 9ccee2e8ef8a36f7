"""Which topic names a request may lead to: the one rule of every binding that takes a topic
from a request (sse-kafka streams, http-kafka writes and fetches).

A route's `with.topic` may come from the request - `${params.x}` from the path, a header, a
query parameter, the guard's identity. Such a name must be a whole Kafka topic name, and not one
of the cluster's own topics, which hold what no browser should read or write:

- names starting with `_` (`__consumer_offsets`, `__transaction_state`, `_schemas`,
  `_confluent-*`);
- Kafka Connect's default topics (`connect-configs` holds connector configs, passwords
  included; `connect-offsets`, `connect-status`);
- what the binding's `internal-topics` option lists: names, or patterns with `*` (say
  `*-changelog`, Kafka Streams' state topics, or Connect topics a cluster renamed).

A route that names such a topic literally (`topic: _schemas`) was written by whoever runs the
daemon and is served; only a name the request supplies is refused. Refusals are `404`: the route
does not lead there, as for a path no route matches.

Kafka's own rule for a name is `[A-Za-z0-9._-]{1,249}` with `.` and `..` refused; it is applied
with `fullmatch`, since `$` would also match before a final newline (`topic%0A`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

#: Kafka's rule for topic names (`.` and `..` apart, see `is_topic_name`).
TOPIC_NAME = re.compile(r"[A-Za-z0-9._-]{1,249}")

#: Kafka Connect's own topics (its default names), internal like those starting with `_`.
CONNECT_TOPICS = ("connect-configs", "connect-offsets", "connect-status")


def is_topic_name(name: str) -> bool:
    """Whether Kafka would take `name` as a topic (it refuses `.` and `..`)."""
    return TOPIC_NAME.fullmatch(name) is not None and name not in (".", "..")


@dataclass(frozen=True)
class InternalTopics:
    """The cluster's own topics: the built-in ones and a binding's `internal-topics`."""

    #: Exact names from `internal-topics`.
    names: frozenset[str] = frozenset()
    #: Patterns with `*` from `internal-topics`, compiled.
    patterns: tuple[re.Pattern[str], ...] = ()

    @classmethod
    def of(cls, listed: Iterable[Any] = ()) -> InternalTopics:
        """From the `internal-topics` option (names, and patterns where `*` stands for any
        run of characters)."""
        names: set[str] = set()
        patterns: list[re.Pattern[str]] = []
        for item in listed:
            text = str(item)
            if "*" in text:
                patterns.append(re.compile(".*".join(re.escape(part)
                                                     for part in text.split("*"))))
            else:
                names.add(text)
        return cls(frozenset(names), tuple(patterns))

    def __contains__(self, topic: object) -> bool:
        if not isinstance(topic, str):
            return False
        return (topic.startswith("_") or topic in CONNECT_TOPICS or topic in self.names
                or any(p.fullmatch(topic) for p in self.patterns))


def refusal(topic: str, from_request: bool, internal: InternalTopics) -> str | None:
    """Why a request may not lead to `topic`, or None when it may. `from_request`: the name
    came (at least in part) from the request, not from the route's literal text."""
    if not is_topic_name(topic):
        return "not a topic name"
    if from_request and topic in internal:
        return f"{topic} is an internal topic"
    return None


#: The `internal-topics` option, the same on every binding that takes a topic from a request.
INTERNAL_TOPICS_OPTION: dict[str, Any] = {
    "type": "array",
    "items": {"type": "string", "minLength": 1, "pattern": r"^[A-Za-z0-9._*-]{1,249}$",
              "x-expected": "a topic name, or a pattern with *"},
    "x-ssekd-addition": True,
    "x-ssekd-default": "none beyond the built-in ones",
    "description": "More topics that are the cluster's own, by name or by a pattern where `*` "
                   "stands for any characters (`*-changelog`). A topic taken from the request "
                   "(`${params...}`, a header, the query or an identity in `with.topic`) may "
                   "not be one of these, nor start with `_`, nor be Kafka Connect's "
                   "(`connect-configs`, `connect-offsets`, `connect-status`): such a request "
                   "is `404`. A route that names the topic literally still serves it. "
                   "sse-kafka and http-kafka apply the same rule.",
}
