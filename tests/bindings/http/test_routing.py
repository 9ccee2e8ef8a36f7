"""The http binding's route conditions: header patterns, captures, any-of conditions; and each
request matched against the routes once."""

from __future__ import annotations

from typing import Any

import pytest
from twisted.internet.testing import MemoryReactorClock
from twisted.web.server import Request

from ssekd.bindings.http.channel import Limits
from ssekd.bindings.http.cors import AccessControl
from ssekd.bindings.http.roles import HttpContext
from ssekd.bindings.http.routing import Condition, HeaderPattern, match_any
from ssekd.bindings.http.server import HttpRoot, HttpRoute, HttpSite
from ssekd.telemetry.events import EventLog
from tests.support.http_fakes import H2Peer, http11


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


class Recording:
    """An exit that takes bodies and records what routing captured for each request."""

    max_idle: float | None = None
    takes_body = True

    def __init__(self) -> None:
        self.seen: list[tuple[bytes, dict[str, str], bytes]] = []

    def render(self, request: Request, ctx: HttpContext) -> bytes:
        content: Any = request.content
        self.seen.append((request.method, dict(ctx.params), content.read()))
        return b"ok"


def _counted_site(monkeypatch: pytest.MonkeyPatch) -> tuple[HttpSite, Recording, list[str]]:
    """A site with one route capturing `{name}`, and a list that grows by one per route
    evaluation (`HttpRoot._route` is where every request is matched against the routes)."""
    evaluations: list[str] = []
    route = HttpRoot._route

    def counted(self: HttpRoot, headers: dict[str, str]) -> Any:
        evaluations.append(headers[":method"])
        return route(self, headers)
    monkeypatch.setattr(HttpRoot, "_route", counted)
    exit = Recording()
    root = HttpRoot("http0", [HttpRoute((cond(_path="/up/{name}"),), exit)], None,
                    AccessControl(), EventLog("test"))
    return HttpSite(root, Limits(), MemoryReactorClock()), exit, evaluations


def test_each_request_is_routed_once_over_http11(monkeypatch: pytest.MonkeyPatch) -> None:
    """The route decided when the head is in (to know whether a body is read) is the one the
    request is answered by: not routed again when it is rendered."""
    site, exit, evaluations = _counted_site(monkeypatch)
    proto, transport = http11(site)
    proto.dataReceived(b"GET /up/a HTTP/1.1\r\nHost: localhost\r\n\r\n")
    assert evaluations == ["GET"]
    proto.dataReceived(b"POST /up/b HTTP/1.1\r\nHost: localhost\r\nContent-Length: 3\r\n\r\nabc")
    assert evaluations == ["GET", "POST"]
    proto.dataReceived(b"POST /up/c HTTP/1.1\r\nHost: localhost\r\n"
                       b"Transfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n")
    assert evaluations == ["GET", "POST", "POST"]
    assert exit.seen == [(b"GET", {"name": "a"}, b""), (b"POST", {"name": "b"}, b"abc"),
                         (b"POST", {"name": "c"}, b"hi")]
    assert transport.value().count(b"200 OK") == 3


def test_each_request_is_routed_once_over_http2(monkeypatch: pytest.MonkeyPatch) -> None:
    site, exit, evaluations = _counted_site(monkeypatch)
    peer = H2Peer(site)
    get = peer.request("GET", "/up/a")
    peer.send()
    peer.read()
    assert evaluations == ["GET"]
    post = peer.request("POST", "/up/b", end_stream=False)
    peer.client.send_data(post, b"abc", end_stream=True)
    peer.send()
    peer.read()
    assert evaluations == ["GET", "POST"]
    assert exit.seen == [(b"GET", {"name": "a"}, b""), (b"POST", {"name": "b"}, b"abc")]
    assert peer.status(get) == peer.status(post) == "200"
