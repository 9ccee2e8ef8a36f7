"""`options.requests` on its own (validation/): the models of values, which entry a request or
response selects, what a refusal says, and waiting for a schema registry (a real HTTP server
answering as one) with a clock that does not sleep."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from twisted.internet.defer import Deferred, maybeDeferred
from twisted.internet.testing import MemoryReactorClock

from ssekd.bindings.http.validation.builder import ModelBuilder
from ssekd.bindings.http.validation.requests import Refused, Requests, build_requests, compile_path
from ssekd.bindings.http.validation.values import IntegerModel, StringModel
from ssekd.bindings.http.validation.waiting import WAIT_SECONDS, settle
from ssekd.catalogs.catalog import Schema
from ssekd.catalogs.local import LocalCatalog
from ssekd.catalogs.models import Invalid, Pending
from ssekd.catalogs.registry import RegistryCatalog
from tests.support.schema_registry import Registry, avro_bytes, wire

ITEM = {"type": "object", "required": ["id", "status"], "additionalProperties": False,
        "properties": {"id": {"type": "integer"}, "status": {"type": "string"},
                       "tags": {"type": "array", "items": {"type": "string"}}}}
EVENT = {"type": "record", "name": "Event",
         "fields": [{"name": "id", "type": "long"}, {"name": "name", "type": "string"}]}


@pytest.fixture
def registry() -> Iterator[Registry]:
    r = Registry().start()
    yield r
    r.stop()


def _sync(f: Any) -> Deferred[Any]:
    """A registry request on this thread: the HTTP is real, no reactor needs to run."""
    return maybeDeferred(f)


def _build(entries: list[dict[str, Any]], catalogs: dict[str, Any] | None = None,
           clock: Any = None, responses: bool = False) -> tuple[Requests, ModelBuilder]:
    builder = ModelBuilder(catalogs or {}, clock or MemoryReactorClock(),
                           lambda name, detail: None, lambda path, message: (path, message))
    return build_requests(entries, builder, ("requests",), responses), builder


def _local() -> dict[str, Any]:
    return {"local": LocalCatalog("local", {"item": Schema("item", None, None,
                                                           json.dumps(ITEM))})}


def _refusal(check: Any) -> tuple[int, str] | None:
    try:
        check()
    except Refused as r:
        return r.status, r.reason
    return None


def test_string_and_integer_models() -> None:
    StringModel(min_length=2, max_length=3).check("éé".encode())
    for value, model, why in [
        (b"\xff", StringModel(), "not utf-8 text"),
        (b"a", StringModel(min_length=2), "shorter than 2 characters"),
        (b"abcd", StringModel(max_length=3), "longer than 3 characters"),
        (b"ab1", StringModel(pattern=__import__("re").compile("[a-z]+")),
         "does not match the pattern [a-z]+"),
        (b"2147483648", IntegerModel("int32"), "not an int32"),
        (b"1e3", IntegerModel("int64"), "not an int64"),
        (b" 1", IntegerModel("int64"), "not an int64"),
        (b"5", IntegerModel("int32", low=6), "below its range"),
        (b"5", IntegerModel("int32", multiple=2), "not a multiple of 2"),
        (b"\0\0\0", IntegerModel("int32", binary=True), "not a 4-byte int32"),
    ]:
        with pytest.raises(Invalid) as e:
            model.check(value)
        assert str(e.value) == why
    IntegerModel("int64").check(b"-9223372036854775808")
    IntegerModel("int32", binary=True, high=0).check(b"\xff\xff\xff\xff")  # -1


def test_ranges_are_read_as_zilla_writes_them() -> None:
    requests, builder = _build([{"path": "/n", "params": {"query": {
        "a": {"model": "int32", "range": "[1,10)"}, "b": {"model": "int64", "range": "(,0]"}}}}])
    entry = requests.select("GET", "/n", None)
    assert entry is not None and not builder.issues
    assert _refusal(lambda: entry.check_head("/n?a=1&a=9&b=0", [])) is None
    assert _refusal(lambda: entry.check_head("/n?a=10", [])) == (
        400, "query parameter a: above its range")
    assert _refusal(lambda: entry.check_head("/n?b=1", [])) == (
        400, "query parameter b: above its range")


def test_path_templates_match_as_zillas_do() -> None:
    pattern = compile_path("/items/{category}/{item-id}")
    found = pattern.match("/items/books/7")
    assert found is not None and list(found.groups()) == ["books", "7"]
    assert pattern.match("/items/books/7/") is not None, "a trailing slash is the same path"
    found = pattern.match("/items/a/b/c")
    assert found is not None and found.groups()[1] == "b/c", "the last one takes the rest"
    requests, _ = _build([{"path": "/items/{item-id}", "params": {"path": {"item-id": "int32"}}}])
    entry = requests.select("GET", "/items/x", None)
    assert entry is not None
    assert _refusal(lambda: entry.check_head("/items/x", [])) == (
        400, "path parameter item-id: not an int32"), "named as the config names it"
    assert pattern.match("/items/books") is None
    assert compile_path("/a.json").match("/aXjson") is None, "the rest is literal text"


def test_an_entry_is_selected_by_method_path_and_content_type() -> None:
    requests, _ = _build([
        {"path": "/items", "method": "POST", "content-type": ["application/json"],
         "headers": {"x-a": "int32"}},
        {"path": "/items", "method": "POST", "content-type": ["text/plain"],
         "headers": {"x-b": "int32"}},
        {"path": "/other", "headers": {"x-c": "int32"}},
    ])
    assert requests.select("GET", "/items", "text/plain") is None, "no entry for GET"
    first = requests.select("POST", "/items?x=1", "Application/JSON; charset=utf-8")
    assert first is not None and set(first.headers) == {"x-a"}
    second = requests.select("POST", "/items", "text/plain")
    assert second is not None and set(second.headers) == {"x-b"}
    assert requests.select("POST", "/items", None) is first, "none: Zilla's first entry"
    with pytest.raises(Refused) as e:
        requests.select("POST", "/items", "text/html")
    assert (e.value.status, e.value.reason) == (
        415, "content type not accepted here; expected one of application/json, text/plain")
    assert requests.select("DELETE", "/other", "anything/at-all") is not None, "any method"
    assert not requests.reads_body("POST", "/items", "application/json"), "no content model"


def test_what_is_absent_is_not_checked_and_each_occurrence_is() -> None:
    requests, _ = _build([{"path": "/q", "headers": {"X-Code": "int32"},
                           "params": {"query": {"page": "int32"}}, "content": "int32"}])
    entry = requests.select("GET", "/q", None)
    assert entry is not None
    assert _refusal(lambda: entry.check_head("/q?other=x", [("Accept", b"*/*")])) is None
    assert _refusal(lambda: entry.check_content(b"")) is None, "no body: nothing to check"
    assert _refusal(lambda: entry.check_head("/q?page=1&page=x", [])) == (
        400, "query parameter page: not an int32")
    assert _refusal(lambda: entry.check_head("/q?pag%65=x", [])) == (
        400, "query parameter page: not an int32"), "names are URL-decoded"
    assert _refusal(lambda: entry.check_head("/q", [("x-code", b"1"), ("X-CODE", b"y")])) == (
        400, "header x-code: not an int32")


def test_json_refusals_say_where_and_never_the_value() -> None:
    requests, builder = _build([{"path": "/j", "content": {
        "model": "json", "catalog": {"local": [{"subject": "item"}]}}}], _local())
    entry = requests.select("POST", "/j", "application/json")
    assert entry is not None and not builder.issues
    secret = "hunter2-secret"
    for body, why in [
        ({"id": 1, "status": "ok"}, None),
        ({"id": secret, "status": "ok"}, "content: .id: fails type integer"),
        ({"id": 1, "status": "ok", "tags": [secret, 3]}, "content: .tags[1]: fails type string"),
        ({"id": 1, secret: 1, "status": "ok"},
         "content: the document: has a property its schema does not allow"),
        ({"status": secret}, "content: the document: lacks required id"),
    ]:
        refusal = _refusal(lambda: entry.check_content(json.dumps(body).encode()))
        assert refusal == (None if why is None else (400, why)), body
    assert _refusal(lambda: entry.check_content(b"{" + secret.encode())) == (
        400, "content: not JSON")


def test_config_problems_are_issues_at_their_paths() -> None:
    _, builder = _build([
        {"path": "/a/{id}", "params": {"path": {"nid": "int32"}}},
        {"path": "/b", "content": {"model": "json", "catalog": {"nope": [{"subject": "x"}]}}},
        {"path": "/c", "content": {"model": "json", "catalog": {"local": [{"subject": "x"}]}}},
        {"path": "/d", "content": {"model": "avro", "catalog": {"local": [
            {"strategy": "encoded"}]}}},
        {"path": "/e", "headers": {"x": {"model": "string", "pattern": "("}}},
        {"path": "/f", "content": {"model": "json"}},
    ], _local())
    issues = dict(builder.issues)
    assert issues[("requests", 0, "params", "path", "nid")] == \
        "expected a parameter of the path /a/{id}: it has id"
    assert issues[("requests", 1, "content", "catalog", "nope")] == \
        "no catalog 'nope' under `catalogs`"
    assert "x version latest" in issues[("requests", 2, "content", "catalog", "local")]
    assert "local and has no ids" in issues[("requests", 3, "content", "catalog", "local")]
    assert issues[("requests", 4, "headers", "x", "pattern")].startswith(
        "expected a regular expression")
    assert issues[("requests", 5, "content")] == "a json model needs a `catalog` with its schema"


def test_responses_are_selected_by_status_and_content_type_the_last_wins() -> None:
    requests, _ = _build([{"path": "/r", "responses": [
        {"status": 200, "content-type": ["application/json"], "content": "int32"},
        {"status": [401, 404], "content-type": ["text/plain"], "content": "string"},
        {"content-type": ["application/json"], "headers": {"x-n": "int32"}},
    ]}], responses=True)
    entry = requests.select("GET", "/r", None)
    assert entry is not None
    last = entry.response(200, "application/json")
    assert last is not None and set(last.headers) == {"x-n"}, "the last that selects"
    plain = entry.response(404, "text/plain; charset=utf-8")
    assert plain is not None and isinstance(plain.content, StringModel)
    assert entry.response(500, "text/plain") is None
    server, _ = _build([{"path": "/r", "responses": [{"status": 200, "content": "int32"}]}])
    entry = server.select("GET", "/r", None)
    assert entry is not None and entry.responses == (), "a server checks no responses"


def test_avro_encoded_reads_the_schema_id_each_body_carries(registry: Registry) -> None:
    """`strategy: encoded` (http.kafka.avro.json): the registry's wire format, decoded with the
    schema of its id, fetched once; a plain record, an unknown id or bytes that are not that
    schema's record are refused."""
    clock = MemoryReactorClock()
    sid = registry.register("events-value", EVENT)
    catalogs = {"sr": RegistryCatalog("sr", registry.url, clock, run=_sync)}
    requests, builder = _build([{"path": "/events", "method": "POST",
                                 "content-type": ["application/avro-binary"],
                                 "content": {"model": "avro",
                                             "catalog": {"sr": [{"strategy": "encoded"}]}}}],
                               catalogs, clock)
    assert not builder.issues
    entry = requests.select("POST", "/events", "application/avro-binary")
    assert entry is not None
    record = avro_bytes(EVENT, {"id": 1, "name": "lamp"})
    assert settle(lambda: entry.check_content(wire(sid, record)), clock) is None
    for body, why in [
        (record[1:], "content: not in the schema registry's wire format (byte 0, then a 4-byte "
                     "schema id)"),
        (wire(sid, record + b"\x02"), "content: not Avro of its schema"),
        (wire(sid, b"\x02"), "content: not Avro of its schema"),
    ]:
        refused = settle(lambda b=body: entry.check_content(b), clock)
        assert isinstance(refused, Refused) and (refused.status, refused.reason) == (400, why)
    unknown = settle(lambda: entry.check_content(wire(sid + 40, record)), clock)
    assert isinstance(unknown, Refused) and unknown.reason == "content: unknown schema id " \
                                                              f"{sid + 40}"


def test_a_registry_that_cannot_answer_is_503_after_the_wait(registry: Registry) -> None:
    """The schema is asked for by the first request; while the registry fails the request
    waits (tried again each time the model says it is worth it), then `503`; once the registry
    answers, requests are checked."""
    clock = MemoryReactorClock()
    registry.register("item", ITEM)
    registry.failing = "500"
    catalogs = {"sr": RegistryCatalog("sr", registry.url, clock, run=_sync)}
    requests, _ = _build([{"path": "/j", "content": {
        "model": "json", "catalog": {"sr": [{"subject": "item"}]}}}], catalogs, clock)
    entry = requests.select("POST", "/j", None)
    assert entry is not None
    answer = settle(lambda: entry.check_content(b'{"id": 1, "status": "x"}'), clock)
    assert isinstance(answer, Deferred)
    got: list[Any] = []
    answer.addCallback(got.append)
    clock.pump([0.5] * int(WAIT_SECONDS * 2 - 1))
    assert got == []
    clock.advance(0.5)
    assert len(got) == 1 and isinstance(got[0], Refused) and got[0].status == 503
    assert got[0].reason.startswith("the schema is not available yet (")
    registry.failing = None
    clock.advance(1.0)
    bad = settle(lambda: entry.check_content(b'{"id": 1}'), clock)
    assert isinstance(bad, Refused) and bad.status == 400, "asked again, now checked"
    assert settle(lambda: entry.check_content(b'{"id": 1, "status": "x"}'), clock) is None


def test_a_pending_check_is_tried_again_when_the_model_is_ready() -> None:
    clock = MemoryReactorClock()
    ready: Deferred[None] = Deferred()
    calls: list[int] = []

    def check() -> None:
        calls.append(1)
        if not ready.called:
            raise Pending(ready, "fetching")
        raise Refused(400, "content: not JSON")

    answer = settle(check, clock)
    assert isinstance(answer, Deferred)
    got: list[Any] = []
    answer.addCallback(got.append)
    clock.advance(1.0)
    ready.callback(None)
    assert len(calls) == 2 and isinstance(got[0], Refused) and got[0].status == 400
    assert not clock.getDelayedCalls(), "the wait's timer is gone"


def test_responses_its_entry_selects_are_held_and_cut_when_they_fail() -> None:
    """http.json.schema's client entries: a `200 application/json` is checked against the
    schema, a `404 text/plain` as text; other answers, and other paths, pass unheld."""
    from types import SimpleNamespace

    from ssekd.bindings.http.response_check import Abort
    from ssekd.bindings.http.validation.responses import ResponseValidation
    json_model = {"model": "json", "catalog": {"local": [{"subject": "item"}]}}
    requests, builder = _build([{"path": "/valid.json", "method": "GET",
                                 "content-type": ["application/json", "text/plain"],
                                 "responses": [
                                     {"status": 200, "content-type": ["application/json"],
                                      "headers": {"x-n": "int32"}, "content": json_model},
                                     {"status": [401, 404], "content-type": ["text/plain"],
                                      "content": {"model": "string"}}]}],
                               _local(), responses=True)
    assert not builder.issues
    check = ResponseValidation(requests)
    json_head = (("content-type", "application/json"), ("content-length", "30"))
    assert check.wants("GET", "/valid.json", 200, json_head)
    assert check.wants("GET", "/valid.json?x=1", 404, (("content-type", "text/plain"),))
    assert not check.wants("GET", "/valid.json", 500, json_head), "no entry for a 500"
    assert not check.wants("GET", "/valid.json", 200, (("content-type", "text/html"),))
    assert not check.wants("POST", "/valid.json", 200, json_head), "another method"
    assert not check.wants("GET", "/other.json", 200, json_head)

    def answer(status: int, headers: tuple[tuple[str, str], ...], body: bytes) -> Any:
        return SimpleNamespace(method="GET", path="/valid.json", status=status,
                               headers=headers, body=body)

    good = b'{"id": 42, "status": "Active"}'
    assert check.check(answer(200, json_head, good)) is None
    assert check.check(answer(200, json_head, b'{"id": 42, "status": "a", "name": "secret"}')) \
        == Abort("content: the document: has a property its schema does not allow")
    assert check.check(answer(200, (*json_head, ("x-n", "secret")), good)) == \
        Abort("header x-n: not an int32", instead=503), "Zilla's 503 in place of the answer"
    assert check.check(answer(404, (("content-type", "text/plain"),), b"\xff")) == \
        Abort("content: not utf-8 text")
    assert check.check(answer(404, (("content-type", "text/plain"),), b"Not Found")) is None
