"""What http-kafka reads from request headers and writes to Kafka: the correlation id as Zilla
derives it (vectors from Zilla's protocol scripts), If-Match, Prefer, and which request headers
become Kafka headers, in which order."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from twisted.web.test.requesthelper import DummyRequest

from ssekd.bindings.http_kafka.headers import (
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
from ssekd.bindings.http_kafka.produce import topic_allowed

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


def test_forwarded_headers_keep_order_and_leave_out_the_connections_and_credentials() -> None:
    request = DummyRequest([b"items"])
    for name, value in [(b"Content-Type", b"application/json"), (b"Content-Length", b"20"),
                        (b"If-Match", b"AQQABAIC/revision=42"), (b"Authorization", b"Bearer t"),
                        (b"Cookie", b"session=1"), (b"Prefer", b"respond-async"),
                        (b"Host", b"example.com"), (b"Connection", b"keep-alive"),
                        (b"Idempotency-Key", b"k1"), (b"X-Tag", b"a"), (b"X-Tag", b"b")]:
        request.requestHeaders.addRawHeader(name, value)
    pseudo = [(":method", "PUT"), (":scheme", "https"), (":authority", "example.com:9090"),
              (":path", "/items/1")]
    assert forwarded(request, pseudo, "revision=42") == [
        (":method", b"PUT"), (":scheme", b"https"), (":authority", b"example.com:9090"),
        (":path", b"/items/1"), ("content-type", b"application/json"),
        ("if-match", b"revision=42"), ("idempotency-key", b"k1"), ("x-tag", b"a"),
        ("x-tag", b"b")]


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


def test_a_topic_from_the_request_must_be_a_whole_kafka_name_and_not_internal() -> None:
    assert topic_allowed("items", "items")
    assert topic_allowed("alice-items", "${params.who}-items")
    assert not topic_allowed("items\n", "${params.t}")
    assert not topic_allowed("a/b", "${params.t}")
    assert not topic_allowed("__consumer_offsets", "${params.t}")
    assert topic_allowed("_schemas", "_schemas")  # named by the route itself
