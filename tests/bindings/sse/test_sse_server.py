"""The sse binding's resource on a MemoryReactorClock: keepalive timing, statuses, where the last
event id comes from, and backpressure reaching the stream's handle."""

from __future__ import annotations

from typing import Any

from twisted.internet.testing import MemoryReactorClock
from twisted.web.test.requesthelper import DummyRequest

from ssekd.bindings.http.roles import HttpContext
from ssekd.bindings.sse.server import SseServer
from ssekd.telemetry.events import EventLog


class FakeHandle:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def pause(self) -> None:
        self.calls.append("pause")

    def resume(self) -> None:
        self.calls.append("resume")

    def close(self) -> None:
        self.calls.append("close")


class FakeSource:
    def __init__(self, answer: Any = None) -> None:
        self.answer = answer
        self.requests: list[Any] = []
        self.handle = FakeHandle()

    def open(self, request: Any, sink: Any) -> Any:
        self.requests.append(request)
        self.sink = sink
        return self.answer if self.answer is not None else self.handle


class StreamingRequest(DummyRequest):  # type: ignore[misc]
    """DummyRequest drives only pull producers; record a push producer instead."""

    producer: Any = None

    def registerProducer(self, producer: Any, streaming: bool) -> None:
        assert streaming
        self.producer = producer

    def unregisterProducer(self) -> None:
        self.producer = None


def _request(path: bytes = b"/events", method: bytes = b"GET",
             headers: dict[bytes, bytes] | None = None) -> DummyRequest:
    req = StreamingRequest(path.split(b"?")[0].strip(b"/").split(b"/"))
    req.method = method
    req.path = path.split(b"?")[0]
    req.uri = path
    for k, v in (headers or {}).items():
        req.requestHeaders.setRawHeaders(k, [v])
    return req


def _server(source: FakeSource, clock: MemoryReactorClock, **kw: Any) -> SseServer:
    return SseServer("sse", source, clock, EventLog("test"), **kw)  # type: ignore[arg-type]


def test_keepalive_after_idle_time_only() -> None:
    clock = MemoryReactorClock()
    source = FakeSource()
    server = _server(source, clock, max_idle=15.0, retry=2000)
    req = _request()
    server.render(req, HttpContext("http"))
    assert b"".join(req.written) == b"retry:2000\n\n"
    clock.advance(10)
    source.sink.write(b"data:x\n\n")
    clock.advance(10)  # 10 s since the last write: nothing yet
    assert req.written[-1] == b"data:x\n\n"
    clock.advance(5)
    assert req.written[-1] == b":\n\n"
    n = len(req.written)
    clock.advance(14.9)
    assert len(req.written) == n
    clock.advance(0.1)
    assert len(req.written) == n + 1
    server.stopService()
    assert req.finished
    assert source.handle.calls == ["close"]
    assert not clock.getDelayedCalls()


def test_sse_statuses_and_last_event_id_sources() -> None:
    clock = MemoryReactorClock()
    source = FakeSource()
    server = _server(source, clock)
    req = _request(method=b"POST")
    server.render(req, HttpContext("http"))
    assert req.responseCode == 405
    req = _request(headers={b"last-event-id": b"A" * 255})
    server.render(req, HttpContext("http"))
    assert req.responseCode == 400
    req = _request(b"/events?lastEventId=%5Bnull%2C%22AQIAAg%3D%3D%22%5D")
    server.render(req, HttpContext("http"))
    assert source.requests[-1].last_event_id == '[null,"AQIAAg=="]'
    assert source.requests[-1].path == "/events"
    req = _request(b"/events?lastEventId=ignored", headers={b"last-event-id": b"AQIAAg=="})
    server.render(req, HttpContext("http"))
    assert source.requests[-1].last_event_id == "AQIAAg=="
    assert req.responseHeaders.getRawHeaders(b"content-type") == [b"text/event-stream"]
    assert req.responseHeaders.getRawHeaders(b"connection") is None
    source.answer = 404
    req = _request(b"/nothing")
    server.render(req, HttpContext("http"))
    assert req.responseCode == 404


def test_backpressure_reaches_the_handle() -> None:
    clock = MemoryReactorClock()
    source = FakeSource()
    server = _server(source, clock)
    req = _request()
    server.render(req, HttpContext("http"))
    stream = source.sink
    stream.pauseProducing()
    stream.resumeProducing()
    stream.stopProducing()
    assert source.handle.calls == ["pause", "resume", "close"]
    assert not server.streams


class _Session:
    def __init__(self, identity: str, *roles: str) -> None:
        self.identity = identity
        self.roles = frozenset(roles)
        self.expires = None


def test_routes_pick_the_exit_by_path_then_the_binding_exit_then_404() -> None:
    """Zilla's sse routes: the first route whose path matches takes the stream, else the
    binding's own exit, else `404` (and a binding may have routes only)."""
    from ssekd.bindings.sse.server import SseRoute
    from ssekd.patterns import Pattern

    clock = MemoryReactorClock()
    news, other, default = FakeSource(), FakeSource(), FakeSource()
    routes = [SseRoute((Pattern.compile("/news/*"),), news),  # type: ignore[arg-type]
              SseRoute((Pattern.compile("/a"), Pattern.compile("/b")), other)]  # type: ignore[arg-type]
    server = _server(default, clock, routes=routes)
    for path, source in ((b"/news/x", news), (b"/b", other), (b"/events", default)):
        server.render(_request(path), HttpContext("http"))
        assert source.requests[-1].path == path.decode()
    only_routes = SseServer("sse", None, clock, EventLog("t"), routes=routes)
    req = _request(b"/events")
    only_routes.render(req, HttpContext("http"))
    assert req.responseCode == 404 and not default.requests[1:]


def test_a_guarded_route_admits_only_sessions_with_its_roles() -> None:
    """No session: `401` with `WWW-Authenticate`; a session without the role, or a token the
    http binding refused, `403`; a guard that cannot check yet: a `200` stream that ends with
    `retry:` (a browser comes back); the right role opens the stream. The source sees only
    the admitted one."""
    from ssekd.bindings.sse.server import SseRoute
    from ssekd.spi.guard import Refusal

    clock = MemoryReactorClock()
    source = FakeSource()
    route = SseRoute((), source, {"jwt0": ("proxy:stream",)})  # type: ignore[arg-type]
    server = SseServer("sse", None, clock, EventLog("t"), routes=[route])

    bodies: list[Any] = []

    def answer(ctx: HttpContext) -> DummyRequest:
        req = _request(b"/events")
        bodies.append(server.render(req, ctx))
        return req

    none = answer(HttpContext("http"))
    assert none.responseCode == 401
    assert none.responseHeaders.getRawHeaders(b"www-authenticate") == [b"Bearer"]
    lacking = HttpContext("http", sessions={"jwt0": _Session("alice", "read")})  # type: ignore[dict-item]
    assert answer(lacking).responseCode == 403
    refused = HttpContext("http", refusals={"jwt0": Refusal(403, "token expired")})
    assert answer(refused).responseCode == 403
    later = answer(HttpContext("http", refusals={"jwt0": Refusal(503, "keys", 2.0)}))
    assert later.responseCode == 200 and b"retry:2000" in bodies[-1]
    assert source.requests == []
    admitted = HttpContext("http", sessions={"jwt0": _Session("alice", "proxy:stream")})  # type: ignore[dict-item]
    assert answer(admitted).responseCode == 200
    assert len(source.requests) == 1


class _Sinks:
    """A source that keeps the sink of each stream it opens."""

    def __init__(self) -> None:
        self.sinks: list[Any] = []

    def open(self, request: Any, sink: Any) -> Any:
        self.sinks.append(sink)
        return FakeHandle()


class _Recording:
    """A sink that is not an SSE stream (e.g. one topic of a multi-topic stream)."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.writes.append(data)


def test_a_batch_written_to_a_group_at_once_is_what_each_stream_would_have_written() -> None:
    """`write_each` (the tail's fan-out of one batch) against `write` stream by stream: the same
    bytes on every connection, the same counts per stream and per server, ended streams
    skipped, and a sink of another kind written in its turn."""
    from ssekd.bindings.http.stream_writer import ChunkedWriter
    from ssekd.bindings.sse.stream import SseStream
    from ssekd.spi.stream import event_block, write_each
    from tests.support.http_fakes import http11, http_site

    def opened(n: int) -> tuple[SseServer, list[Any], list[Any]]:
        clock = MemoryReactorClock()
        source = _Sinks()
        sse = _server(source, clock)  # type: ignore[arg-type]
        site = http_site(clock, sse)
        transports = []
        for _ in range(n):
            proto, transport = http11(site)
            proto.dataReceived(b"GET /events HTTP/1.1\r\nHost: localhost\r\n\r\n")
            transports.append(transport)
        for t in transports:
            t.clear()
        return sse, source.sinks, transports

    batches = [b"id:1\ndata:a\n\nid:2\ndata:b\n\n", event_block(b"id:3\ndata:c\n\n", 1)]
    one_by_one, sinks_a, transports_a = opened(3)
    at_once, sinks_b, transports_b = opened(3)
    assert all(type(s) is SseStream for s in sinks_a + sinks_b)
    assert all(type(s._writer) is ChunkedWriter for s in sinks_b), "HTTP/1.1: the one loop"
    for sinks in (sinks_a, sinks_b):
        sinks[2].stopProducing()  # ended: written to no more
    other_a, other_b = _Recording(), _Recording()
    for data in batches:
        for s in (sinks_a[0], other_a, *sinks_a[1:]):
            s.write(data)
        write_each([sinks_b[0], other_b, *sinks_b[1:]], data)
    assert [t.value() for t in transports_a] == [t.value() for t in transports_b]
    assert transports_b[0].value() and not transports_b[2].value()
    assert other_a.writes == other_b.writes == batches
    assert [(s.events, s.written) for s in sinks_a] == [(s.events, s.written) for s in sinks_b]
    assert sinks_b[0].events == 3
    assert one_by_one.stats.data_sent.value == at_once.stats.data_sent.value > 0
    for sinks in (sinks_a, sinks_b):
        sinks[0].end()  # the response's size (http.response.size) is counted as it ends
    body = sum(len(b) for b in batches)
    assert sinks_a[0].request.sentLength == sinks_b[0].request.sentLength >= body
