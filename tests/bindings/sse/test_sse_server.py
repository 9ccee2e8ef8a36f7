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
