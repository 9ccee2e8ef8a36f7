"""Zilla's asyncapi.sse.proxy on ssekd, as published: an asyncapi server for the example's SSE
spec whose exit is an asyncapi client of the same spec, relaying the event stream of the
`sse-server` upstream (`SSE_SERVER_HOST`/`SSE_SERVER_PORT`, a stand-in for Zilla's
extras-sse-server image here) and checking each event's data against the operation's message
payload (`eventPayload`: `id` an integer >= 0). test.sh: a stream of `/events/1` gets the good
event and not the bad one. Beyond test.sh: many events, good and bad mixed, arrive in order,
each good one once and no bad one; the path reaches the upstream as it came; a browser that
comes back with its last id resumes from the relay without a refused event, and when the
upstream drops, the relay asks it from the id of the last event it read (a refused one
included); the refusals are reported as events; a path the spec has no operation for is 404;
a reload (SIGHUP) of an edited spec checks with its new schema.

The daemon runs one process (`--workers 1`): what is checked beyond test.sh is what one relay
holds (one upstream connection per URL, its ring), and with several workers each has its own."""

from __future__ import annotations

import json
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.zilla_examples.conftest import RunExample
from tests.support.daemon import start_daemon
from tests.support.relay import ONE_PROCESS
from tests.support.sse_stand_in import SseStandIn
from tests.support.wait import wait_until
from tests.support.zilla_examples import Example

pytestmark = [pytest.mark.daemon]

# test.sh's GIVEN, as it writes them
INPUT_GOOD = b'{ "name": "event name", "data": { "id": 1, "name": "Hello World!" } }\n'
INPUT_BAD = b'{ "name": "event name", "data": { "id": -1, "name": "Hello bad World!" } }\n'
EXPECTED = 'data:{"id":1,"name":"Hello World!"}'


@pytest.fixture
def stand_in() -> Iterator[SseStandIn]:
    upstream = SseStandIn()
    yield upstream
    upstream.close()


@pytest.fixture
def example(run_example: RunExample, stand_in: SseStandIn) -> Example:
    """The example with its `sse-server` at the stand-in (its compose environment's
    `SSE_SERVER_HOST` and `SSE_SERVER_PORT`), one process."""
    example = run_example("asyncapi.sse.proxy", kafka=False, start=False)
    env = {**example.env, "SSE_SERVER_HOST": "127.0.0.1", "SSE_SERVER_PORT": str(stand_in.port)}
    example.daemon = start_daemon(example.config, env=env, wait_ports=[example.port(7114)],
                                  extra_args=ONE_PROCESS)
    return example


class Stream:
    """`curl -N --http2 -H "Accept:text/event-stream" <url>` in the background, its output in a
    file."""

    def __init__(self, url: str, out: Path, seconds: float, *headers: str) -> None:
        self.out = out
        args = [a for h in headers for a in ("-H", h)]
        self._sink = out.open("w")
        self.process = subprocess.Popen(
            ["curl", "-s", "-N", "--http2", "-H", "Accept:text/event-stream", *args,
             "--max-time", str(seconds), url], stdout=self._sink)

    def text(self) -> str:
        return self.out.read_text()

    def data(self) -> list[str]:
        return [line for line in self.text().splitlines() if line.startswith("data:")]

    def wait(self) -> None:
        try:
            self.process.wait(30)
        finally:
            if self.process.poll() is None:
                self.process.kill()
            self._sink.close()


def good(i: int) -> bytes:
    return json.dumps({"name": "event name", "id": f"e{i}",
                       "data": {"id": i, "name": f"event {i}"}}).encode() + b"\n"


def bad(i: int, data: object = None) -> bytes:
    return json.dumps({"name": "event name", "id": f"e{i}",
                       "data": {"id": -i, "name": f"bad {i}"} if data is None else data}
                      ).encode() + b"\n"


def test_the_good_event_arrives_and_the_bad_one_does_not_as_test_sh_says(
        example: Example, stand_in: SseStandIn, tmp_path: Path) -> None:
    port = example.port(7114)
    stream = Stream(f"http://localhost:{port}/events/1", tmp_path / "out.txt", 3)
    wait_until(lambda: stand_in.streams() >= 1, 5, what="the relay's upstream stream")
    stand_in.write_input(INPUT_GOOD)
    stand_in.write_input(INPUT_BAD)
    stream.wait()
    assert stream.data() == [EXPECTED]
    assert "event:event name" in stream.text()
    assert [path for path, _ in stand_in.requests] == ["/events/1"]
    assert example.daemon is not None
    example.daemon.wait_output("BINDING_SSE_EVENT_INVALID")
    line = _reports(example)[0]
    assert "GET http://127.0.0.1:" in line and "/events/1: event id none: ['id']: -1 is less " \
        "than the minimum of 0" in line


def test_many_events_good_and_bad_mixed_arrive_in_order_none_lost(
        example: Example, stand_in: SseStandIn, tmp_path: Path) -> None:
    port = example.port(7114)
    streams = [Stream(f"http://localhost:{port}/events/7", tmp_path / f"out{i}.txt", 8)
               for i in range(3)]
    wait_until(lambda: stand_in.streams() >= 1, 5, what="the relay's upstream stream")
    stand_in.write_input(good(0))  # once each stream has it, all three follow the one feed
    wait_until(lambda: all(len(s.data()) == 1 for s in streams), 5, what="the first event")
    lines = b""
    expected = [json.dumps({"id": 0, "name": "event 0"}, separators=(",", ":"))]
    refused = 0
    for i in range(1, 301):
        if i % 3 == 0:
            lines += bad(i)
            refused += 1
        elif i % 7 == 0:
            lines += bad(i, {"id": "not a number"})
            refused += 1
        elif i % 11 == 0:
            lines += bad(i, "not json at all")
            refused += 1
        else:
            lines += good(i)
            expected.append(json.dumps({"id": i, "name": f"event {i}"}, separators=(",", ":")))
    stand_in.write_input(lines)
    for s in streams:
        s.wait()
        assert s.data() == [f"data:{e}" for e in expected]
        ids = [line[3:] for line in s.text().splitlines() if line.startswith("id:")]
        assert ids == [f"e{json.loads(e)['id']}" for e in expected]
    assert len(stand_in.requests) == 1, "one upstream connection for the three streams"
    assert refused > 100 and len(expected) + refused == 301
    reports = _reports(example)
    assert reports and all("/events/7: event id e" in r for r in reports)


def test_the_path_reaches_the_upstream_as_it_came_and_other_paths_are_404(
        example: Example, stand_in: SseStandIn, tmp_path: Path) -> None:
    port = example.port(7114)
    stream = Stream(f"http://localhost:{port}/events/a%20b?x=1", tmp_path / "out.txt", 2)
    wait_until(lambda: stand_in.streams() >= 1, 5, what="the relay's upstream stream")
    stream.wait()
    assert stand_in.requests[0][0] == "/events/a%20b"  # the query is not passed on
    assert stand_in.requests[0][1]["accept"] == "text/event-stream"
    for path in ("/events", "/other/1", "/events/1/2"):
        try:
            urllib.request.urlopen(f"http://localhost:{port}{path}", timeout=5)
            raise AssertionError(f"{path} answered")
        except urllib.error.HTTPError as e:
            assert e.code == 404, path
    assert len(stand_in.requests) == 1


def test_resume_from_the_relay_and_from_the_upstream_skips_refused_events(
        example: Example, stand_in: SseStandIn, tmp_path: Path) -> None:
    port = example.port(7114)
    url = f"http://localhost:{port}/events/1"
    holder = Stream(url, tmp_path / "holder.txt", 12)  # keeps the feed and its ring open
    wait_until(lambda: stand_in.streams() >= 1, 5, what="the relay's upstream stream")
    stand_in.write_input(good(1) + bad(2) + good(3))
    wait_until(lambda: len(holder.data()) == 2, 5, what="the good events at the holder")
    resumed = Stream(url, tmp_path / "resumed.txt", 2, "Last-Event-ID: e1")
    resumed.wait()
    assert resumed.data() == ['data:{"id":3,"name":"event 3"}']
    # the upstream drops after a refused event: the relay asks from its id, read but refused
    time.sleep(1.1)  # past the one report per second of the first refusal
    stand_in.write_input(bad(4))
    wait_until(lambda: any("event id e4" in r for r in _reports(example)), 5,
               what="the refusal of e4 reported")
    stand_in.end_streams()
    wait_until(lambda: len(stand_in.requests) >= 2, 10, what="the relay's reconnection")
    assert stand_in.requests[1][1].get("last-event-id") == "e4"
    wait_until(lambda: stand_in.streams() >= 1, 5, what="the upstream stream again")
    stand_in.write_input(good(5))
    holder.wait()
    assert holder.data() == ['data:{"id":1,"name":"event 1"}', 'data:{"id":3,"name":"event 3"}',
                             'data:{"id":5,"name":"event 5"}']


def test_a_first_stream_with_a_last_event_id_asks_the_upstream_from_it(
        example: Example, stand_in: SseStandIn, tmp_path: Path) -> None:
    port = example.port(7114)
    stream = Stream(f"http://localhost:{port}/events/2", tmp_path / "out.txt", 2,
                    "Last-Event-ID: e41")
    wait_until(lambda: stand_in.streams() >= 1, 5, what="the relay's upstream stream")
    stream.wait()
    assert stand_in.requests[0][1].get("last-event-id") == "e41"


def _reports(example: Example) -> list[str]:
    """The daemon's `BINDING_SSE_EVENT_INVALID` lines."""
    assert example.daemon is not None
    return [line for line in example.daemon.output().splitlines()
            if "BINDING_SSE_EVENT_INVALID" in line]


def test_a_spec_whose_schema_changes_is_checked_with_the_new_one_after_sighup(
        example: Example, stand_in: SseStandIn, tmp_path: Path) -> None:
    """The spec is part of the config: after a reload the relay checks with the schema the spec
    now says (`minimum: 2`), so an event the old one took is refused."""
    port = example.port(7114)
    url = f"http://localhost:{port}/events/1"
    spec = example.root("/etc/zilla/specs/sse-asyncapi.yaml")
    spec.write_text(spec.read_text().replace("minimum: 0", "minimum: 2"))
    assert example.daemon is not None
    example.daemon.signal(signal.SIGHUP)
    example.daemon.wait_output("CONFIG_RELOADED")
    stream = Stream(url, tmp_path / "out.txt", 3)
    wait_until(lambda: stand_in.streams() >= 1, 5, what="the relay's upstream stream")
    stand_in.write_input(good(1) + good(2))
    stream.wait()
    assert stream.data() == ['data:{"id":2,"name":"event 2"}']
    assert any("event id e1: ['id']: 1 is less than the minimum of 2" in r
               for r in _reports(example))
