"""The sse client's `requests` content check on a feed, with a scripted upstream
(`test_relay`'s): refused events never reach a stream nor the ring, the rest keep their order,
bytes and ids, the count and the event report them, a refused event's id is the one the upstream
is asked from on reconnect, and a schema not held yet holds the events in order."""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.testing import MemoryReactorClock

from ssekd.bindings.sse.client import SseClient, SseClientRoute
from ssekd.bindings.sse.content import EventContent, event_data
from ssekd.bindings.sse.relay import FeedSettings
from ssekd.bindings.sse.roles import StreamRequest
from ssekd.catalogs.catalog import Schema
from ssekd.catalogs.local import LocalCatalog
from ssekd.catalogs.models import FieldModel, ModelConfig
from ssekd.patterns import Pattern
from ssekd.telemetry.events import EventLog
from ssekd.telemetry.metrics import Metrics
from tests.bindings.sse.test_relay import Sink, Upstream

SCHEMA = ('{"type": "object", "required": ["id"], "properties": {"id": {"type": "integer", '
          '"minimum": 0}, "name": {"type": "string"}}}')


class Setup:
    def __init__(self, catalog: Any = None, history: int = 5) -> None:
        self.clock = MemoryReactorClock()
        self.events = EventLog("test", clock=self.clock.seconds)
        self.metrics = Metrics()
        self.upstream = Upstream()
        catalog = catalog or LocalCatalog("payloads", {"event": Schema("event", None, None,
                                                                       SCHEMA)})
        config = ModelConfig("json", None, "payloads", "event", None, "latest")
        model = FieldModel(config, catalog, self.clock,
                           lambda e, d: self.events.emit("relay", e, d), convert=False)
        self.invalid = self.metrics.counter("sse.client.invalid", "relay", path="/events/{id}")
        content = EventContent("/events/{id}", Pattern.compile("/events/{id}"), model,
                               self.invalid)
        self.client = SseClient("relay", [SseClientRoute((), self.upstream)], self.clock,
                                self.events, FeedSettings(retry=1000, history=history),
                                contents=[content])
        self.client.startService()

    def open(self, path: str = "/events/1", last_id: str | None = None) -> tuple[Any, Sink]:
        sink = Sink()
        handle = self.client.open(StreamRequest(path, last_id, {}, None, f"GET {path}"), sink)
        assert not isinstance(handle, int)
        return handle, sink

    def lines(self, name: str) -> list[str]:
        return [line for line in self.events.recent if name in line]


def test_event_data_joins_the_data_lines_as_a_browser_does() -> None:
    assert event_data(b"id:1\nevent:e\ndata:{\"a\":\ndata:1}\n\n") == b'{"a":\n1}'
    assert event_data(b"id:7\n\n") is None


def test_a_refused_event_reaches_no_stream_and_the_rest_keep_order_and_ids() -> None:
    s = Setup()
    _, first = s.open()
    _, second = s.open()
    s.upstream.last.answer()
    s.upstream.last.send(b'id:1\ndata:{"id":1,"name":"Hello World!"}\n\n'
                         b'id:2\nevent:event name\ndata:{"id":-1,"name":"bad"}\n\n'
                         b'id:3\ndata:not json\n\n'
                         b'id:4\ndata:{"id":4}\n\n'
                         b'id:5\n\n')
    expected = b'id:1\ndata:{"id":1,"name":"Hello World!"}\n\nid:4\ndata:{"id":4}\n\nid:5\n\n'
    assert first.data == expected and second.data == expected
    assert s.invalid.value == 2  # once per upstream event, not per stream
    [report] = s.lines("BINDING_SSE_EVENT_INVALID")  # the second is within the same second
    assert "GET http://upstream:8080/events/1: event id 2: ['id']: -1 is less than the minimum " \
           "of 0" in report
    s.clock.advance(2)
    s.upstream.last.send(b'id:6\ndata:[]\n\n')
    assert "event id 6" in s.lines("BINDING_SSE_EVENT_INVALID")[-1]
    assert "(1 more invalid since the last report)" in s.lines("BINDING_SSE_EVENT_INVALID")[-1]
    assert not first.ended


def test_a_stream_resuming_from_the_ring_never_sees_a_refused_event() -> None:
    s = Setup()
    s.open()
    s.upstream.last.answer()
    s.upstream.last.send(b'id:1\ndata:{"id":1}\n\nid:2\ndata:{"id":-2}\n\nid:3\ndata:{"id":3}\n\n')
    _, resumed = s.open(last_id="1")
    assert resumed.data == b'id:3\ndata:{"id":3}\n\n'


def test_the_upstream_is_asked_from_the_id_of_a_refused_event() -> None:
    """The refused event was read: asking from the good one before it would have it sent again
    (and refused again) after every reconnect."""
    s = Setup()
    s.open()
    s.upstream.last.answer()
    s.upstream.last.send(b'id:1\ndata:{"id":1}\n\nid:2\ndata:{"id":-2}\n\n')
    s.upstream.last.end()
    s.clock.advance(5)
    assert s.upstream.last.headers["Last-Event-ID"] == "2"


def test_a_path_no_entry_matches_is_relayed_unchecked() -> None:
    s = Setup()
    _, sink = s.open("/other")
    s.upstream.last.answer()
    s.upstream.last.send(b"data:anything\n\n")
    assert sink.data == b"data:anything\n\n"
    assert s.invalid.value == 0


class SlowCatalog(LocalCatalog):
    """A catalog whose schema arrives when the test says (a registry that has not answered)."""

    def __init__(self) -> None:
        super().__init__("payloads", {"event": Schema("event", 1, 1, SCHEMA)})
        self.waiting: list[Deferred[Schema]] = []

    def resolve(self, subject: str, version: str | int) -> Deferred[Schema]:
        d: Deferred[Schema] = Deferred()
        self.waiting.append(d)
        return d

    def arrive(self) -> None:
        for d in self.waiting:
            d.callback(self.subjects["event"])
        self.waiting.clear()


def test_events_wait_in_order_for_a_schema_not_held_yet() -> None:
    catalog = SlowCatalog()
    s = Setup(catalog, history=3)
    _, sink = s.open()
    s.upstream.last.answer()
    s.upstream.last.send(b'id:1\ndata:{"id":1}\n\nid:2\ndata:{"id":-1}\n\nid:3\ndata:{"id":3}\n\n')
    assert sink.data == b""
    catalog.arrive()
    assert sink.data == b'id:1\ndata:{"id":1}\n\nid:3\ndata:{"id":3}\n\n'
    assert s.invalid.value == 1


def test_held_events_beyond_the_history_are_dropped_oldest_first_and_counted() -> None:
    catalog = SlowCatalog()
    s = Setup(catalog, history=2)
    _, sink = s.open()
    s.upstream.last.answer()
    s.upstream.last.send(b''.join(b'id:%d\ndata:{"id":%d}\n\n' % (i, i) for i in range(1, 5)))
    assert s.invalid.value == 2
    assert "its schema was not available" in s.lines("BINDING_SSE_EVENT_INVALID")[0]
    catalog.arrive()
    assert sink.data == b'id:3\ndata:{"id":3}\n\nid:4\ndata:{"id":4}\n\n'

