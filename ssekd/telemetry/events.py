"""Events in Zilla's stdout format: `namespace:binding [22/Nov/2026:10:01:02 +0000] NAME detail`.

Every part of the daemon reports what happened (start, stop, config errors, reloads, handshake
failures, Kafka state, unreadable ids) through one `EventLog`. With a stdout exporter configured the
lines go to the process's real stdout, as Zilla prints them; without one they go to Twisted's log
(so `twistd --logfile` keeps them) - never both, so `twistd -n` does not print each line twice.

Two things keep event lines from hurting traffic:

- Stdout is written by a thread of its own, fed through a bounded queue. `emit` runs on the
  reactor thread for every request; a pipe nobody reads (a stuck log shipper, a paused terminal)
  would otherwise block it on `write`/`flush` and stall every connection. When the queue is full,
  lines are counted and dropped, and one `EVENTS_DROPPED` line says how many once there is room.
- Each (binding, event name) prints at most `max_per_second` lines per second; the rest are
  counted, and one `EVENTS_SUPPRESSED` line (`N more NAME suppressed`) follows when the second
  is over. A flood of refused connections or bad tokens thus costs a bounded number of lines.
  `recent` still records every event.

No event carries a token: anything shaped like a JWT is hidden in every detail
(`ssekd.telemetry.redact`), whatever the binding that emits it redacted itself.

Other exporters (OTLP's log records) subscribe to the events through `sinks`: they get the lines
that are printed, after the flood limit, so a flood costs them no more than it costs stdout.

**ssekd goes further**: a stdout exporter with `options: {format: json}` prints each event as
one JSON object per line (`time`, `severity`, `namespace`, `binding`, `event`, `detail`, and the
event's own fields when it has some, such as the stream-end event's), for log pipelines that
read JSON; twistd's own lines come in the same format (`ssekd.telemetry.twistd_log`).
"""

from __future__ import annotations

import atexit
import json
import queue
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal, TextIO

from twisted.logger import Logger

from ssekd.telemetry.redact import hide_jwts

_log = Logger(namespace="ssekd.events")

_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")

#: Lines one (binding, event name) may print per second before the rest are counted.
MAX_PER_SECOND = 100
#: Lines waiting for the stdout writer before new ones are dropped (and counted).
QUEUE_LINES = 10_000
#: Where the log's own lines (drops) are reported; the engine's binding name.
OWN_BINDING = "ssekd"

#: Told of every event that is printed: (time, namespace, binding, name, detail); called on the
#: reactor thread, so it must only hand the event on, never wait.
Sink = Callable[[float, str, str, str, str], None]

#: How event lines are written: Zilla's text (the default) or one JSON object per line.
Format = Literal["text", "json"]
FORMATS: tuple[Format, ...] = ("text", "json")

#: Events that say the daemon cannot do what it should (severity ERROR in JSON lines).
ERRORS = frozenset({
    "CONFIG_INVALID", "CONFIG_RELOAD_FAILED", "ENGINE_WORKER_DIED", "ENGINE_WORKER_KILLED",
    "ENGINE_WORKER_STUCK", "ENGINE_PARENT_GONE", "EVENTS_DROPPED", "BINDING_KAFKA_ERROR",
    "BINDING_KAFKA_FETCH_ERROR", "BINDING_KAFKA_PARTITION_LOST", "BINDING_KAFKA_HISTORY_UNAVAILABLE",
    "OTLP_EXPORT_FAILED"})
#: Events that say it works degraded, by their name's end (severity WARNING).
WARNING_ENDINGS = ("_UNAVAILABLE", "_FAILED", "_INVALID", "_UNKNOWN", "_STALLED", "_TRY_LATER",
                   "_LIMIT", "_TOO_LARGE", "_RESET", "_PAST_END", "_SUPPRESSED", "_DRAINING",
                   "_UNSAFE")
#: Events a client causes (a refused request, token or handshake): INFO, like any access line.
CLIENT_EVENTS = frozenset({"BINDING_SSE_REQUEST_REJECTED", "BINDING_TLS_HANDSHAKE_FAILED",
                           "GUARD_JWT_AUTHORIZATION_FAILED", "GUARD_X509_AUTHORIZATION_FAILED",
                           "BINDING_TCP_CONNECTION_REFUSED",
                           "BINDING_SSE_KAFKA_LAST_EVENT_ID_UNREADABLE",
                           "BINDING_SSE_KAFKA_SINCE_INVALID",
                           "BINDING_SSE_KAFKA_TOO_MANY_TOPICS"})


def severity(name: str) -> str:
    """The severity of an event in JSON lines: ERROR, WARNING or INFO (see the sets above)."""
    if name in ERRORS:
        return "ERROR"
    if name in CLIENT_EVENTS:
        return "INFO"
    return "WARNING" if name.endswith(WARNING_ENDINGS) else "INFO"


def format_iso(epoch: float) -> str:
    """RFC 3339 UTC with milliseconds, for JSON lines: `2026-11-22T10:01:02.123Z`."""
    t = time.gmtime(epoch)
    return time.strftime("%Y-%m-%dT%H:%M:%S", t) + f".{int(epoch * 1000) % 1000:03d}Z"


#: Keys of a JSON line that an event's own fields may not take.
CORE_KEYS = frozenset({"time", "severity", "namespace", "binding", "event", "detail"})


def json_line(now: float, namespace: str, binding: str, name: str, detail: str,
              fields: Mapping[str, object] | None = None, level: str | None = None) -> str:
    """One event as a JSON object on one line (`json.dumps` escapes every control character,
    so no detail can break the line)."""
    obj: dict[str, object] = {"time": format_iso(now), "severity": level or severity(name),
                              "namespace": namespace, "binding": binding, "event": name,
                              "detail": detail}
    if fields:
        obj.update((k, v) for k, v in fields.items() if k not in CORE_KEYS)
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def format_time(epoch: float) -> str:
    """Zilla's (and Apache's) `dd/Mon/yyyy:HH:mm:ss +0000`, always UTC, not locale-dependent."""
    t = time.gmtime(epoch)
    return f"{t.tm_mday:02d}/{_MONTHS[t.tm_mon - 1]}/{t.tm_year}:" \
           f"{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d} +0000"


def clean(detail: str, limit: int = 512) -> str:
    """Make client-controlled text safe for one log line: no control characters, bounded."""
    out = "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in detail[:limit])
    return out + ("…" if len(detail) > limit else "")


@dataclass
class _Window:
    """Lines of one (binding, name) printed in the second `start`, and how many were held back."""

    start: int
    printed: int = 0
    suppressed: int = 0


class StdoutWriter:
    """The thread that writes queued lines to their stream, so a blocked pipe blocks only it."""

    def __init__(self, capacity: int = QUEUE_LINES) -> None:
        self._queue: queue.Queue[tuple[TextIO, str] | threading.Event] = \
            queue.Queue(maxsize=capacity)
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def offer(self, stream: TextIO, line: str, timeout: float = 0.0) -> bool:
        """Queue one line, waiting at most `timeout` seconds for room; False when full."""
        self._start()
        try:
            self._queue.put((stream, line), block=timeout > 0, timeout=timeout or None)
        except queue.Full:
            return False
        return True

    def flush(self, timeout: float) -> bool:
        """Wait until every line queued so far is written (at most `timeout` seconds)."""
        if self._thread is None:
            return True
        done = threading.Event()
        try:
            self._queue.put(done, timeout=timeout)
        except queue.Full:
            return False
        return done.wait(timeout)

    def _start(self) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="ssekd-events-stdout",
                                                daemon=True)
                self._thread.start()
                # A process that exits without an orderly stop (a config refused at start, an
                # error) still writes what it said; atexit runs before daemon threads stop.
                atexit.register(self.flush, 1.0)

    def _run(self) -> None:
        while True:
            batch = [self._queue.get()]
            while len(batch) < 1000:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            lines: dict[TextIO, list[str]] = {}
            for item in batch:
                if isinstance(item, threading.Event):
                    self._write(lines)
                    lines = {}
                    item.set()
                else:
                    lines.setdefault(item[0], []).append(item[1])
            self._write(lines)

    @staticmethod
    def _write(lines: dict[TextIO, list[str]]) -> None:
        for stream, text in lines.items():
            try:
                stream.write("".join(text))
                stream.flush()
            except (OSError, ValueError):
                pass  # a closed stdout must never take the daemon down


class EventLog:
    """Where events go. `stdout` is set when a stdout exporter is configured.

    `emit` is called on the reactor thread; it never waits for the output.
    """

    def __init__(self, namespace: str, clock: Callable[[], float] = time.time,
                 stdout: TextIO | None = None, keep: int = 1000,
                 max_per_second: int = MAX_PER_SECOND,
                 writer: StdoutWriter | None = None) -> None:
        self.namespace = namespace
        self.clock = clock
        self.stdout = stdout
        #: How lines are written (the stdout exporter's `format`); twistd's lines follow it.
        self.format: Format = "text"
        self.max_per_second = max_per_second
        #: The most recent lines, for tests and for `ssekd` diagnostics.
        self.recent: deque[str] = deque(maxlen=keep)
        self._writer = writer or StdoutWriter()
        self._windows: dict[tuple[str, str], _Window] = {}
        self._dropped = 0
        #: Exporters that take the events too (see `Sink`).
        self.sinks: list[Sink] = []

    def emit(self, binding: str, name: str, detail: str = "-",
             fields: Mapping[str, object] | None = None) -> str:
        """Report one event. `fields` are its parts one by one, for JSON lines (the text line
        has `detail` only, which says the same)."""
        now = self.clock()
        detail = clean(hide_jwts(detail))
        line = self._line(now, binding, name, detail, fields)
        self.recent.append(line)
        second = int(now)
        window = self._windows.get((binding, name))
        if window is not None and window.start != second:
            self._summarize(binding, name, window, now)
            window = None
        if window is None:
            window = self._windows[(binding, name)] = _Window(second)
        if window.printed >= self.max_per_second:
            window.suppressed += 1
        else:
            window.printed += 1
            self._out(line)
            self._publish(now, binding, name, detail)
        return line

    def tick(self) -> None:
        """Write the summaries of floods whose second is over, and forget quiet windows; the
        engine calls this every second, so a summary does not wait for the next such event."""
        now = self.clock()
        second = int(now)
        for (binding, name), window in list(self._windows.items()):
            if window.start != second:
                self._summarize(binding, name, window, now)
                del self._windows[(binding, name)]
        self._report_drops(now)

    def flush(self, timeout: float = 5.0) -> bool:
        """Write pending summaries and wait (at most `timeout` seconds) until stdout has every
        line; the engine calls it last on an orderly stop, before the process exits."""
        for (binding, name), window in list(self._windows.items()):
            self._summarize(binding, name, window, self.clock())
        self._windows.clear()
        return self._report_drops(self.clock(), timeout) and self._writer.flush(timeout)

    def _line(self, now: float, binding: str, name: str, detail: str,
              fields: Mapping[str, object] | None = None) -> str:
        if self.format == "json":
            return json_line(now, self.namespace, binding, name, detail, fields)
        return f"{self.namespace}:{binding} [{format_time(now)}] {name} {detail}"

    def write_line(self, stream: TextIO, line: str) -> bool:
        """Queue a line formatted elsewhere (twistd's own, see `ssekd.telemetry.twistd_log`)
        for `stream`, in order with the events; False when the queue is full."""
        return self._writer.offer(stream, line + "\n")

    def _summarize(self, binding: str, name: str, window: _Window, now: float) -> None:
        if window.suppressed:
            detail = f"{window.suppressed} more {name} suppressed"
            line = self._line(now, binding, "EVENTS_SUPPRESSED", detail)
            window.suppressed = 0
            self.recent.append(line)
            self._out(line)
            self._publish(now, binding, "EVENTS_SUPPRESSED", detail)

    def _publish(self, now: float, binding: str, name: str, detail: str) -> None:
        for sink in self.sinks:
            sink(now, self.namespace, binding, name, detail)

    def _report_drops(self, now: float, timeout: float = 0.0) -> bool:
        """Queue the line that says how many lines were dropped; False while still full."""
        if not self._dropped or self.stdout is None:
            return True
        line = self._line(now, OWN_BINDING, "EVENTS_DROPPED",
                          f"{self._dropped} event lines dropped: stdout did not take them")
        if not self._writer.offer(self.stdout, line + "\n", timeout):
            return False
        self._dropped = 0
        self.recent.append(line)
        return True

    def _out(self, line: str) -> None:
        if self.stdout is None:
            _log.info("{line}", line=line)
        elif not self._report_drops(self.clock()) or \
                not self._writer.offer(self.stdout, line + "\n"):
            self._dropped += 1


def stdout_stream() -> TextIO:
    """The real stdout, even when twistd has replaced sys.stdout with a log file."""
    return sys.__stdout__ if sys.__stdout__ is not None else sys.stdout
