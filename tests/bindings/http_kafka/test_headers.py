"""What http-kafka reads from request headers and writes to Kafka: the correlation id as Zilla
derives it (vectors from Zilla's protocol scripts), If-Match, Prefer, and which request headers
become Kafka headers, in which order."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from twisted.web.test.requesthelper import DummyRequest

from ssekd.bindings.http_kafka.headers import (
    HeaderCopy,
    IfMatchRefused,
    Prefer,
    correlation_id,
    forwarded,
    parse_if_match,
    parse_prefer,
    progress_of,
    response_header,
    without_credentials,
)

VECTORS = json.loads((Path(__file__).parents[2] / "data" / "http-kafka-correlation.json")
                     .read_text())["cases"]


@pytest.mark.parametrize("case", VECTORS, ids=[c["scenario"].split()[0] for c in VECTORS])
def test_correlation_id_is_zillas(case: dict[str, object]) -> None:
    headers = [(str(n), str(v).encode()) for n, v in case["headers"]]  # type: ignore[attr-defined]
    got = correlation_id(str(case["idempotency_key"]), str(case["key"]).encode(), headers,
                         str(case["body"]).encode())
    assert got == case["correlation_id"]


def test_a_different_body_or_condition_is_another_correlation() -> None:
    base = [(":method", b"PUT"), ("if-match", b"1")]
    one = correlation_id("k", b"t1", base, b'{"title":"a"}')
    assert one == correlation_id("k", b"t1", base, b'{"title":"a"}')
    assert one != correlation_id("k", b"t1", base, b'{"title":"b"}')
    assert one != correlation_id("k", b"t1", [(":method", b"PUT"), ("if-match", b"2")],
                                 b'{"title":"a"}')
    assert one.startswith("k-")


def test_if_match_forwards_the_etag_of_an_event_id() -> None:
    assert parse_if_match("AQQABAIC/revision=42") == "revision=42"
    assert parse_if_match("AQYAAAICBAA=/1") == "1"
    assert parse_if_match("AQYAAAICBAA=/a/b") == "a/b"  # cut at the first slash


@pytest.mark.parametrize("value", ["AQQABAIC", '"AQQABAIC/1"', 'W/"x"', "*", "AQQABAIC/",
                                   "not base64!/1", ""])
def test_if_match_that_would_go_out_unconditional_is_refused(value: str) -> None:
    """Zilla drops these silently and writes without a condition; ssekd refuses them."""
    with pytest.raises(IfMatchRefused):
        parse_if_match(value)


def test_prefer() -> None:
    assert parse_prefer(None) == Prefer()
    assert parse_prefer([b"respond-async"]) == Prefer(True, None)
    assert parse_prefer([b"respond-async, wait=5"]) == Prefer(True, 5.0)
    assert parse_prefer([b"wait=86400"]) == Prefer(False, 86400.0)
    assert parse_prefer([b"return=minimal; wait = 3", b"respond-async"]) == Prefer(True, 3.0)
    assert parse_prefer([b"wait=-1", b"wait=soon"]) == Prefer()


def test_progress_of_an_if_none_match() -> None:
    assert progress_of("AQQAAgIC") == "AQQAAgIC"
    assert progress_of("AQQABAIC/revision=42") == "AQQABAIC"
    assert progress_of('"quoted"') is None


_PSEUDO = [(":method", "PUT"), (":scheme", "https"), (":authority", "example.com:9090"),
           (":path", "/items/1")]


def _request(*headers: tuple[bytes, bytes]) -> DummyRequest:
    request = DummyRequest([b"items"])
    for name, value in headers:
        request.requestHeaders.addRawHeader(name, value)
    return request


def _reply_route(**kw: Any) -> HeaderCopy:
    return HeaderCopy.for_route(True, kw.get("copy"), kw.get("never", ()),
                                kw.get("written", ("zilla:reply-to", "zilla:correlation-id")))


def test_forwarded_headers_keep_order_and_leave_out_the_connections_and_credentials() -> None:
    """A route with a reply copies what Zilla copies (pseudo-headers, then every header in
    order), less the connection's own headers and credentials."""
    request = _request((b"Content-Type", b"application/json"), (b"Content-Length", b"20"),
                       (b"If-Match", b"AQQABAIC/revision=42"), (b"Authorization", b"Bearer t"),
                       (b"Cookie", b"session=1"), (b"Prefer", b"respond-async"),
                       (b"Host", b"example.com"), (b"Connection", b"keep-alive"),
                       (b"Idempotency-Key", b"k1"), (b"X-Tag", b"a"), (b"X-Tag", b"b"))
    assert forwarded(request, _PSEUDO, "revision=42", _reply_route()) == [
        (":method", b"PUT"), (":scheme", b"https"), (":authority", b"example.com:9090"),
        (":path", b"/items/1"), ("content-type", b"application/json"),
        ("if-match", b"revision=42"), ("idempotency-key", b"k1"), ("x-tag", b"a"),
        ("x-tag", b"b")]


def test_a_route_without_a_reply_copies_only_the_content_type_and_the_condition() -> None:
    """Zilla's no-reply scripts carry `content-type` and the overrides only; ssekd keeps an
    `If-Match` too (as its etag), so that a conditional write never goes out without it."""
    request = _request((b"Content-Type", b"application/json"), (b"X-Trace", b"t1"),
                       (b"If-Match", b"AQQABAIC/revision=42"), (b"Idempotency-Key", b"k1"),
                       (b"X-Api-Key", b"secret"))
    rule = HeaderCopy.for_route(False, None, (), ("origin",))
    assert forwarded(request, _PSEUDO, "revision=42", rule) == [
        ("content-type", b"application/json"), ("if-match", b"revision=42")]


@pytest.mark.parametrize("name", ["user", "User", "zilla:identity", "zilla:reply-to",
                                  "zilla:correlation-id", "zilla:anything", "x-correlation"])
def test_a_client_header_never_pre_empts_what_the_route_writes(name: str) -> None:
    """A header the route overrides, the reply-to and correlation headers (here renamed for
    the route) and every `zilla:` name come from the route, never from the client - not even
    when a `copy` list names them."""
    written = ("user", "zilla:reply-to", "x-correlation")
    rules = (_reply_route(written=written), _reply_route(written=written, copy=[name, "x-ok"]),
             HeaderCopy.for_route(False, None, (), written))
    assert not any(rule.takes(name.lower()) for rule in rules)
    if ":" not in name:  # Twisted takes no such name from a client at all
        request = _request((name.encode(), b"admin"), (b"X-Ok", b"1"))
        for rule in rules:
            got = forwarded(request, [], None, rule)
            assert all(n != name.lower() for n, _ in got), (rule, got)


@pytest.mark.parametrize("name", [b"X-Api-Key", b"Api-Key", b"X-Auth-Token", b"X-Access-Token",
                                  b"X-Session-Id", b"X-Amz-Security-Token", b"X-Client-Secret",
                                  b"X-Password", b"X-CSRF-Token", b"X-Hub-Signature",
                                  b"Proxy-Authorization", b"X-Credentials"])
def test_headers_named_like_secrets_stay_out_of_a_route_that_copies_every_header(
        name: bytes) -> None:
    request = _request((name, b"s3cret"), (b"X-Tag", b"a"))
    assert forwarded(request, [], None, _reply_route()) == [("x-tag", b"a")]
    # a route that lists one copies it: the name alone does not make it a credential
    if name != b"Proxy-Authorization":
        assert forwarded(request, [], None, _reply_route(copy=[name.decode()])) == \
            [(name.decode().lower(), b"s3cret")]


def test_the_headers_the_authorization_reads_tokens_from_are_never_copied() -> None:
    request = _request((b"X-Jwt", b"eyJhbGciOi.x.y"), (b"Authorization", b"Bearer t"),
                       (b"X-Tag", b"a"))
    for rule in (_reply_route(), _reply_route(copy=["x-jwt", "authorization", "x-tag"])):
        assert forwarded(request, [], None, rule, frozenset({"x-jwt"})) == [("x-tag", b"a")]


def test_a_route_lists_what_to_copy_and_what_never_to() -> None:
    request = _request((b"Content-Type", b"text/plain"), (b"X-Trace", b"t1"),
                       (b"X-Internal", b"no"), (b"X-Other", b"o"))
    assert forwarded(request, _PSEUDO, None, _reply_route(copy=[":path", "X-Trace"])) == [
        (":path", b"/items/1"), ("x-trace", b"t1")]
    assert forwarded(request, _PSEUDO, None, _reply_route(never=["x-internal"])) == [
        *[(n, v.encode()) for n, v in _PSEUDO], ("content-type", b"text/plain"),
        ("x-trace", b"t1"), ("x-other", b"o")]


def test_reply_headers_that_may_be_response_headers() -> None:
    assert response_header("location", b"/items/1")
    assert response_header("content-type", b"application/json")
    assert not response_header("content-length", b"5")
    assert not response_header("transfer-encoding", b"chunked")
    assert not response_header("x-bad", b"a\r\nSet-Cookie: x=1")
    assert not response_header("bad name", b"1")


def test_the_token_query_parameters_stay_out_of_the_path_kafka_gets() -> None:
    names = frozenset({"access_token"})
    assert without_credentials("/items?x=1&access_token=eyJ.a.b&y=2", names) == "/items?x=1&y=2"
    assert without_credentials("/items?access_token=t", names) == "/items"
    assert without_credentials("/items?access%5Ftoken=t&z", names) == "/items?z"
    assert without_credentials("/items?x=1", frozenset()) == "/items?x=1"
