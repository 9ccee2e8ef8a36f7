"""What every librdkafka client of the kafka binding shares: its log, said as the binding's
events, and how it is closed.

librdkafka's own log goes through the binding's events (`LibrdkafkaLog`), not to stderr: a
failed connection is the broker's state, said once by `BINDING_KAFKA_BROKER_UNAVAILABLE` and
once by `BINDING_KAFKA_BROKER_CONNECTED` (with how many attempts failed meanwhile; the tail
consumer says those), and any other line is one `BINDING_KAFKA_LOG` event, its repeats counted.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaException
from twisted.logger import Logger

_log = Logger()


class LibrdkafkaLog:
    """The `logger` of a librdkafka client: its log lines become the binding's events.

    confluent-kafka calls `log(level, "%s [%s] %s", facility, client name, message)` from the
    thread that polls the client. Connection failures (facility `FAIL`) are not said: the
    consumer's state events say them once per change, with the last one's text. Any other line
    is said once as `BINDING_KAFKA_LOG`; the same line again within `REPEAT_WINDOW` seconds is
    counted, and the count said with its next showing.
    """

    REPEAT_WINDOW = 60.0

    def __init__(self, event: Callable[[str, str], None],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.event = event
        self.clock = clock
        #: The text of the last connection failure librdkafka reported.
        self.last_failure: str | None = None
        self._said: dict[str, tuple[float, int]] = {}

    def log(self, level: int, fmt: str, *args: Any) -> None:
        facility = str(args[0]) if len(args) == 3 else "LOG"
        try:
            message = str(args[2]) if len(args) == 3 else fmt % args
        except (TypeError, ValueError):
            message = fmt
        if facility == "FAIL":
            self.last_failure = message
            return
        self.say("BINDING_KAFKA_LOG", f"{facility}: {message}")

    def say(self, name: str, detail: str) -> None:
        """Emit `name` with `detail` unless the same was said within the window."""
        now = self.clock()
        key = f"{name} {detail}"
        said = self._said.get(key)
        if said is not None and now - said[0] < self.REPEAT_WINDOW:
            self._said[key] = (said[0], said[1] + 1)
            return
        if len(self._said) > 1000:  # a line that varies each time: forget the oldest
            self._said.clear()
        repeats = said[1] if said is not None else 0
        self._said[key] = (now, 0)
        self.event(name, detail + (f" ({repeats} repeat(s) in the last minute not shown)"
                                   if repeats else ""))


def close_consumer(consumer: Any) -> None:
    """Close a consumer on its own thread; one that never connected may complain."""
    try:
        consumer.close()
    except (KafkaException, RuntimeError) as e:
        _log.debug("closing consumer: {e}", e=e)

