"""Events in Zilla's stdout format: `namespace:binding [22/Nov/2026:10:01:02 +0000] NAME detail`.

Every part of the daemon reports what happened (start, stop, config errors, reloads, handshake
failures, Kafka state, unreadable ids) through one `EventLog`. With a stdout exporter configured the
lines go to the process's real stdout, as Zilla prints them; without one they go to Twisted's log
(so `twistd --logfile` keeps them) - never both, so `twistd -n` does not print each line twice.
"""

from __future__ import annotations

import sys
import time
from collections import deque
from collections.abc import Callable
from typing import TextIO

from twisted.logger import Logger

_log = Logger(namespace="ssekd.events")

_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def format_time(epoch: float) -> str:
    """Zilla's (and Apache's) `dd/Mon/yyyy:HH:mm:ss +0000`, always UTC, not locale-dependent."""
    t = time.gmtime(epoch)
    return f"{t.tm_mday:02d}/{_MONTHS[t.tm_mon - 1]}/{t.tm_year}:" \
           f"{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d} +0000"


def clean(detail: str, limit: int = 512) -> str:
    """Make client-controlled text safe for one log line: no control characters, bounded."""
    out = "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in detail[:limit])
    return out + ("…" if len(detail) > limit else "")


class EventLog:
    """Where events go. `stdout` is set when a stdout exporter is configured."""

    def __init__(self, namespace: str, clock: Callable[[], float] = time.time,
                 stdout: TextIO | None = None, keep: int = 1000) -> None:
        self.namespace = namespace
        self.clock = clock
        self.stdout = stdout
        #: The most recent lines, for tests and for `ssekd` diagnostics.
        self.recent: deque[str] = deque(maxlen=keep)

    def emit(self, binding: str, name: str, detail: str = "-") -> str:
        line = f"{self.namespace}:{binding} [{format_time(self.clock())}] {name} {clean(detail)}"
        self.recent.append(line)
        if self.stdout is None:
            _log.info("{line}", line=line)
        else:
            try:
                self.stdout.write(line + "\n")
                self.stdout.flush()
            except (OSError, ValueError):
                pass  # a closed stdout must never take the daemon down
        return line


def stdout_stream() -> TextIO:
    """The real stdout, even when twistd has replaced sys.stdout with a log file."""
    return sys.__stdout__ if sys.__stdout__ is not None else sys.stdout
