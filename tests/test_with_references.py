"""Unit tests of the bindings whose `with` holds references (sse-kafka, http-filesystem): both
resolve them through `ssekd.patterns`, and a request lacking a value its route refers to is a 404,
like a path no route matches."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from twisted.web.test.requesthelper import DummyRequest

from ssekd.bindings.http.roles import HttpContext
from ssekd.bindings.http_filesystem import FilesRoute, HttpFilesystemProxy
from ssekd.bindings.kafka.start import Start
from ssekd.bindings.sse.roles import StreamRequest
from ssekd.bindings.sse_kafka.proxy import SseKafkaProxy, SseKafkaRoute
from ssekd.patterns import Pattern
from ssekd.telemetry.events import EventLog


class FakeCache:
    def __init__(self) -> None:
        self.topics: list[str] = []
        self.keys: list[bytes | None] = []

    def subscribe(self, topic: str, encoder: Any, sink: Any, start: Start) -> Any:
        self.topics.append(topic)
        self.keys.append(encoder.filters[0].key)
        return object()

    def topic(self, name: str) -> Any:
        return None  # followed (the proxy asks before making the topic's metric series)


@dataclass
class Session:
    identity: str | None


def _proxy() -> tuple[SseKafkaProxy, FakeCache, EventLog]:
    cache = FakeCache()
    route = SseKafkaRoute((Pattern.compile("/mine/{topic}"),), "cc",
                          {"topic": "${params.topic}",
                           "filters": [{"key": "${guarded['jwt0'].identity}"}]})
    log = EventLog("t")
    return SseKafkaProxy("p", (route,), {"cc": cache}, log), cache, log


def _request(path: str, sessions: dict[str, Any], query: dict[str, str] | None = None,
             headers: dict[str, str] | None = None) -> StreamRequest:
    context = HttpContext("http0", sessions=sessions)
    context.credential_query = frozenset({"access_token"})
    return StreamRequest(path, None, query or {}, context, f"GET {path}", headers or {})


def test_identity_of_the_guard_becomes_the_filter_key() -> None:
    proxy, cache, _ = _proxy()
    assert not isinstance(proxy.open(_request("/mine/items", {"jwt0": Session("alice")}), None),
                          int)
    assert (cache.topics, cache.keys) == (["items"], [b"alice"])


def test_a_request_without_that_identity_is_404() -> None:
    proxy, cache, log = _proxy()
    assert proxy.open(_request("/mine/items", {}), None) == 404
    assert proxy.open(_request("/mine/items", {"jwt0": Session(None)}), None) == 404
    assert cache.topics == []
    assert log.recent[-1].endswith(
        "BINDING_SSE_KAFKA_NO_ROUTE GET /mine/items: no identity for guard jwt0"), log.recent


def test_topic_from_the_query_and_key_from_a_header() -> None:
    """A header or query value is held to what a path capture is: a topic name Kafka allows
    and not an internal topic; and beyond that, no control character (a line break) and no
    credentials (ssekd additions, Zilla #1508)."""
    cache = FakeCache()
    route = SseKafkaRoute((Pattern.compile("/item"),), "cc",
                          {"topic": "${query.stream}", "filters": [{"key": "${headers.x-item}"}]})
    log = EventLog("t")
    proxy = SseKafkaProxy("p", (route,), {"cc": cache}, log)
    opened = proxy.open(_request("/item", {}, {"stream": "orders"}, {"x-item": "42"}), None)
    assert not isinstance(opened, int)
    assert (cache.topics, cache.keys) == (["orders"], [b"42"])
    for query, headers, why in [
            ({"stream": "orders"}, {}, "no header x-item"),
            ({}, {"x-item": "42"}, "no query parameter stream"),
            ({"stream": "orders"}, {"x-item": "42\r\nevent: forged"}, "control characters"),
            ({"stream": "orders\n"}, {"x-item": "42"}, "control characters"),
            ({"stream": "__consumer_offsets"}, {"x-item": "42"}, "internal topic"),
            ({"stream": "_schemas"}, {"x-item": "42"}, "internal topic"),
            ({"stream": "a,b"}, {"x-item": "42"}, "not a topic name"),
            ({"stream": "orders", "access_token": "x"}, {"x-item": "42"}, None)]:
        request = _request("/item", {}, query, headers)
        if why is None:
            assert not isinstance(proxy.open(request, None), int)
            continue
        assert proxy.open(request, None) == 404, (query, headers)
        assert why in log.recent[-1], log.recent[-1]
    assert cache.topics == ["orders", "orders"]
    # a parameter the http binding reads credentials from is never a value
    route = SseKafkaRoute((Pattern.compile("/leak"),), "cc", {"topic": "${query.access_token}"})
    proxy = SseKafkaProxy("p", (route,), {"cc": cache}, log)
    assert proxy.open(_request("/leak", {}, {"access_token": "orders"}), None) == 404
    assert "carries credentials" in log.recent[-1]


class FakeFiles:
    def __init__(self) -> None:
        self.served: list[str] = []

    def serve(self, request: Any, path: str) -> bytes:
        self.served.append(path)
        return b"file"


def test_http_filesystem_maps_to_the_identity_or_answers_404() -> None:
    files = FakeFiles()
    route = FilesRoute((Pattern.compile("/home/{path}", rest=True),),
                       "users/${guarded['jwt0'].identity}/${params.path}", files)
    other = FilesRoute((Pattern.compile("/{path}", rest=True),), "${params.path}", files)
    proxy = HttpFilesystemProxy("map0", [route, other])
    request = DummyRequest([b"home", b"a.txt"])
    request.path = b"/home/a.txt"
    assert proxy.render(request, HttpContext("http0", sessions={"jwt0": Session("alice")})) \
        == b"file"
    assert files.served == ["users/alice/a.txt"]
    request = DummyRequest([b"home", b"a.txt"])
    request.path = b"/home/a.txt"
    assert proxy.render(request, HttpContext("http0")) == b""
    assert request.responseCode == 404, "the first matching route decides; no fall-through"
    assert files.served == ["users/alice/a.txt"]
