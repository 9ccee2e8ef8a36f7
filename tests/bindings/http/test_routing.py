"""The http binding's route conditions: header patterns, captures, any-of conditions."""

from __future__ import annotations

from ssekd.bindings.http.routing import Condition, HeaderPattern, match_any


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
