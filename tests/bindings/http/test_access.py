"""The access log's answered event (`access.AccessLog`) on a DummyRequest and a
MemoryReactorClock: what a line holds, and the requests it leaves to others or says it cannot
know."""

from __future__ import annotations

import io
import json
from typing import Any

from twisted.internet.testing import MemoryReactorClock
from twisted.python.failure import Failure
from twisted.web.test.requesthelper import DummyRequest

from ssekd.bindings.http.access import ANSWERED, AccessLog
from ssekd.telemetry.events import EventLog


def setup(fmt: str = "text") -> tuple[AccessLog, Any, MemoryReactorClock]:
    """An access log whose events are printed (a stdout exporter: `events.recent` has them)."""
    clock = MemoryReactorClock()
    events = EventLog("ns", clock=clock.seconds, stdout=io.StringIO())
    events.format = fmt  # type: ignore[assignment]
    log = AccessLog("http0", events, clock, lambda uri: uri.replace("secret", "…"))
    return log, events.recent, clock


def request(uri: bytes = b"/items?token=secret", method: bytes = b"PUT") -> Any:
    req = DummyRequest([b"items"])
    req.uri, req.method, req.clientproto = uri, method, b"HTTP/1.1"
    return req


def answered(lines: Any) -> list[str]:
    return [line for line in lines if ANSWERED in line]


def test_a_line_says_status_bytes_time_route_and_version() -> None:
    log, lines, clock = setup()
    req = request()
    log.watch(req, clock.seconds())
    req.answered_by = "hk0"
    req.setResponseCode(412)
    clock.advance(0.25)
    req.write(b"x" * 24)
    req.sentLength = 24  # what twisted.web's Request counts (DummyRequest does not)
    req.finish()
    (line,) = answered(lines)
    assert line.endswith("peer=- method=PUT path=/items?token=… route=hk0 "
                         "status=412 bytes=24 duration_ms=250.0 version=HTTP/1.1"), line


def test_json_has_each_as_a_field() -> None:
    log, lines, clock = setup("json")
    req = request(b"/nowhere", b"GET")
    log.watch(req, clock.seconds())
    req.setResponseCode(404)
    req.finish()
    obj = json.loads(answered(lines)[0])
    assert (obj["method"], obj["path"], obj["route"], obj["status"], obj["bytes"]) == \
        ("GET", "/nowhere", "-", 404, 0)


def test_a_stream_is_left_to_its_end_event_and_a_gone_client_is_aborted() -> None:
    log, lines, clock = setup()
    stream = request(b"/events", b"GET")
    log.watch(stream, clock.seconds())
    stream.sse_stream = True
    stream.finish()
    assert answered(lines) == []
    gone = request(b"/items", b"GET")
    log.watch(gone, clock.seconds())
    gone.processingFailed(Failure(ConnectionError("gone")))  # the client went away
    (line,) = answered(lines)
    assert line.endswith(" aborted=true"), line


def test_a_refused_body_counts_no_bytes_and_an_early_refusal_names_what_was_read() -> None:
    log, lines, clock = setup()
    dropped = request(b"/items", b"GET")
    log.watch(dropped, clock.seconds())
    dropped.setResponseCode(503)
    dropped.body_dropped = True
    dropped.write(b"x" * 900_000)
    dropped.sentLength = 900_000
    dropped.finish()
    assert " status=503 bytes=0 " in answered(lines)[-1]
    early = DummyRequest([b""])  # the head is read, the request not made yet
    early.method = b"(no method yet)"
    log.refused(early, 413, clock.seconds(), b"POST", b"/items", b"HTTP/1.1")
    assert " method=POST path=/items route=- status=413 bytes=0 " in answered(lines)[-1]
    unknown = DummyRequest([b""])
    unknown.method, unknown.uri = b"(no method yet)", b"(no uri yet)"
    log.refused(unknown, 408)
    assert " method=- path=- route=- status=408 " in answered(lines)[-1]
