"""The sse client's feeds on a MemoryReactorClock, with a scripted upstream: one connection per
URL, events passed on unchanged, reconnects with Last-Event-ID and backoff, every kind of bad
upstream as an event line and a retry, the ring for resuming, slow streams, lingering."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from twisted.internet.defer import Deferred
from twisted.internet.error import ConnectionLost
from twisted.internet.testing import MemoryReactorClock
from twisted.python.failure import Failure
from twisted.web.client import ResponseDone
from twisted.web.http_headers import Headers

from ssekd.bindings.http.roles import HttpContext
from ssekd.bindings.sse.client import SseClient, SseClientRoute, upstream_target
from ssekd.bindings.sse.relay import FeedSettings
from ssekd.bindings.sse.roles import StreamRequest, TryLater
from ssekd.telemetry.events import EventLog

SSE = {"content-type": "text/event-stream; charset=utf-8"}


class Body:
    """The transport Agent gives a response body's protocol."""

    def __init__(self, protocol: Any) -> None:
        self.protocol = protocol
        self.stopped = False

    def stopProducing(self) -> None:
        if not self.stopped:
            self.stopped = True
            self.protocol.connectionLost(Failure(ConnectionLost("stopped")))


class Response:
    def __init__(self, code: int, headers: Mapping[str, str]) -> None:
        self.code = code
        self.headers = Headers({k.encode(): [v.encode()] for k, v in headers.items()})
        self.body: Body | None = None

    def deliverBody(self, protocol: Any) -> None:
        self.body = Body(protocol)
        protocol.makeConnection(self.body)


class Request:
    def __init__(self, target: str, headers: Mapping[str, str]) -> None:
        self.target = target
        self.headers = dict(headers)
        self.cancelled = False
        self.deferred: Deferred[Any] = Deferred(lambda d: setattr(self, "cancelled", True))
        self.response: Response | None = None

    def answer(self, code: int = 200, headers: Mapping[str, str] = SSE) -> Response:
        self.response = Response(code, headers)
        self.deferred.callback(self.response)
        return self.response

    def send(self, data: bytes) -> None:
        assert self.response is not None and self.response.body is not None
        self.response.body.protocol.dataReceived(data)

    def end(self, reason: Failure | None = None) -> None:
        assert self.response is not None and self.response.body is not None
        self.response.body.protocol.connectionLost(reason or Failure(ResponseDone()))

    @property
    def stopped(self) -> bool:
        return self.response is not None and self.response.body is not None \
            and self.response.body.stopped


class Upstream:
    """A scripted http client: each GET is a `Request` the test answers."""

    origin = "http://upstream:8080"

    def __init__(self) -> None:
        self.requests: list[Request] = []

    def get(self, target: str, headers: Mapping[str, str]) -> Deferred[Any]:
        self.requests.append(Request(target, headers))
        return self.requests[-1].deferred

    @property
    def last(self) -> Request:
        return self.requests[-1]


class Sink:
    def __init__(self) -> None:
        self.data = b""
        self.ended = False

    def write(self, data: bytes) -> None:
        assert not self.ended
        self.data += data

    def end(self) -> None:
        self.ended = True


class Setup:
    def __init__(self, max_upstreams: int = 100, **settings: Any) -> None:
        self.clock = MemoryReactorClock()
        self.events = EventLog("test", clock=self.clock.seconds)
        self.upstream = Upstream()
        self.other = Upstream()
        self.client = SseClient("relay", [
            SseClientRoute((), self.upstream)], self.clock, self.events,
            FeedSettings(**{"retry": 1000, "idle_timeout": 60, "history": 5, "linger": 30,
                            **settings}), max_upstreams=max_upstreams)

    def open(self, path: str = "/events", last_id: str | None = None,
             query: Mapping[str, str] | None = None) -> tuple[Any, Sink]:
        sink = Sink()
        handle = self.client.open(StreamRequest(path, last_id, query or {}, None, f"GET {path}"),
                                  sink)
        assert not isinstance(handle, int)
        return handle, sink

    def lines(self, name: str) -> list[str]:
        return [line for line in self.events.recent if name in line]


def test_one_upstream_request_per_url_and_every_field_passed_on_to_every_stream() -> None:
    s = Setup()
    sinks = [s.open()[1] for _ in range(3)]
    s.open("/other")
    assert [r.target for r in s.upstream.requests] == ["/events", "/other"]
    assert s.upstream.requests[0].headers == {"Accept": "text/event-stream",
                                              "Cache-Control": "no-cache"}
    s.upstream.requests[0].answer()
    s.upstream.requests[0].send(b"retry:2500\n\nid:1\nevent:tick\ndata:a\ndata:b\n\n:\n\n")
    for sink in sinks:
        assert sink.data == b"retry:2500\n\nid:1\nevent:tick\ndata:a\ndata:b\n\n"
    assert len(s.lines("BINDING_SSE_UPSTREAM_CONNECTED")) == 1


def test_query_order_and_last_event_id_parameter_do_not_make_another_upstream() -> None:
    def target(query: dict[str, str]) -> str:
        return upstream_target(StreamRequest("/e", None, query), ("a", "b", "lastEventId"))
    assert target({"b": "2", "a": "1 2", "lastEventId": "x"}) == "/e?a=1%202&b=2"
    assert target({"a": "1 2", "b": "2"}) == "/e?a=1%202&b=2"
    assert target({}) == "/e"


JWT = "eyJhbGciOiJSUzI1NiIsImtpZCI6ImsxIn0.eyJzdWIiOiJhbGljZSJ9.c2lnbmF0dXJl"


def _request(path: str, query: dict[str, str], credential_query: frozenset[str] = frozenset()
             ) -> StreamRequest:
    context = HttpContext("http0", credential_query=credential_query)
    return StreamRequest(path, None, query, context, f"GET {path}")


def test_no_query_parameter_goes_upstream_unless_the_route_names_it() -> None:
    """Every parameter but `lastEventId` used to go upstream: `?access_token=<JWT>` (the way an
    EventSource sends a token) reached the upstream's request line and the relay's events."""
    assert upstream_target(_request("/e", {"access_token": JWT, "x": "1"})) == "/e"
    assert upstream_target(_request("/e", {"topic": "a", "x": "1"}), ("topic",)) == "/e?topic=a"


def test_credential_parameters_never_go_upstream_even_when_the_route_names_them() -> None:
    secret = frozenset({"access_token"})
    request = _request("/e", {"access_token": JWT, "v": "2"}, secret)
    assert upstream_target(request, ("access_token", "v")) == "/e?v=2"


def test_each_token_and_each_made_up_parameter_shares_the_one_feed() -> None:
    """Each token was another URL, so each user got an upstream connection and a ring of their
    own, and one client adding `&x=1..N` filled every `max-upstreams` slot alone."""
    s = Setup(max_upstreams=3)
    secret = frozenset({"access_token"})
    for i in range(50):
        token = JWT + str(i)
        handle = s.client.open(_request("/events", {"access_token": token, "x": str(i)}, secret),
                               Sink())
        assert not isinstance(handle, (int, TryLater)), i
    assert [r.target for r in s.upstream.requests] == ["/events"]
    assert len(s.client.feeds) == 1
    s.upstream.last.answer()
    s.upstream.last.end(Failure(ConnectionLost("gone")))
    for line in s.lines("BINDING_SSE_UPSTREAM"):
        assert "access_token" not in line and "eyJ" not in line, line


def test_route_query_names_key_the_feed() -> None:
    clock = MemoryReactorClock()
    upstream = Upstream()
    client = SseClient("relay", [SseClientRoute((), upstream, query=("topic",))], clock,
                       EventLog("test", clock=clock.seconds), FeedSettings())
    for topic, x in (("a", "1"), ("a", "2"), ("b", "1")):
        assert not isinstance(client.open(_request("/e", {"topic": topic, "x": x}), Sink()), int)
    assert [r.target for r in upstream.requests] == ["/e?topic=a", "/e?topic=b"]


@pytest.mark.parametrize("path", [
    "/events/../admin/secret", "/events/%2e%2e/internal", "/events/%2E%2E/x", "/events/.%2e/x",
    "/events/..;/admin", "/events/./x", "/events/%2e", "/events/..", "/events%2f..%2fadmin",
    "/events/a%2Fb", "/events/a%5cb", "/events/a\\b", "/events/%00", "/events/a%0d%0ab",
])
def test_relayed_paths_with_dot_segments_or_encoded_slashes_are_404(path: str) -> None:
    """`/events/../admin/secret` and `/events/%2e%2e/internal` matched `/events*` and reached
    the upstream as they were."""
    s = Setup()
    assert s.client.open(StreamRequest(path, None, {}, None, f"GET {path}"), Sink()) == 404
    assert s.upstream.requests == []
    assert s.lines("BINDING_SSE_CLIENT_NO_ROUTE")


def test_paths_with_dots_inside_names_still_relay() -> None:
    s = Setup()
    for path in ("/events/v1.2", "/events/..x", "/events/a..", "/events/.well-known", "/events/%20"):
        s.open(path)
    assert [r.target for r in s.upstream.requests] == [
        "/events/v1.2", "/events/..x", "/events/a..", "/events/.well-known", "/events/%20"]


def test_upstream_drop_reconnects_with_last_event_id_after_retry_and_backs_off() -> None:
    s = Setup()
    _, sink = s.open()
    first = s.upstream.last
    first.answer()
    first.send(b"id:41\ndata:x\n\nid:42\ndata:y\n\n")
    first.end(Failure(ConnectionLost("gone")))
    assert len(s.upstream.requests) == 1
    s.clock.advance(0.999)
    assert len(s.upstream.requests) == 1
    s.clock.advance(0.001)  # the binding's retry: 1 s
    assert s.upstream.last.headers["Last-Event-ID"] == "42"
    # each attempt that brings nothing doubles the wait: 1 s (above), then 2, 4, 8 s ...
    waits = []
    for _ in range(3):
        s.upstream.last.deferred.errback(Failure(ConnectionLost("refused")))
        n = len(s.upstream.requests)
        t = s.clock.seconds()
        while len(s.upstream.requests) == n:
            s.clock.advance(0.5)
        waits.append(s.clock.seconds() - t)
    assert waits == [2.0, 4.0, 8.0]
    s.upstream.last.answer()
    s.upstream.last.send(b"retry:500\n\nid:43\ndata:z\n\n")
    s.upstream.last.end()  # a clean end: again after the upstream's own retry
    s.clock.advance(0.5)
    assert s.upstream.last.headers["Last-Event-ID"] == "43"
    assert sink.data.endswith(b"id:42\ndata:y\n\nretry:500\n\nid:43\ndata:z\n\n")
    failed = s.lines("BINDING_SSE_UPSTREAM_FAILED")
    assert "GET http://upstream:8080/events: ConnectionLost" in failed[0]
    assert "the upstream ended the stream; again in 0.5 s" in failed[-1]


def test_the_backoff_stops_growing_at_its_cap() -> None:
    s = Setup(max_backoff=3.0)
    s.open()
    for _ in range(6):
        s.upstream.last.deferred.errback(Failure(ConnectionLost("refused")))
        s.clock.advance(3.0)
    assert len(s.upstream.requests) == 7
    assert s.lines("BINDING_SSE_UPSTREAM_FAILED")[-1].endswith("again in 3 s")


def bad_upstream(s: Setup, answer: tuple[int, dict[str, str]], send: bytes) -> Request:
    """Open /bad, answer it as given and send `send`; return the request."""
    s.open("/bad")
    request = s.upstream.last
    request.answer(*answer)
    if send:
        request.send(send)
    return request


def test_bad_upstreams_are_each_an_event_and_a_retry_and_other_feeds_go_on() -> None:
    cases = [
        ((503, SSE), b"", "status 503"),
        ((200, {"content-type": "text/html"}), b"", "content type text/html, not text/event"),
        ((200, {}), b"", "content type none"),
        ((200, SSE), b"data:" + b"x" * (1 << 20), "a line longer than 1048576 bytes"),
        ((200, SSE), b"data:\xc3\x28\n\n", "not UTF-8"),
    ]
    for answer, send, why in cases:
        s = Setup()
        _, good = s.open("/good")
        s.upstream.last.answer()
        good_upstream = s.upstream.last
        bad = bad_upstream(s, answer, send)
        assert bad.stopped, why
        assert why in s.lines("BINDING_SSE_UPSTREAM_FAILED")[-1]
        s.clock.advance(1.0)
        assert s.upstream.last is not bad and s.upstream.last.target == "/bad"
        good_upstream.send(b"id:1\ndata:fine\n\n")
        assert good.data == b"id:1\ndata:fine\n\n"


def test_an_upstream_that_never_answers_or_goes_quiet_is_given_up_after_idle_timeout() -> None:
    s = Setup(idle_timeout=20)
    s.open()
    silent = s.upstream.last
    s.clock.advance(19.9)
    assert not silent.cancelled
    s.clock.advance(0.1)
    assert silent.cancelled
    assert "no response in 20 s" in s.lines("BINDING_SSE_UPSTREAM_FAILED")[-1]
    s.clock.advance(1.0)
    quiet = s.upstream.last
    quiet.answer()
    for _ in range(5):  # keepalives keep it alive
        s.clock.advance(15)
        quiet.send(b":\n\n")
    assert not quiet.stopped
    s.clock.advance(20)
    assert quiet.stopped
    assert "nothing from the upstream for 20 s" in s.lines("BINDING_SSE_UPSTREAM_FAILED")[-1]


def test_an_id_in_the_ring_resumes_after_it_an_older_one_from_the_ring_start_with_a_note() -> None:
    s = Setup(history=3)
    s.open()
    s.upstream.last.answer()
    for i in range(1, 6):
        s.upstream.last.send(b"id:%d\ndata:e%d\n\n" % (i, i))
    _, resumed = s.open(last_id="4")
    assert resumed.data == b"id:5\ndata:e5\n\n"
    _, old = s.open(last_id="1")
    assert old.data.startswith(b": last event id 1 is not among the 3 events this relay holds")
    assert old.data.endswith(b"id:3\ndata:e3\n\nid:4\ndata:e4\n\nid:5\ndata:e5\n\n")
    _, new = s.open()
    assert new.data == b"id:3\ndata:e3\n\nid:4\ndata:e4\n\nid:5\ndata:e5\n\n"
    assert len(s.upstream.requests) == 1


def test_the_first_stream_of_a_url_asks_the_upstream_from_its_own_id() -> None:
    s = Setup()
    _, sink = s.open(last_id="17")
    assert s.upstream.last.headers["Last-Event-ID"] == "17"
    s.upstream.last.answer()
    s.upstream.last.send(b"id:18\ndata:x\n\n")
    assert sink.data == b"id:18\ndata:x\n\n"


def test_a_paused_stream_catches_up_from_the_ring_or_is_ended_when_it_fell_out() -> None:
    s = Setup(history=3)
    slow, slow_sink = s.open()
    lagging, lagging_sink = s.open()
    _, fast = s.open()
    s.upstream.last.answer()
    s.upstream.last.send(b"id:1\ndata:a\n\n")
    slow.pause()
    lagging.pause()
    s.upstream.last.send(b"id:2\ndata:b\n\nid:3\ndata:c\n\n")
    assert slow_sink.data == b"id:1\ndata:a\n\n"
    slow.resume()
    assert slow_sink.data == fast.data
    s.upstream.last.send(b"id:4\ndata:d\n\nid:5\ndata:e\n\n")
    assert lagging_sink.ended and b"fell behind" in lagging_sink.data
    assert b"id:4" not in lagging_sink.data
    assert lagging not in s.client.feeds[(id(s.upstream), "/events")].subscribers


def test_a_url_without_streams_keeps_its_ring_for_the_linger_then_closes() -> None:
    s = Setup(linger=30)
    handle, _ = s.open()
    s.upstream.last.answer()
    s.upstream.last.send(b"id:1\ndata:a\n\n")
    handle.close()
    s.clock.advance(29)
    _, back = s.open(last_id="1")  # a reload within the linger: same connection, same ring
    assert len(s.upstream.requests) == 1
    s.upstream.last.send(b"id:2\ndata:b\n\n")
    assert back.data == b"id:2\ndata:b\n\n"
    s.client.feeds[(id(s.upstream), "/events")].subscribers.clear()
    s.client.feeds[(id(s.upstream), "/events")].remove(handle)
    s.clock.advance(30)
    assert s.upstream.last.stopped and s.client.feeds == {}
    s.clock.advance(600)
    assert len(s.upstream.requests) == 1  # no reconnect after closing


def test_stopping_closes_every_upstream_and_ends_the_streams() -> None:
    s = Setup()
    _, sink = s.open()
    s.open("/other")
    s.upstream.requests[0].answer()
    s.client.stopService()
    assert sink.ended and s.upstream.requests[0].stopped and s.upstream.requests[1].cancelled
    s.clock.advance(600)
    assert len(s.upstream.requests) == 2


def test_beyond_max_upstreams_an_unfollowed_url_makes_room_else_the_stream_tries_later() -> None:
    s = Setup(max_upstreams=2)
    first, _ = s.open("/a")
    s.clock.advance(1)
    second, _ = s.open("/b")
    sink = Sink()
    refused = s.client.open(StreamRequest("/c", None, {}, None, "GET /c"), sink)
    assert isinstance(refused, TryLater) and "2 upstream URLs relayed (max-upstreams)" in \
        refused.reason
    assert [r.target for r in s.upstream.requests] == ["/a", "/b"]
    second.close()
    s.clock.advance(1)
    first.close()  # both lingering now: the one left longest ago gives way
    s.open("/c")
    assert s.upstream.requests[1].cancelled and not s.upstream.requests[0].cancelled
    assert sorted(k[1] for k in s.client.feeds) == ["/a", "/c"]


def test_a_url_whose_only_stream_fell_behind_lingers_then_closes() -> None:
    s = Setup(history=2, linger=30)
    handle, sink = s.open()
    s.upstream.last.answer()
    handle.pause()
    s.upstream.last.send(b"id:1\ndata:a\n\nid:2\ndata:b\n\nid:3\ndata:c\n\n")
    assert sink.ended
    s.clock.advance(30)
    assert s.upstream.last.stopped and s.client.feeds == {}
