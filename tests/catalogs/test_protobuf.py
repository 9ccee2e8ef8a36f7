"""The `.proto` reader and the protobuf model: what it reads (checked against descriptors the
protobuf package builds from the same definitions written by hand), what it refuses (naming
the line), message indexes as Confluent writes them, and the model with a filesystem-like
catalog and with a real HTTP server answering as a Schema Registry (`schemaType: PROTOBUF`)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from twisted.internet.defer import maybeDeferred
from twisted.internet.testing import MemoryReactorClock

from ssekd.catalogs.catalog import Schema
from ssekd.catalogs.local import LocalCatalog
from ssekd.catalogs.models import FieldModel, Invalid, ModelConfig, local_problem
from ssekd.catalogs.protobuf import (
    ProtoError,
    binary_to_json,
    check_binary,
    decode_indexes,
    encode_indexes,
    json_to_binary,
    parse_proto,
)
from ssekd.catalogs.registry import RegistryCatalog
from ssekd.catalogs.writing import WriteModel
from tests.support.schema_registry import Registry, wire

SHOP = '''syntax = "proto3";
package shop.v1;

import "google/protobuf/timestamp.proto";
option java_package = "shop";

/* an order, with what it holds */
message Order {
  reserved 9, 10;
  string id = 1;
  repeated Line lines = 2;
  map<string, int64> totals = 3 [deprecated = true];
  Status status = 4;
  oneof payment { string card = 5; Voucher voucher = 6; }
  optional string note = 7;
  google.protobuf.Timestamp placed = 8;

  message Line { string sku = 1; uint32 count = 2; Status status = 3; }
  enum Status { option allow_alias = true; NEW = 0; OPEN = 0; PAID = 1; }
}

message Voucher { bytes code = 1; sint64 cents = 2; double rate = 3; bool spent = 4; }
'''


def hand_built_order() -> Any:
    """`shop.v1.Order` from a descriptor written field by field (not from the text)."""
    f = descriptor_pb2.FieldDescriptorProto
    file = descriptor_pb2.FileDescriptorProto(name="hand.proto", package="shop.v1",
                                              syntax="proto3")
    file.dependency.append("google/protobuf/timestamp.proto")
    order = file.message_type.add(name="Order")
    order.field.add(name="id", number=1, type=f.TYPE_STRING, label=f.LABEL_OPTIONAL)
    order.field.add(name="lines", number=2, type=f.TYPE_MESSAGE, label=f.LABEL_REPEATED,
                    type_name=".shop.v1.Order.Line")
    order.field.add(name="totals", number=3, type=f.TYPE_MESSAGE, label=f.LABEL_REPEATED,
                    type_name=".shop.v1.Order.TotalsEntry")
    order.field.add(name="status", number=4, type=f.TYPE_ENUM, label=f.LABEL_OPTIONAL,
                    type_name=".shop.v1.Order.Status")
    order.oneof_decl.add(name="payment")
    order.field.add(name="card", number=5, type=f.TYPE_STRING, label=f.LABEL_OPTIONAL,
                    oneof_index=0)
    order.field.add(name="voucher", number=6, type=f.TYPE_MESSAGE, label=f.LABEL_OPTIONAL,
                    type_name=".shop.v1.Voucher", oneof_index=0)
    order.oneof_decl.add(name="_note")
    order.field.add(name="note", number=7, type=f.TYPE_STRING, label=f.LABEL_OPTIONAL,
                    oneof_index=1, proto3_optional=True)
    order.field.add(name="placed", number=8, type=f.TYPE_MESSAGE, label=f.LABEL_OPTIONAL,
                    type_name=".google.protobuf.Timestamp")
    entry = order.nested_type.add(name="TotalsEntry")
    entry.options.map_entry = True
    entry.field.add(name="key", number=1, type=f.TYPE_STRING, label=f.LABEL_OPTIONAL)
    entry.field.add(name="value", number=2, type=f.TYPE_INT64, label=f.LABEL_OPTIONAL)
    line = order.nested_type.add(name="Line")
    line.field.add(name="sku", number=1, type=f.TYPE_STRING, label=f.LABEL_OPTIONAL)
    line.field.add(name="count", number=2, type=f.TYPE_UINT32, label=f.LABEL_OPTIONAL)
    line.field.add(name="status", number=3, type=f.TYPE_ENUM, label=f.LABEL_OPTIONAL,
                   type_name=".shop.v1.Order.Status")
    status = order.enum_type.add(name="Status")
    status.options.allow_alias = True
    for name, number in (("NEW", 0), ("OPEN", 0), ("PAID", 1)):
        status.value.add(name=name, number=number)
    voucher = file.message_type.add(name="Voucher")
    for name, number, kind in (("code", 1, f.TYPE_BYTES), ("cents", 2, f.TYPE_SINT64),
                               ("rate", 3, f.TYPE_DOUBLE), ("spent", 4, f.TYPE_BOOL)):
        voucher.field.add(name=name, number=number, type=kind, label=f.LABEL_OPTIONAL)
    from google.protobuf import timestamp_pb2
    pool = descriptor_pool.DescriptorPool()
    dependency = descriptor_pb2.FileDescriptorProto()
    timestamp_pb2.DESCRIPTOR.CopyToProto(dependency)
    pool.Add(dependency)
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.v1.Order"))


ORDER_JSON = {"id": "o-1", "lines": [{"sku": "lamp", "count": 2, "status": "PAID"}],
              "totals": {"eur": "1250"}, "status": "PAID",
              "voucher": {"code": "AAE=", "cents": "-5", "rate": 0.5, "spent": True},
              "note": "", "placed": "2024-05-01T12:00:00Z"}


def test_the_reader_makes_the_messages_protoc_would() -> None:
    """What the reader makes of SHOP encodes byte for byte as the hand-built descriptor does,
    and each decodes the other's bytes; message index paths follow declaration order."""
    schema = parse_proto(SHOP)
    assert schema.path_of("Order") == (0,) and schema.path_of("shop.v1.Voucher") == (1,)
    assert schema.path_of("Order.Line") == (0, 1)  # after the map's entry, as protoc places it
    assert schema.path_of(None) == (0,)
    ours = schema.message_class(schema.path_of("Order"))
    theirs = hand_built_order()
    body = json.dumps(ORDER_JSON).encode()
    encoded = json_to_binary(ours, body)
    reference = theirs()
    from google.protobuf import json_format
    json_format.Parse(body.decode(), reference)
    assert encoded == reference.SerializeToString()
    assert json.loads(binary_to_json(ours, encoded)) == ORDER_JSON
    assert json.loads(binary_to_json(ours, b"")) == {
        "id": "", "lines": [], "totals": {}, "status": "NEW"}, "defaults are written out"


def tag(number: int, wire: int) -> bytes:
    return bytes([number << 3 | wire]) if number < 16 else bytes([(number << 3 | wire) & 0x7F
                                                                  | 0x80, number >> 4])


def test_binary_is_checked_as_zilla_does_and_unknown_fields_are_dropped() -> None:
    """Without a view Zilla parses the wire form against the message and writes what it
    parsed: a field of another number than the message's is skipped (so not written, at any
    depth); a field of the message in the wrong wire type is refused, where the protobuf
    package alone would keep it as an unknown field."""
    schema = parse_proto(SHOP)
    order = schema.message_class(schema.path_of("Order"))
    encoded = json_to_binary(order, json.dumps(ORDER_JSON).encode())
    assert check_binary(order, encoded) == encoded, "all known: the bytes as they came"

    line = tag(1, 2) + b"\x04lamp" + tag(9, 0) + b"\x05" + tag(2, 0) + b"\x02"
    sent = (tag(99, 2) + b"\x01x" + tag(1, 2) + b"\x03o-1" + tag(2, 2) + bytes([len(line)])
            + line + tag(50, 3) + tag(1, 0) + b"\x01" + tag(50, 4) + tag(77, 5) + b"\0\0\0\0")
    assert len(order.FromString(sent).SerializeToString()) == len(sent)  # the package keeps
    kept = check_binary(order, sent)
    assert kept == (tag(1, 2) + b"\x03o-1" + tag(2, 2) + b"\x08" + tag(1, 2) + b"\x04lamp"
                    + tag(2, 0) + b"\x02")  # them; Zilla does not, nor do we
    assert json.loads(binary_to_json(order, sent))["lines"] == [
        {"sku": "lamp", "count": 2, "status": "NEW"}]

    for wrong, says in (
            (tag(1, 0) + b"\x0a", "field 1 (id) of shop.v1.Order comes as varint, where a "
                                   "string is length-delimited"),
            (tag(4, 5) + b"\1\0\0\0", "field 4 (status) of shop.v1.Order comes as 32-bit, "
                                      "where an enum is varint"),
            (tag(2, 2) + b"\x02" + tag(2, 2) + b"\0", "field 2 (count) of shop.v1.Order.lines "
                                                       "comes as length-delimited, where a "
                                                       "uint32 is varint"),
            (tag(6, 0) + b"\x01", "field 6 (voucher) of shop.v1.Order comes as varint")):
        with pytest.raises(ValueError, match=re.escape(says)):
            check_binary(order, wrong)
        with pytest.raises(ValueError, match=re.escape(says)):
            binary_to_json(order, wrong)

    numbers = parse_proto('syntax = "proto3";\nmessage N { repeated int32 n = 1; }')
    n = numbers.message_class((0,))
    packed, unpacked = tag(1, 2) + b"\x02\x01\x02", tag(1, 0) + b"\x01" + tag(1, 0) + b"\x02"
    assert check_binary(n, packed) == packed and check_binary(n, unpacked) == unpacked
    assert list(n.FromString(packed).n) == list(n.FromString(unpacked).n) == [1, 2]


@pytest.mark.parametrize("text,line,says", [
    ('syntax = "proto2";\nmessage A {}', 1, "only proto3"),
    ('message A {}', 1, 'expected `syntax = "proto3";`'),
    ('syntax = "proto3";\nimport "shop/other.proto";', 2, "only the well-known types"),
    ('syntax = "proto3";\nmessage A {\n  Missing m = 1;\n}', 3, "unknown type 'Missing'"),
    ('syntax = "proto3";\nmessage A {\n  extensions 100 to 200;\n}', 3, "'extensions'"),
    ('syntax = "proto3";\n\nservice Shop {}', 3, "'service' is not read"),
    ('syntax = "proto3";\nmessage A {\n  map<float, string> m = 1;\n}', 3, "map key"),
    ('syntax = "proto3";\nenum E {\n  ONE = 1;\n}', 4, "first value must be 0"),
    ('syntax = "proto3";\nmessage A {\n  string a = 1\n}', 4, "expected ';'"),
    ('syntax = "proto3";\nmessage A { string a = 1; ', 2, "end of the file"),
    ('syntax = "proto3";\nmessage A {\n  string a = 1;\n  int32 a = 2;\n}', None,
     "not a consistent schema"),
])
def test_what_is_not_read_is_refused_naming_the_line(text: str, line: int | None,
                                                     says: str) -> None:
    with pytest.raises(ProtoError) as caught:
        parse_proto(text)
    assert caught.value.line == line and says in str(caught.value), str(caught.value)
    assert caught.value.at("request.proto").startswith(
        "request.proto:" + (f"{line}:" if line else ""))


def test_message_indexes_as_confluent_writes_them() -> None:
    assert encode_indexes((0,)) == b"\0"
    assert encode_indexes((1,)) == b"\x02\x02"
    assert encode_indexes((0, 1)) == b"\x04\x00\x02"
    assert encode_indexes((70,)) == b"\x02\x8c\x01"  # zig-zag 140, two varint bytes
    for path in ((0,), (1,), (0, 1), (3, 0, 2), (70,)):
        assert decode_indexes(encode_indexes(path) + b"rest") == (path, len(encode_indexes(path)))
    with pytest.raises(ValueError):
        decode_indexes(b"\x04\x00")


def _field(kind: type[FieldModel], spec: dict[str, Any], catalog: Any) -> Any:
    seen: list[tuple[str, str]] = []
    field = kind(ModelConfig.parse("orders", "value", spec), catalog, MemoryReactorClock(),
                 lambda name, detail: seen.append((name, detail)))
    field.resolve()
    return field


def test_local_catalog_writes_indexes_then_the_message_and_reads_it_back() -> None:
    local = LocalCatalog("files", {"shop": Schema("shop", None, None, SHOP,
                                                  source="protos/shop.proto")})
    spec = {"model": "protobuf", "view": "json",
            "catalog": {"files": [{"subject": "shop", "record": "Voucher"}]}}
    writer, reader = _field(WriteModel, spec, local), _field(FieldModel, spec, local)
    written = writer.encode(b'{"code": "AAE=", "cents": "7"}')
    assert written[:2] == b"\x02\x02", "Voucher is message [1]"
    voucher = hand_built_order()().DESCRIPTOR.file.pool.FindMessageTypeByName(
        "shop.v1.Voucher")
    check = message_factory.GetMessageClass(voucher)()
    check.ParseFromString(written[2:])
    assert (check.code, check.cents) == (b"\0\1", 7)
    assert json.loads(reader.check(written)) == {"code": "AAE=", "cents": "7", "rate": 0.0,
                                                 "spent": False}
    with pytest.raises(Invalid, match="no field named \"colour\""):
        writer.encode(b'{"colour": "red"}')
    with pytest.raises(Invalid, match="no message at index path"):
        reader.check(b"\x02\x08" + written[2:])
    with pytest.raises(Invalid, match="not protobuf"):
        reader.check(b"\0\xff\xff")
    no_view = _field(FieldModel, {"model": "protobuf", "catalog": spec["catalog"]}, local)
    assert no_view.check(written) == written[2:], "no view: the message's bytes"
    missing = _field(WriteModel, {"model": "protobuf", "catalog": {
        "files": [{"subject": "shop", "record": "Refund"}]}}, local)
    assert "no message 'Refund'" in (local_problem(missing) or "")
    broken = LocalCatalog("files", {"shop": Schema("shop", None, None, SHOP.replace(
        "Voucher voucher", "Vouch voucher"), source="protos/shop.proto")})
    problem = local_problem(_field(FieldModel, spec, broken))
    assert problem is not None and "protos/shop.proto:14: unknown type 'Vouch'" in problem


def test_registry_protobuf_schemas_are_read_and_written_in_the_wire_format(
        tmp_path: Any) -> None:
    """A registry's `schemaType: PROTOBUF` schema: the record is byte 0, the id, the message
    indexes, the message; read back as JSON by the id it carries."""
    registry = Registry().start()
    try:
        sid = registry.register("orders-value", SHOP, "PROTOBUF")
        catalog = RegistryCatalog("sr", registry.url, MemoryReactorClock(),
                                  run=lambda f: maybeDeferred(f))
        spec = {"model": "protobuf", "view": "json",
                "catalog": {"sr": [{"strategy": "topic", "record": "shop.v1.Order"}]}}
        writer, reader = _field(WriteModel, spec, catalog), _field(FieldModel, spec, catalog)
        written = writer.encode(json.dumps(ORDER_JSON).encode())
        assert written[:6] == wire(sid, b"\0")
        assert json.loads(reader.check(written)) == ORDER_JSON
        with pytest.raises(Invalid, match="not Confluent wire format"):
            reader.check(written[6:])
    finally:
        registry.stop()
