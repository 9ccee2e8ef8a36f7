"""twistd's own log lines in the events' format, so that a log pipeline reads one format.

twistd writes its own lines (starting up, the reactor, shutting down, warnings, the traceback of
a bug) with a format of its own. ssekd gives twistd a log observer (the application's
`ILogObserver` component, which twistd uses unless `--logger` names another) that writes them as
events of the daemon: `namespace:ssekd [time] TWISTED_<LEVEL> source: message` in text, or a JSON
object with `severity` when the stdout exporter says `format: json`. A traceback stays on its
line (its newlines written as `\\x0a` in text; JSON escapes them). Event lines that go to
twistd's log (no stdout exporter) are written as they are. Twisted's "Starting factory" and
"Stopping factory" lines are left out: the parent of workers opens a connection to each worker
every second (its heartbeat), and they would be most of the log.

Where the lines go is twistd's choice, kept: its `--logfile` (rotated on SIGUSR1 as twistd
does), standard output with `--nodaemon` and no log file, `twistd.log` when daemonized. With
`--syslog` (or `--logger`) twistd's own observer is left alone. Lines for standard output go
through the events' writer thread, in order with the events, so a stuck pipe never blocks the
reactor here either.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Mapping
from typing import Any, TextIO

from twisted.logger import ILogObserver, LogEvent, LogLevel, formatEvent
from twisted.python.logfile import LogFile
from zope.interface import implementer

from ssekd.telemetry.events import EventLog, clean, format_time, json_line, stdout_stream

#: Where the daemon's event lines are logged through Twisted (`EventLog` without stdout).
EVENTS_NAMESPACE = "ssekd.events"
#: How long a twistd line may be (a traceback is kept whole, within reason).
MAX_DETAIL = 16384
#: What every client connection of the parent (heartbeats, scrapes of the workers) would log
#: twice: left out.
FACTORY_CHATTER = ("Starting factory {factory!r}", "Stopping factory {factory!r}")
#: Twisted's levels as event names and JSON severities.
LEVELS = {LogLevel.debug: ("TWISTED_DEBUG", "DEBUG"), LogLevel.info: ("TWISTED_INFO", "INFO"),
          LogLevel.warn: ("TWISTED_WARN", "WARNING"), LogLevel.error: ("TWISTED_ERROR", "ERROR"),
          LogLevel.critical: ("TWISTED_CRITICAL", "CRITICAL")}


def twistd_line(events: EventLog, event: LogEvent) -> str:
    """One Twisted log event as an event line of `events`' namespace and format."""
    if event.get("log_namespace") == EVENTS_NAMESPACE and "line" in event:
        return str(event["line"])
    name, level = LEVELS.get(event.get("log_level", LogLevel.info), LEVELS[LogLevel.info])
    source = str(event.get("log_namespace") or event.get("log_system") or "-")
    message = formatEvent(event)
    failure = event.get("log_failure")
    if failure is not None:
        try:
            message = f"{message}\n{failure.getTraceback()}"
        except Exception:  # noqa: BLE001 - a failure that cannot print itself is still a line
            message = f"{message}\n{failure!r}"
    now = float(event.get("log_time") or time.time())
    detail = clean(message.rstrip("\n"), MAX_DETAIL)
    if events.format == "json":
        return json_line(now, events.namespace, "ssekd", name, detail, {"source": source},
                         level=level)
    return f"{events.namespace}:ssekd [{format_time(now)}] {name} {source}: {detail}"


@implementer(ILogObserver)
class TwistdLog:
    """twistd's log observer: each line in the events' format, to stdout or a file."""

    def __init__(self, events: EventLog, out: TextIO | LogFile) -> None:
        self.events = events
        self.out = out
        #: Lines standard output did not take (its queue was full), as for events.
        self.dropped = 0

    def __call__(self, event: LogEvent) -> None:
        if event.get("log_format") in FACTORY_CHATTER:
            return
        line = twistd_line(self.events, event)
        if self.out is stdout_stream():
            if not self.events.write_line(stdout_stream(), line):
                self.dropped += 1
            return
        try:
            self.out.write(line + "\n")
            self.out.flush()
        except (OSError, ValueError):
            pass  # a log that cannot be written must not take the daemon down


def observer_for(events: EventLog, twistd_options: Mapping[str, Any] | None) -> TwistdLog | None:
    """The observer for twistd's options (`--logfile`, `--nodaemon`, `--syslog`), or None to
    leave twistd's own (syslog, a `--logger`, or no twistd at all)."""
    if twistd_options is None or twistd_options.get("syslog") or twistd_options.get("logger"):
        return None
    logfile = str(twistd_options.get("logfile") or "")
    nodaemon = bool(twistd_options.get("nodaemon"))
    if logfile == "-":
        return TwistdLog(events, stdout_stream()) if nodaemon else None  # twistd refuses it
    if nodaemon and not logfile:
        return TwistdLog(events, stdout_stream())
    out = LogFile.fromFullPath(logfile or "twistd.log")
    if not signal.getsignal(signal.SIGUSR1):  # as twistd does: SIGUSR1 rotates the file
        def rotate(signum: int, frame: Any) -> None:
            from twisted.internet import reactor
            reactor.callFromThread(out.rotate)  # type: ignore[attr-defined]
        signal.signal(signal.SIGUSR1, rotate)
    return TwistdLog(events, out)
