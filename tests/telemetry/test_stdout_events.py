"""Events on stdout in Zilla's format: `namespace:binding [dd/Mon/yyyy:HH:mm:ss +0000] NAME detail`,
the time in UTC with English month names whatever the machine's locale or time zone."""

from __future__ import annotations

import io
import re
from datetime import UTC, datetime

import pytest

from ssekd.telemetry.events import EventLog, format_time
from tests.support.daemon import Daemon
from tests.support.http import curl

LINE = re.compile(r"(?P<namespace>[a-z][\w-]*):(?P<binding>[a-z][\w-]*) "
                  r"\[(?P<time>\d{2}/[A-Z][a-z]{2}/\d{4}:\d{2}:\d{2}:\d{2} \+0000)\] "
                  r"(?P<name>[A-Z][A-Z_]+) (?P<detail>.+)")


def parse_time(text: str) -> datetime:
    return datetime.strptime(text, "%d/%b/%Y:%H:%M:%S %z")


def test_format_time_is_utc_with_english_months() -> None:
    assert format_time(0) == "01/Jan/1970:00:00:00 +0000"
    assert format_time(1_795_341_662.9) == "22/Nov/2026:10:01:02 +0000"  # seconds truncated
    for month in range(1, 13):
        moment = datetime(2026, month, 9, 23, 59, 59, tzinfo=UTC)
        assert parse_time(format_time(moment.timestamp())) == moment


def test_an_event_line_has_every_part() -> None:
    out = io.StringIO()
    events = EventLog("ns", clock=lambda: 1_795_341_662.0, stdout=out)
    line = events.emit("tcp0", "ENGINE_STARTED", "a\nb")
    assert line == "ns:tcp0 [22/Nov/2026:10:01:02 +0000] ENGINE_STARTED a\\x0ab"
    assert events.flush()  # a thread of its own writes the lines
    assert out.getvalue() == line + "\n"
    assert events.emit("tcp0", "ENGINE_STOPPED") == \
        "ns:tcp0 [22/Nov/2026:10:01:02 +0000] ENGINE_STOPPED -"


@pytest.mark.daemon
def test_the_daemon_prints_events_in_that_format(site: tuple[Daemon, str], port: int) -> None:
    daemon, base = site
    assert curl(base + "/")[0] == 200
    daemon.wait_output("BINDING_HTTP_REQUEST_ANSWERED")
    stopped = datetime.now(UTC)
    # every line: twistd's own come in the same format, as TWISTED_<LEVEL> events
    lines = daemon.output().splitlines()
    parsed = [LINE.fullmatch(line) for line in lines]
    assert all(parsed), [line for line, m in zip(lines, parsed, strict=True) if not m]
    assert any(m["name"] == "TWISTED_INFO" and "starting up" in m["detail"] for m in parsed if m)
    events = [(m["namespace"], m["binding"], m["name"], m["detail"]) for m in parsed
              if m and not m["name"].startswith("TWISTED_")]
    # the access line of the answer comes last; its figures are checked where it is made
    answered = events.pop()
    assert answered[:3] == ("test", "http0", "BINDING_HTTP_REQUEST_ANSWERED"), answered
    assert " method=GET path=/ route=files_map status=200 " in answered[3], answered
    listening = ("test", "ssekd", "ENGINE_LISTENING", f"127.0.0.1:{port}")
    accepted = ("test", "http0", "BINDING_HTTP_REQUEST_ACCEPTED", f"- GET http://localhost:{port}/")
    workers = daemon.worker_pids()
    if not workers:
        assert events == [
            listening,
            ("test", "ssekd", "ENGINE_STARTED", f"{daemon.config} pid {daemon.process.pid}"),
            accepted,
        ]
    else:  # the parent's events, then each worker's, interleaved as they ran
        config = daemon.config.resolve()
        assert sorted(events) == sorted([
            listening,
            ("test", "ssekd", "ENGINE_STARTED",
             f"{daemon.config} pid {daemon.process.pid} with {len(workers)} workers"),
            *[("test", "ssekd", "ENGINE_WORKER_STARTED", f"worker {i} pid {pid}")
              for i, pid in workers.items()],
            *[e for i, pid in workers.items() for e in (
                listening, ("test", "ssekd", "ENGINE_STARTED", f"{config} pid {pid} worker {i}"))],
            accepted,
        ])
        assert events[-1] == accepted
    started = datetime.fromtimestamp(daemon.config.stat().st_mtime, UTC).replace(microsecond=0)
    for m in parsed:
        assert m is not None and started <= parse_time(m["time"]) <= stopped, m["time"]
