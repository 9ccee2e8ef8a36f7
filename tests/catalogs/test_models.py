"""Models on their own: JSON Schema, Avro (plain and wire format, as JSON) and string checks,
with schemas from a local catalog and from a real HTTP server answering as a Schema Registry."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from twisted.internet.defer import Deferred, fail, maybeDeferred
from twisted.internet.testing import MemoryReactorClock

from ssekd.catalogs.catalog import Schema, SchemaNotFound
from ssekd.catalogs.local import LocalCatalog
from ssekd.catalogs.models import (
    MAX_REMEMBERED_IDS,
    FieldModel,
    Invalid,
    ModelConfig,
    Pending,
    compile_json,
    local_problem,
)
from ssekd.catalogs.registry import RegistryCatalog
from tests.support.schema_registry import Registry, avro_bytes, wire

ITEM = {"type": "object", "required": ["id", "price"],
        "properties": {"id": {"type": "integer"}, "price": {"type": "number", "minimum": 0}}}
AVRO_V1 = {"type": "record", "name": "Item",
           "fields": [{"name": "id", "type": "long"}, {"name": "name", "type": "string"}]}
AVRO_V2 = {"type": "record", "name": "Item",
           "fields": [{"name": "id", "type": "long"}, {"name": "name", "type": "string"},
                      {"name": "colour", "type": "string", "default": "grey"}]}


def _sync(f: Any) -> Deferred[Any]:
    """Run a registry request on this thread: the HTTP is real, no reactor needs to run."""
    return maybeDeferred(f)


@pytest.fixture
def registry() -> Iterator[Registry]:
    r = Registry().start()
    yield r
    r.stop()


def _events() -> tuple[list[tuple[str, str]], Any]:
    seen: list[tuple[str, str]] = []
    return seen, lambda name, detail: seen.append((name, detail))


def _model(spec: dict[str, Any], catalog: Any, clock: Any, topic: str = "items") -> FieldModel:
    seen, report = _events()
    field = FieldModel(ModelConfig.parse(topic, "value", spec), catalog, clock, report)
    field.events = seen  # type: ignore[attr-defined]
    return field


def test_json_schema_checks_and_says_where() -> None:
    check = compile_json(Schema("items", 1, None, json.dumps(ITEM)))
    assert check(b'{"id": 1, "price": 2.5}') == b'{"id": 1, "price": 2.5}'
    with pytest.raises(Invalid, match="not JSON"):
        check(b"{not json")
    with pytest.raises(Invalid, match=r"\['price'\]: -1 is less than the minimum of 0"):
        check(b'{"id": 1, "price": -1}')
    with pytest.raises(Invalid, match="'price' is a required property"):
        check(b'{"id": 1}')


@pytest.mark.parametrize("payload, why", [
    (b"[" * 100_000 + b"]" * 100_000, "not JSON: nested too deeply"),
    (b'{"a":' * 50_000 + b"1" + b"}" * 50_000, "not JSON: nested too deeply"),
    (b'{"id": NaN, "price": 1}', "not JSON: NaN is not JSON"),
    (b'{"id": 1, "price": Infinity}', "not JSON: Infinity is not JSON"),
])
def test_hostile_json_is_invalid_not_an_error(payload: bytes, why: str) -> None:
    """What Python's parser raises past `ValueError` (RecursionError) or takes that JSON has
    not (NaN) is `Invalid` like any bad payload: the cache skips such a record, a body is 400."""
    check = compile_json(Schema("items", 1, None, json.dumps(ITEM)))
    with pytest.raises(Invalid, match=why):
        check(payload)


def test_a_document_too_deep_for_the_schema_walk_is_invalid() -> None:
    """Parsed fine, but jsonschema recurses per level (several frames each): `Invalid`."""
    nested = {"type": "array", "items": {"$ref": "#"}}
    check = compile_json(Schema("nested", 1, None, json.dumps(nested)))
    assert check(b"[[[]]]") == b"[[[]]]"
    with pytest.raises(Invalid, match="nested too deeply"):
        check(b"[" * 900 + b"]" * 900)


def test_local_catalog_schema_that_does_not_parse_or_is_missing_is_a_problem() -> None:
    clock = MemoryReactorClock()
    catalog = LocalCatalog("local", {"good": Schema("good", None, None, json.dumps(ITEM)),
                                     "bad": Schema("bad", None, None, "{nope")})
    spec = {"model": "json", "catalog": {"local": [{"subject": "bad"}]}}
    assert "not a JSON Schema" in (local_problem(_model(spec, catalog, clock)) or "")
    spec = {"model": "json", "catalog": {"local": [{"subject": "gone"}]}}
    assert "no subject 'gone'" in (local_problem(_model(spec, catalog, clock)) or "")
    spec = {"model": "json", "catalog": {"local": [{"subject": "good"}]}}
    assert local_problem(_model(spec, catalog, clock)) is None


def test_avro_plain_and_wire_format_become_json(registry: Registry) -> None:
    """Plain Avro with a local catalog; Confluent's wire format with a registry, where a plain
    record is refused (a plain record may start with byte 0 too: no guessing)."""
    clock = MemoryReactorClock()
    local = LocalCatalog("local", {"items": Schema("items", None, None, json.dumps(AVRO_V1))})
    plain_field = _model({"model": "avro", "view": "json",
                          "catalog": {"local": [{"subject": "items"}]}}, local, clock)
    plain_field.resolve()
    plain = avro_bytes(AVRO_V1, {"id": 0, "name": "lamp"})
    assert plain[0] == 0, "this plain record starts like the wire format"
    assert json.loads(plain_field.check(plain)) == {"id": 0, "name": "lamp"}
    with pytest.raises(Invalid, match="bytes left"):
        plain_field.check(plain + b"\x02")
    with pytest.raises(Invalid, match="not Avro"):
        plain_field.check(b"\x02")
    v1 = registry.register("items-value", AVRO_V1)
    catalog = RegistryCatalog("sr", registry.url, clock, run=_sync)
    field = _model({"model": "avro", "view": "json",
                    "catalog": {"sr": [{"strategy": "topic", "version": "latest"}]}},
                   catalog, clock)
    field.resolve()
    assert field.ready
    assert json.loads(field.check(wire(v1, plain))) == {"id": 0, "name": "lamp"}
    with pytest.raises(Invalid, match="not Confluent wire format"):
        field.check(b"\x02" + plain)
    without_view = _model({"model": "avro", "catalog": {"sr": [{"strategy": "topic"}]}},
                          catalog, clock)
    without_view.resolve()
    assert without_view.check(wire(v1, plain)) == plain, "no view: the Avro bytes as they are"


def test_new_schema_id_is_fetched_once_then_picked_up(registry: Registry) -> None:
    """Schema evolution without a restart: v2 (a field with a default) gets a new id; the first
    record carrying it waits for one fetch, later ones decode at once."""
    clock = MemoryReactorClock()
    registry.register("items-value", AVRO_V1)
    catalog = RegistryCatalog("sr", registry.url, clock, run=_sync)
    field = _model({"model": "avro", "view": "json",
                    "catalog": {"sr": [{"subject": "items-value"}]}}, catalog, clock)
    field.resolve()
    v2 = registry.register("items-value", AVRO_V2)
    record = wire(v2, avro_bytes(AVRO_V2, {"id": 1, "name": "cup", "colour": "red"}))
    asked = len(registry.requests)
    try:
        field.check(record)
        raise AssertionError("an unknown id must be fetched first")
    except Pending as p:
        assert p.ready.called  # the (synchronous, in this test) fetch is over
    assert json.loads(field.check(record)) == {"id": 1, "name": "cup", "colour": "red"}
    field.check(record)
    assert registry.requests[asked:] == [f"/schemas/ids/{v2}"]


def test_unknown_id_is_invalid_and_latest_follows_after_cache_ttl(registry: Registry) -> None:
    clock = MemoryReactorClock()
    registry.register("prices-value", ITEM, kind="JSON")
    catalog = RegistryCatalog("sr", registry.url, clock, cache_ttl=60, run=_sync)
    field = _model({"model": "json", "catalog": {"sr": [{"strategy": "topic"}]}},
                   catalog, clock, topic="prices")
    field.resolve()
    with pytest.raises(Pending):
        field.check(wire(99, b"{}"))
    with pytest.raises(Invalid, match="unknown schema id 99"):
        field.check(wire(99, b"{}"))
    with pytest.raises(Invalid):
        field.check(b'{"id": 1}')  # v1 needs a price
    registry.register("prices-value", {"type": "object"}, kind="JSON")
    clock.advance(30)
    with pytest.raises(Invalid):
        field.check(b'{"id": 1}')  # still v1 within cache-ttl
    clock.advance(31)
    with pytest.raises(Invalid):
        field.check(b'{"id": 1}')  # checked with v1 while asking again (answered at once here)
    assert field.check(b'{"id": 1}') == b'{"id": 1}'
    assert ("CATALOG_SCHEMA_UPDATED", "now version 2 (id 2)") in \
        [(n, d.rsplit(": ", 1)[1]) for n, d in field.events]  # type: ignore[attr-defined]


@pytest.mark.parametrize("failing", ["500", "garbage", "down"])
def test_registry_that_cannot_answer_retries_with_an_event(registry: Registry,
                                                          failing: str) -> None:
    clock = MemoryReactorClock()
    registry.register("items-value", AVRO_V1)
    if failing == "down":
        registry.stop()
    else:
        registry.failing = failing
    catalog = RegistryCatalog("sr", registry.url, clock, run=_sync)
    field = _model({"model": "avro", "catalog": {"sr": [{"strategy": "topic"}]}}, catalog, clock)
    field.resolve()
    assert not field.ready
    events = field.events  # type: ignore[attr-defined]
    assert events[0][0] == "CATALOG_SCHEMA_UNAVAILABLE"
    expected = {"500": "HTTP 500", "garbage": "not the registry's", "down": "refused"}[failing]
    assert expected in events[0][1], events
    with pytest.raises(Pending):
        field.check(wire(1, avro_bytes(AVRO_V1, {"id": 1, "name": "x"})))
    if failing == "down":
        registry.start()
    registry.failing = None
    clock.advance(1.0)  # the retry
    assert field.ready
    assert events[-1][0] == "CATALOG_SCHEMA_RESOLVED"


def test_string_model_wants_utf8() -> None:
    field = _model({"model": "string"}, None, MemoryReactorClock())
    assert field.check("ça".encode()) == "ça".encode()
    with pytest.raises(Invalid, match="not UTF-8"):
        field.check(b"\xff\xfe")


def test_catalog_options_from_the_config(tmp_path: Any, registry: Registry) -> None:
    """filesystem subjects read beside the config with their `version`; inline `version`;
    a registry's `context` (a subject prefix) and `max-age` (Zilla's name for cache-ttl)."""
    from ssekd.catalogs import build_catalogs
    from ssekd.config.load import load_config
    from ssekd.spi.plugins import discover

    (tmp_path / "schemas").mkdir()
    (tmp_path / "schemas" / "items.json").write_text(json.dumps(ITEM))
    (tmp_path / "zilla.yaml").write_text(
        "name: t\nbindings:\n  files:\n    type: filesystem\n    kind: server\n"
        "    options: {location: .}\ncatalogs:\n"
        "  files:\n    type: filesystem\n    options:\n      subjects:\n"
        "        items: {path: schemas/items.json, version: 3}\n"
        "  inline:\n    type: inline\n    options:\n      subjects:\n"
        "        items: {schema: '{\"type\": \"string\"}', version: 2}\n"
        f"  sr:\n    type: schema-registry\n    options: {{url: '{registry.url}', "
        f"context: shop, max-age: 7}}\n")
    clock = MemoryReactorClock()
    catalogs = build_catalogs(load_config(tmp_path / "zilla.yaml", discover()), clock)
    files, inline, sr = catalogs["files"], catalogs["inline"], catalogs["sr"]
    assert json.loads(files.fetch_blocking("items", 3).text) == ITEM
    assert files.peek("items", 4) is None, "another version than the file's is not there"
    assert inline.fetch_blocking("items", "latest").text == '{"type": "string"}'
    assert inline.peek("items", 1) is None
    assert isinstance(sr, RegistryCatalog) and sr.cache_ttl == 7
    registry.register(":.shop:items-value", ITEM, kind="JSON")
    schema = sr.fetch_blocking("items-value", "latest")
    assert json.loads(schema.text) == ITEM and schema.kind == "JSON"
    assert registry.requests[-1] == "/subjects/%3A.shop%3Aitems-value/versions/latest"


def test_key_model_checks_keys_and_leaves_them_as_they_are(registry: Registry) -> None:
    from ssekd.catalogs.models import TopicModel

    clock = MemoryReactorClock()
    sid = registry.register("items-key", {"type": "string"})
    catalog = RegistryCatalog("sr", registry.url, clock, run=_sync)
    key = FieldModel(ModelConfig.parse("items", "key", {
        "model": "avro", "view": "json", "catalog": {"sr": [{"strategy": "topic"}]}}),
        catalog, clock, lambda n, d: None, convert=False)
    model = TopicModel("items", None, key)
    model.resolve()
    raw = wire(sid, avro_bytes({"type": "string"}, "lamp"))
    assert model.check(raw, b"anything") == (raw, b"anything"), "keys are never converted"
    assert model.check(None, b"x") == (None, b"x"), "a null key has nothing to check"
    with pytest.raises(Invalid, match="^key: not Avro"):
        model.check(wire(sid, b"\x09"), b"x")


def test_a_stopped_model_stops_retrying(registry: Registry) -> None:
    """A cache_server that stops (reload, shutdown) leaves no timer asking a dead registry."""
    clock = MemoryReactorClock()
    registry.stop()
    catalog = RegistryCatalog("sr", registry.url, clock, run=_sync)
    field = _model({"model": "avro", "catalog": {"sr": [{"strategy": "topic"}]}}, catalog, clock)
    field.resolve()
    assert len(clock.getDelayedCalls()) == 1
    assert field.next_try_in == 1.0  # what a refused stream is told to wait
    field.stop()
    assert clock.getDelayedCalls() == []
    assert field.next_try_in is None


class _NoSuchIds:
    """A registry that has no schema for any id (answered at once)."""

    has_ids = True

    def __init__(self) -> None:
        self.asked: list[int] = []

    def known_id(self, schema_id: int) -> None:
        return None

    def by_id(self, schema_id: int) -> Deferred[Any]:
        self.asked.append(schema_id)
        return fail(SchemaNotFound(f"schema id {schema_id} not found"))


def test_made_up_schema_ids_are_remembered_in_bounded_memory() -> None:
    """Each made-up id a record carried stayed in `_unknown_ids` for ever."""
    clock = MemoryReactorClock()
    catalog = _NoSuchIds()
    field = _model({"model": "avro", "catalog": {"sr": [{"strategy": "topic"}]}}, catalog, clock)
    for schema_id in range(3 * MAX_REMEMBERED_IDS):
        with pytest.raises(Pending):
            field.check(wire(schema_id, b""))
    assert len(field._unknown_ids) <= MAX_REMEMBERED_IDS
    # the recent ones are still known to be unknown: no second GET for them
    asked = len(catalog.asked)
    with pytest.raises(Invalid, match="unknown schema id"):
        field.check(wire(3 * MAX_REMEMBERED_IDS - 1, b""))
    assert len(catalog.asked) == asked
