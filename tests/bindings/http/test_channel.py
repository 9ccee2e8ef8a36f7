"""Unit tests of single pieces: route patterns, origins, port lists, the request-head deadline."""

from __future__ import annotations

import pytest
from twisted.internet.testing import MemoryReactorClock, StringTransport

from ssekd.bindings.filesystem import safe_segments
from ssekd.bindings.http.channel import LimitedHTTPChannel, Limits
from ssekd.bindings.http.cors import same_origin
from ssekd.bindings.http.routing import Condition, HeaderPattern, match_any
from ssekd.bindings.tcp import expand_ports


def cond(**headers: str) -> Condition:
    """`_path=` is the `:path` pseudo-header; other names are used with `_` as `-`."""
    return Condition(tuple(
        HeaderPattern.compile(":" + k[1:] if k.startswith("_") else k.replace("_", "-"), v)
        for k, v in headers.items()))


def test_path_pattern_matches_with_query_and_captures() -> None:
    c = cond(_path="/{topic}")
    assert c.match({":path": "/items"}) == {"topic": "items"}
    assert c.match({":path": "/items?lastEventId=x"}) == {"topic": "items"}
    assert c.match({":path": "/items/more"}) is None
    star = cond(_path="/static/*")
    assert star.match({":path": "/static/a/b.css"}) == {}
    assert star.match({":path": "/other"}) is None


def test_every_listed_header_must_match_and_any_condition_may() -> None:
    a = cond(_scheme="http", _authority="localhost:7114")
    b = cond(_scheme="https", _authority="localhost:7143")
    assert match_any([a, b], {":scheme": "https", ":authority": "localhost:7143"}) == {}
    assert match_any([a, b], {":scheme": "https", ":authority": "localhost:7114"}) is None
    assert match_any([], {":scheme": "x"}) == {}
    assert cond(x_tenant="{t}").match({"x-tenant": "acme corp"}) == {"t": "acme corp"}


def test_same_origin_uses_default_ports() -> None:
    assert same_origin("http://localhost", "http", "localhost:80")
    assert same_origin("https://LOCALHOST:7143", "https", "localhost:7143")
    assert not same_origin("http://localhost:7143", "https", "localhost:7143")
    assert not same_origin("null", "http", "localhost:80")
    assert not same_origin("http://[::1", "http", "localhost:80")


def test_expand_ports() -> None:
    assert expand_ports(7114) == [7114]
    assert expand_ports("8080-8082") == [8080, 8081, 8082]
    assert expand_ports([7143, "7114-7115", 7143]) == [7143, 7114, 7115]
    for bad in ("9-1", 0, "70000", "1-70000"):
        with pytest.raises(ValueError):
            expand_ports(bad)


@pytest.mark.parametrize("path,ok", [
    ("index.html", True), ("docs/", True), ("a%20b.txt", True), ("", True),
    ("../x", False), ("%2e%2e/x", False), ("a/../../x", False), ("/etc/passwd", False),
    ("%2fetc", False), ("a\\..\\b", False), ("%00", False), ("%ff", False), ("./x", False),
])
def test_safe_segments(path: str, ok: bool) -> None:
    assert (safe_segments(path) is not None) == ok


def channel(clock: MemoryReactorClock, **limits: float) -> tuple[LimitedHTTPChannel,
                                                                  StringTransport]:
    ch = LimitedHTTPChannel(Limits(**limits))  # type: ignore[arg-type]
    ch.callLater = clock.callLater
    transport = StringTransport()
    ch.makeConnection(transport)
    return ch, transport


def test_head_deadline_closes_a_slow_client_without_sleeping() -> None:
    clock = MemoryReactorClock()
    ch, transport = channel(clock, header_timeout=5.0)
    clock.advance(60)  # connected but silent: the head deadline is not armed yet
    assert not transport.disconnecting
    ch.dataReceived(b"GET / HTTP/1.1\r\n")
    for _ in range(4):
        clock.advance(1)
        ch.dataReceived(b"X-Slow: 1\r\n")  # trickling resets no deadline
    assert not transport.disconnecting
    clock.advance(1.01)
    assert transport.disconnecting
    assert transport.value().startswith(b"HTTP/1.1 408 Request Timeout")


def test_head_deadline_cancelled_once_headers_arrive() -> None:
    clock = MemoryReactorClock()
    ch, transport = channel(clock, header_timeout=5.0)
    ch.dataReceived(b"GET / HTTP/1.1\r\nHost: x\r\n")
    ch.requestFactory = _NeverFinishes
    ch.dataReceived(b"\r\n")
    clock.advance(100)
    assert not transport.disconnecting
    assert not clock.getDelayedCalls() or all(not c.active() for c in clock.getDelayedCalls())


def test_body_larger_than_limit_is_refused() -> None:
    clock = MemoryReactorClock()
    ch, transport = channel(clock, body_bytes=10)
    ch.dataReceived(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 11\r\n\r\n")
    assert transport.value().startswith(b"HTTP/1.1 413")
    assert transport.disconnecting


class _NeverFinishes:
    """A request object that accepts the request and never answers (like a live stream)."""

    def __init__(self, channel: object, queued: object = None) -> None:
        self.channel = channel

    def __getattr__(self, name: str) -> object:
        return lambda *a, **k: None
