"""Write models on their own (`ssekd.catalogs.writing`, `ssekd.bindings.kafka.write_models`):
what each model makes of a body, the wire format with a registry (a real HTTP server answering
as one), the reasons a body is refused, and a schema not resolved yet."""

from __future__ import annotations

import io
import json
from typing import Any

import fastavro
import pytest
from twisted.internet.defer import Deferred, maybeDeferred
from twisted.internet.testing import MemoryReactorClock

from ssekd.bindings.kafka.producer import Record
from ssekd.bindings.kafka.write_models import RecordRefused, SchemaPending, WriteModels
from ssekd.catalogs.catalog import Schema
from ssekd.catalogs.local import LocalCatalog
from ssekd.catalogs.models import FieldModel, Invalid, ModelConfig
from ssekd.catalogs.registry import RegistryCatalog
from ssekd.catalogs.writing import WriteModel
from tests.support.schema_registry import Registry, wire

EVENT = {"type": "record", "name": "Event", "namespace": "io.aklivity.example",
         "fields": [{"name": "id", "type": "string"}, {"name": "status", "type": "string"},
                    {"name": "tags", "type": {"type": "array", "items": {
                        "type": "record", "name": "Tag",
                        "fields": [{"name": "name", "type": "string"}]}}, "default": []},
                    {"name": "score", "type": ["null", "double"], "default": None}]}
ITEM = {"type": "object", "required": ["id"], "properties": {"id": {"type": "integer"}}}


def _model(kind: type[FieldModel], spec: dict[str, Any], catalog: Any,
           clock: Any = None, part: str = "value") -> Any:
    field = kind(ModelConfig.parse("items", part, spec), catalog, clock or MemoryReactorClock(),
                 lambda name, detail: None, convert=part == "value")
    field.resolve()
    return field


@pytest.fixture
def registry() -> Any:
    r = Registry().start()
    yield r
    r.stop()


def _registry_catalog(registry: Registry, clock: Any = None) -> RegistryCatalog:
    return RegistryCatalog("sr", registry.url, clock or MemoryReactorClock(),
                           run=lambda f: maybeDeferred(f))


def avro_of(payload: bytes) -> Any:
    data = io.BytesIO(payload)
    record = fastavro.schemaless_reader(data, fastavro.parse_schema(EVENT), None)
    assert data.tell() == len(payload)
    return record


def test_avro_json_is_written_in_the_wire_format_and_reads_back(registry: Registry) -> None:
    sid = registry.register("items-value", EVENT)
    catalog = _registry_catalog(registry)
    spec = {"model": "avro", "view": "json",
            "catalog": {"sr": [{"strategy": "topic", "version": "latest"}]}}
    writer, reader = _model(WriteModel, spec, catalog), _model(FieldModel, spec, catalog)
    body = {"id": "1", "status": "OK", "tags": [{"name": "new"}], "score": 0.5}
    written = writer.encode(json.dumps(body).encode())
    assert written[:5] == wire(sid, b"")
    assert avro_of(written[5:]) == body
    assert json.loads(reader.check(written)) == body
    defaults = writer.encode(b'{"id": "2", "status": "OK"}')
    assert avro_of(defaults[5:]) == {"id": "2", "status": "OK", "tags": [], "score": None}


@pytest.mark.parametrize("body,says", [
    (b'{"id": 123, "status": "OK"}', "io.aklivity.example.Event.id is <123>"),
    (b'{"id": "1"}', "status"),
    (b'{"id": "1", "status": "OK", "colour": "red"}', "colour is not in the schema"),
    (b'{"id": "1", "status": "OK", "tags": [{"name": "a", "x": 1}]}',
     "tags[0].x is not in the schema"),
    (b'{"id": "1", "status": "OK", "score": "high"}', "score"),
    (b'not json', "not JSON"),
    (b'[]', "not a record of the Avro schema"),
    (b'{"id": "1", "status": "OK", "score": NaN}', "not JSON: NaN is not JSON"),
    (b'{"id": "1", "status": "OK", "tags": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
     "not JSON: nested too deeply"),
])
def test_avro_json_that_is_not_a_record_of_the_schema_is_refused(body: bytes,
                                                                 says: str) -> None:
    local = LocalCatalog("local", {"events": Schema("events", None, None, json.dumps(EVENT))})
    writer = _model(WriteModel, {"model": "avro", "view": "json",
                                 "catalog": {"local": [{"subject": "events"}]}}, local)
    with pytest.raises(Invalid) as caught:
        writer.encode(body)
    assert says in str(caught.value), str(caught.value)


def test_local_catalogs_write_without_the_wire_header_and_binary_is_checked() -> None:
    local = LocalCatalog("local", {"events": Schema("events", None, None, json.dumps(EVENT))})
    writer = _model(WriteModel, {"model": "avro", "view": "json",
                                 "catalog": {"local": [{"subject": "events"}]}}, local)
    written = writer.encode(b'{"id": "1", "status": "OK"}')
    assert avro_of(written)["id"] == "1", "plain Avro: a local catalog has no ids"
    binary = _model(WriteModel, {"model": "avro", "catalog": {"local": [{"subject": "events"}]}},
                    local)
    assert binary.encode(written) == written, "no view: Avro bytes, checked, as they are"
    with pytest.raises(Invalid, match="bytes left"):
        binary.encode(written + b"\0")


def test_json_and_string_models(registry: Registry) -> None:
    sid = registry.register("items-value", ITEM, "JSON")
    spec = {"model": "json", "catalog": {"sr": [{"strategy": "topic"}]}}
    writer = _model(WriteModel, spec, _registry_catalog(registry))
    assert writer.encode(b'{"id": 1}') == wire(sid, b'{"id": 1}')
    with pytest.raises(Invalid, match="'id'"):
        writer.encode(b'{"id": "one"}')
    text = _model(WriteModel, {"model": "string"}, None)
    assert text.encode("é".encode()) == "é".encode()
    with pytest.raises(Invalid, match="not UTF-8"):
        text.encode(b"\xff")


def test_keys_and_values_refused_or_pending_say_so(registry: Registry) -> None:
    """A key the key model refuses names the key; a registry without the subject is pending,
    with when to try again; once registered, the next try resolves it."""
    clock = MemoryReactorClock()
    catalog = _registry_catalog(registry, clock)
    value = _model(WriteModel, {"model": "avro", "view": "json",
                                "catalog": {"sr": [{"strategy": "topic"}]}}, catalog, clock)
    key = _model(WriteModel, {"model": "string"}, None, part="key")
    models = WriteModels("items", value, key)
    record = Record("items", b"k1", b'{"id": "1", "status": "OK"}')
    with pytest.raises(SchemaPending) as pending:
        models.encode(record)
    assert pending.value.retry_after == 1.0 and pending.value.resolving is None
    with pytest.raises(RecordRefused, match="key: not UTF-8"):
        models.encode(Record("items", b"\xff", record.value))
    registry.register("items-value", EVENT)
    clock.advance(1.0)  # the model's next try
    encoded = models.encode(record)
    assert encoded.key == b"k1" and avro_of(encoded.value[5:])["id"] == "1"
    assert models.encode(Record("items", b"k1", None)).value is None, "a tombstone stays one"


def test_a_write_while_the_registry_is_asked_waits_for_its_answer(registry: Registry) -> None:
    """The first write after a start, while the registry is being asked, is not refused: it
    is tried again once the catalog answered."""
    registry.register("items-value", EVENT)
    held: list[tuple[Any, Deferred[Any]]] = []

    def later(f: Any) -> Deferred[Any]:
        d: Deferred[Any] = Deferred()
        held.append((f, d))
        return d

    catalog = RegistryCatalog("sr", registry.url, MemoryReactorClock(), run=later)
    value = _model(WriteModel, {"model": "avro", "view": "json",
                                "catalog": {"sr": [{"strategy": "topic"}]}}, catalog)
    models = WriteModels("items", value, None)
    record = Record("items", b"k1", b'{"id": "1", "status": "OK"}')
    with pytest.raises(SchemaPending) as pending:
        models.encode(record)
    resolving = pending.value.resolving
    assert resolving is not None and not resolving.called
    f, d = held.pop()
    d.callback(f())
    assert resolving.called
    assert avro_of(models.encode(record).value[5:])["status"] == "OK"


def test_what_a_read_delivers_as_json_writes_back_to_the_same_record() -> None:
    """Bytes, fixed, decimals, dates and timestamps have a JSON view (latin-1 text, decimal
    text, ISO 8601): a body in that view is written as the record it was read from."""
    schema = {"type": "record", "name": "Blob", "fields": [
        {"name": "raw", "type": "bytes"},
        {"name": "tag", "type": ["null", {"type": "fixed", "name": "Tag", "size": 2}]},
        {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 6,
                                   "scale": 2}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "parts", "type": {"type": "map", "values": "bytes"}},
        {"name": "again", "type": ["null", "Tag"]}]}
    local = LocalCatalog("local", {"blobs": Schema("blobs", None, None, json.dumps(schema))})
    spec = {"model": "avro", "view": "json", "catalog": {"local": [{"subject": "blobs"}]}}
    writer, reader = _model(WriteModel, spec, local), _model(FieldModel, spec, local)
    body = {"raw": "\u0000\u00ff", "tag": "ab", "price": "12.50", "day": "2024-05-01",
            "at": "2024-05-01T12:00:00.123000+00:00", "parts": {"a": "\u0001"}, "again": "cd"}
    written = writer.encode(json.dumps(body).encode())
    assert json.loads(reader.check(written)) == body
    with pytest.raises(Invalid, match="raw"):
        writer.encode(json.dumps({**body, "raw": "€"}).encode())
