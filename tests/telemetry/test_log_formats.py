"""Every line a daemon writes parses, in both formats of the stdout exporter: Zilla's text lines
and JSON lines (`options: {format: json}`, an ssekd addition). twistd's own lines (starting up,
shutting down) come as `TWISTED_<LEVEL>` events in the same format, and each stream that ends
says who, what, how long, how much and why (`BINDING_SSE_STREAM_ENDED`)."""

from __future__ import annotations

import http.client
import io
import json
import re
import signal
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from twisted.logger import LogLevel
from twisted.python.failure import Failure

from ssekd.dev.broker import free_port
from ssekd.telemetry.events import EventLog, severity
from ssekd.telemetry.twistd_log import twistd_line
from tests.support.broker import Kafka
from tests.support.daemon import Daemon, start_daemon
from tests.support.sse import SseClient
from tests.support.streamd import write_config

LINE = re.compile(r"(?P<namespace>[a-z][\w-]*):(?P<binding>[a-z][\w-]*) "
                  r"\[(?P<time>\d{2}/[A-Z][a-z]{2}/\d{4}:\d{2}:\d{2}:\d{2} \+0000)\] "
                  r"(?P<name>[A-Z][A-Z_]+) (?P<detail>.+)")
ENDED = re.compile(r"peer=127\.0\.0\.1:\d+ method=GET path=(?P<path>\S+) route=(?P<route>\S+) "
                   r"status=200 duration_s=(?P<duration>[\d.]+) bytes=(?P<bytes>\d+) "
                   r"events=(?P<events>\d+) why=(?P<why>\w+)")
SEVERITIES = {"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"}


def parse_text(line: str) -> dict[str, Any]:
    m = LINE.fullmatch(line)
    assert m is not None, f"not an event line: {line!r}"
    datetime.strptime(m["time"], "%d/%b/%Y:%H:%M:%S %z")
    found: dict[str, Any] = {"event": m["name"], "binding": m["binding"],
                             "namespace": m["namespace"], "detail": m["detail"]}
    if m["name"] == "BINDING_SSE_STREAM_ENDED":
        parts = ENDED.fullmatch(m["detail"])
        assert parts is not None, m["detail"]
        found.update(path=parts["path"], route=parts["route"], why=parts["why"],
                     bytes=int(parts["bytes"]), events=int(parts["events"]),
                     duration_s=float(parts["duration"]))
    return found


def parse_json(line: str) -> dict[str, Any]:
    obj = json.loads(line)
    assert isinstance(obj, dict), line
    assert {"time", "severity", "namespace", "binding", "event", "detail"} <= set(obj), obj
    assert obj["severity"] in SEVERITIES, obj
    assert datetime.strptime(obj["time"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
    return dict(obj)


def lifecycle(kafka: Kafka, tmp_path: Path, format_: str, workers: int) -> list[str]:
    """Start a daemon, stream, end a stream from the client, ask for a missing route, reload,
    then stop it with a stream open: every line it wrote."""
    topic = kafka.topic(1)
    kafka.send(topic, [b"a", b"b", b"c"])
    port = free_port()
    config = write_config(tmp_path, kafka.bootstrap, port)
    text = config.read_text()
    if format_ == "json":
        assert "      type: stdout\n" in text
        text = text.replace("      type: stdout\n", "      type: stdout\n"
                                                    "      options: {format: json}\n")
        config.write_text(text)
    daemon: Daemon = start_daemon(config, wait_ports=[port],
                                  extra_args=["--workers", str(workers)])
    try:
        # (start_daemon reads the text format to know the workers started)
        daemon.wait_output("ENGINE_STARTED", count=workers + (workers > 1))
        with SseClient(port, f"/events/{topic}") as gone:
            assert [e.data for e in gone.events(3)] == ["a", "b", "c"]
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("GET", "/nowhere")
        assert conn.getresponse().status == 404
        conn.close()
        daemon.signal(signal.SIGHUP)
        daemon.wait_output("CONFIG_RELOADED", count=workers)
        stays = SseClient(port, f"/events/{topic}")
        assert len(stays.events(3)) == 3
        daemon.wait_output("BINDING_SSE_STREAM_ENDED")  # the first stream's
        assert daemon.stop() == 0
        stays.close()
    finally:
        daemon.stop()
    return daemon.output().splitlines()


@pytest.mark.daemon
@pytest.mark.broker
@pytest.mark.parametrize(("format_", "workers"), [("text", 2), ("json", 1), ("json", 2)])
def test_every_line_of_a_daemons_output_parses(format_: str, workers: int, kafka: Kafka,
                                                tmp_path: Path) -> None:
    lines = lifecycle(kafka, tmp_path, format_, workers)
    parse = parse_json if format_ == "json" else parse_text
    records = [parse(line) for line in lines]  # fails on the first line that does not parse
    names = [r["event"] for r in records]
    for expected in ("TWISTED_INFO", "ENGINE_LISTENING", "ENGINE_STARTED", "CONFIG_RELOADED",
                     "BINDING_HTTP_REQUEST_ACCEPTED", "BINDING_HTTP_REQUEST_ANSWERED",
                     "BINDING_SSE_STREAM_ENDED", "ENGINE_STOPPED"):
        assert expected in names, (expected, names)
    # the access line of the 404 (a stream's is its end event, not an answered one)
    (answered,) = [r for r in records if r["event"] == "BINDING_HTTP_REQUEST_ANSWERED"]
    if format_ == "json":
        assert (answered["method"], answered["path"], answered["status"], answered["bytes"],
                answered["version"]) == ("GET", "/nowhere", 404, 0, "HTTP/1.1"), answered
        assert answered["duration_ms"] >= 0 and answered["severity"] == "INFO"
    else:
        assert " method=GET path=/nowhere route=" in answered["detail"]
        assert " status=404 bytes=0 duration_ms=" in answered["detail"]
    assert any("starting up" in r["detail"] for r in records if r["event"] == "TWISTED_INFO")
    ended = [r for r in records if r["event"] == "BINDING_SSE_STREAM_ENDED"]
    assert sorted(r["why"] for r in ended) == ["client", "drain"], ended
    for r in ended:
        assert r["binding"] == "sse" and r["route"] == "/events/{topic}"
        assert r["events"] == 3 and r["bytes"] > 0 and r["duration_s"] >= 0
        if format_ == "json":
            assert r["status"] == 200 and r["method"] == "GET" and r["severity"] == "INFO"
            assert r["peer"].startswith("127.0.0.1:")
    if format_ == "json":
        assert all(r["severity"] == "INFO" for r in records if r["event"] == "TWISTED_INFO")


def test_a_traceback_stays_on_one_line_in_both_formats() -> None:
    events = EventLog("ns", clock=lambda: 1_795_341_662.0)
    try:
        raise ValueError("a bug\nover two lines")
    except ValueError:
        failure = Failure()
    event = {"log_namespace": "twisted.web.server", "log_level": LogLevel.critical,
             "log_format": "Unhandled error", "log_failure": failure,
             "log_time": 1_795_341_662.5}
    text = twistd_line(events, event)
    assert "\n" not in text and "Traceback (most recent call last)" in text
    assert text.startswith("ns:ssekd [22/Nov/2026:10:01:02 +0000] TWISTED_CRITICAL "
                           "twisted.web.server: Unhandled error\\x0aTraceback")
    events.format = "json"
    obj = json.loads(twistd_line(events, event))
    assert obj["severity"] == "CRITICAL" and obj["event"] == "TWISTED_CRITICAL"
    assert obj["source"] == "twisted.web.server" and obj["time"] == "2026-11-22T10:01:02.500Z"
    assert "ValueError: a bug" in obj["detail"]


def test_json_lines_carry_a_severity_and_the_events_own_fields() -> None:
    out = io.StringIO()
    events = EventLog("ns", clock=lambda: 1_795_341_662.25, stdout=out)
    events.format = "json"
    line = events.emit("sse", "BINDING_SSE_STREAM_ENDED", "peer=... why=client",
                       {"why": "client", "events": 3, "event": "not taken"})
    assert json.loads(line) == {"time": "2026-11-22T10:01:02.250Z", "severity": "INFO",
                                "namespace": "ns", "binding": "sse",
                                "event": "BINDING_SSE_STREAM_ENDED",
                                "detail": "peer=... why=client", "why": "client", "events": 3}
    assert events.flush() and out.getvalue() == line + "\n"
    assert severity("CONFIG_RELOAD_FAILED") == "ERROR"
    assert severity("BINDING_KAFKA_BROKER_UNAVAILABLE") == "WARNING"
    assert severity("GUARD_JWT_AUTHORIZATION_FAILED") == "INFO"  # a client's, not ours
    assert severity("ENGINE_STARTED") == "INFO"
