"""Event lines never hold up the reactor thread, and a flood of one event prints a bounded number
of lines plus a summary. The format stays Zilla's: `namespace:binding [time] NAME detail`."""

from __future__ import annotations

import io
import os
import re
import threading
from collections.abc import Iterator

import pytest

from ssekd.telemetry.events import MAX_PER_SECOND, EventLog, StdoutWriter

LINE = re.compile(r"^ns:(\w+) \[\d\d/[A-Z][a-z]{2}/\d{4}:\d\d:\d\d:\d\d \+0000\] ([A-Z0-9_]+) (.*)$")


@pytest.fixture
def full_pipe() -> Iterator[tuple[int, io.TextIOWrapper]]:
    """A real pipe whose reader has not read anything, filled to the brim: the next write to
    its (blocking) write end would wait until someone reads."""
    r, w = os.pipe()
    os.set_blocking(w, False)
    try:
        while True:
            os.write(w, b"\n" * 65536)
    except BlockingIOError:
        pass
    try:
        while True:
            os.write(w, b"\n")
    except BlockingIOError:
        pass
    os.set_blocking(w, True)
    stream = os.fdopen(w, "w")
    yield r, stream
    os.close(r)  # a writer still blocked in write() now fails with EPIPE and goes on
    try:
        stream.close()
    except OSError:
        pass


def test_emit_does_not_wait_for_a_pipe_nobody_reads(
        full_pipe: tuple[int, io.TextIOWrapper]) -> None:
    _, stream = full_pipe
    log = EventLog("ns", stdout=stream)
    emitted = threading.Event()

    def reactor_thread() -> None:
        for i in range(50):
            log.emit("http0", "BINDING_HTTP_REQUEST_ACCEPTED", f"- GET /{i}")
        emitted.set()

    threading.Thread(target=reactor_thread, daemon=True).start()
    assert emitted.wait(5), "emit blocked on a stdout pipe nobody reads"
    assert len(log.recent) == 50
    assert not log.flush(timeout=0.2), "the lines cannot have reached a full pipe"


def test_lines_dropped_while_stdout_is_stuck_are_counted_in_one_line(
        full_pipe: tuple[int, io.TextIOWrapper]) -> None:
    r, stream = full_pipe
    log = EventLog("ns", stdout=stream, writer=StdoutWriter(capacity=10))
    for i in range(100):
        log.emit("b", f"EVENT_{i % 10}", str(i))  # ten names: the rate limit stays out of this
    # now someone reads the pipe again
    received = bytearray()

    def reader() -> None:
        while chunk := os.read(r, 65536):
            received.extend(chunk)

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    assert log.flush(timeout=5)  # waits for room, then says how many were dropped
    log.emit("b", "AFTER", "-")
    assert log.flush(timeout=5)
    stream.close()  # the reader reads to the end
    thread.join(5)
    lines = [line for line in received.decode().split("\n") if line.startswith("ns:")]
    events = [LINE.match(line) for line in lines]
    assert all(events), lines
    names = [m.group(2) for m in events if m]
    (dropped,) = [m.group(3) for m in events if m and m.group(2) == "EVENTS_DROPPED"]
    count = int(dropped.split()[0])
    assert dropped == f"{count} event lines dropped: stdout did not take them"
    printed = sum(name.startswith("EVENT_") for name in names)
    assert count > 0 and printed + count == 100, (printed, count)
    assert names[-1] == "AFTER" and names[-2] == "EVENTS_DROPPED"


def test_a_flood_of_one_event_prints_a_bounded_number_of_lines_and_a_summary() -> None:
    now = [1_790_000_000.25]
    out = io.StringIO()
    log = EventLog("ns", clock=lambda: now[0], stdout=out)
    for i in range(10_000):
        log.emit("tcp0", "BINDING_TCP_CONNECTION_REFUSED", f"127.0.0.1 {i}")
    log.emit("tcp0", "OTHER", "a different name is not held back")
    log.emit("tcp1", "BINDING_TCP_CONNECTION_REFUSED", "nor the same name of another binding")
    now[0] += 1.0
    log.tick()  # the second is over: the summary is written without waiting for the next event
    assert log.flush(timeout=5)
    lines = out.getvalue().splitlines()
    assert len(lines) == MAX_PER_SECOND + 3
    assert all(LINE.match(line) for line in lines), lines[:3]
    assert lines[-1] == ("ns:tcp0 [21/Sep/2026:14:13:21 +0000] EVENTS_SUPPRESSED "
                         f"{10_000 - MAX_PER_SECOND} more BINDING_TCP_CONNECTION_REFUSED "
                         f"suppressed")
    assert lines[0] == ("ns:tcp0 [21/Sep/2026:14:13:20 +0000] BINDING_TCP_CONNECTION_REFUSED "
                        "127.0.0.1 0")
    assert [line.split()[3] for line in lines[-3:-1]] == ["OTHER", "BINDING_TCP_CONNECTION_REFUSED"]
    assert len(log.recent) == 1000 and log.recent[-1] == lines[-1], "recent keeps every event"


def test_the_next_second_prints_again() -> None:
    now = [100.0]
    out = io.StringIO()
    log = EventLog("ns", clock=lambda: now[0], stdout=out, max_per_second=2)
    for _ in range(5):
        log.emit("b", "X", "-")
    now[0] = 101.5
    log.emit("b", "X", "again")
    assert log.flush(timeout=5)
    names = [line.split("] ")[1] for line in out.getvalue().splitlines()]
    assert names == ["X -", "X -", "EVENTS_SUPPRESSED 3 more X suppressed", "X again"]


def test_sinks_get_what_is_printed_so_a_flood_is_bounded_there_too() -> None:
    now = [1000.2]
    log = EventLog("ns", clock=lambda: now[0], stdout=io.StringIO(), max_per_second=3)
    got: list[tuple[float, str, str, str, str]] = []
    log.sinks.append(lambda *event: got.append(event))
    for i in range(10):
        log.emit("tcp0", "BINDING_TCP_REFUSED", f"peer {i}\x1b")
    now[0] = 1001.5
    log.tick()
    assert got == [(1000.2, "ns", "tcp0", "BINDING_TCP_REFUSED", f"peer {i}\\x1b")
                   for i in range(3)] + \
        [(1001.5, "ns", "tcp0", "EVENTS_SUPPRESSED", "7 more BINDING_TCP_REFUSED suppressed")]
