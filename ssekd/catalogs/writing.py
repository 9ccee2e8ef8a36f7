"""Models on the write path: what a kafka cache_client makes of a record before it is produced.

Zilla's examples put models on the cache_client's topics (`options.topics[].value` / `.key`),
so that an http-kafka produce writes the request body in the model's form, and reads give it
back as JSON. `WriteModel` is the same `FieldModel` (one schema, resolved from its catalog,
`latest` followed after `cache-ttl`, retried with back-off while the catalog cannot answer),
with encoders instead of decoders:

- `json`: the body must be a JSON document valid against the schema; written as it is.
- `avro`: with `view: json` the body is JSON, checked against the Avro schema (every field of
  the right type, no field the schema lacks) and written as Avro binary; without, the body is
  Avro binary already and must decode. The JSON is what a read delivers (`from_view`): bytes
  and fixed as latin-1 text, decimals as text, dates and times in ISO 8601, a union's value as
  it is (not wrapped in its branch's name, as Avro's own JSON encoding would).
- `protobuf`: with `view: json` the body is JSON in proto3's JSON mapping (unknown fields
  refused) and is written as the message `record` names; without, it is that message's binary
  form and must decode, each of its fields in its type's wire type, and a field number the
  message lacks is left out of what is written (as Zilla's wire parser does:
  `protobuf.check_binary`). The message indexes (`ssekd.catalogs.protobuf`) come first.
- `string`: UTF-8 text, written as it is.

With a `schema-registry` catalog, a record other than `string` is written in Confluent's wire
format: byte 0, the 4-byte id of the resolved schema, then the encoded record (then, for
protobuf, the message indexes come right after the id, as Confluent's serializers and Zilla
write them). A local catalog has no ids: the record is written without that header (Zilla does
the same, and the read side expects it so).

`encode` raises `Invalid` (the body does not satisfy the model: the writer gets `400` with the
reason) or `Pending` (the schema is not resolved yet: `503`, try again).
"""

from __future__ import annotations

import datetime
import decimal
import io
from typing import Any

import fastavro
import fastavro.validation

from ssekd.catalogs.catalog import Schema
from ssekd.catalogs.models import (
    WIRE_MAGIC,
    BadSchema,
    Codec,
    FieldModel,
    Invalid,
    Pending,
    _first_line,
    check_string,
    compile_json,
    parse_avro,
    parse_json,
    read_avro,
)


class WriteModel(FieldModel):
    """The model of a cache_client topic's values (or keys), encoding what is written."""

    def compile(self, schema: Schema) -> Codec:
        key = (schema.kind, schema.text)
        codec = self._compiled.get(key)
        if codec is None:
            model, view_json = self.config.model, self.config.view == "json"
            if model == "avro":
                codec = avro_encoder(schema, view_json)
            elif model == "protobuf":
                codec = protobuf_encoder(schema, self.config.record, view_json)
            elif model == "string":
                codec = check_string
            else:
                codec = compile_json(schema)
            self._compiled[key] = codec
        return codec

    @property
    def resolving(self) -> bool:
        """Whether the catalog is being asked for the schema right now."""
        return self._resolving is not None

    @property
    def wire(self) -> bool:
        """Whether records are written in Confluent's wire format (a registry catalog)."""
        return self.catalog is not None and self.catalog.has_ids and \
            self.config.model != "string"

    def encode(self, payload: bytes) -> bytes:
        """The record to write for `payload`; raises `Invalid` or `Pending`."""
        encoded = self._ready_codec()(payload)
        if not self.wire:
            return encoded
        schema = self.current
        assert schema is not None  # a registry model has a codec once it resolved a schema
        schema_id = schema.id if schema.id is not None else self.config.schema_id
        if schema_id is None:
            raise Pending(self._resolving_or_retry(), "the registry gave the schema no id")
        return bytes([WIRE_MAGIC]) + schema_id.to_bytes(4, "big") + encoded


def avro_encoder(schema: Schema, view_json: bool) -> Codec:
    """JSON -> Avro binary (`view: json`), or Avro binary checked as it is."""
    parsed = parse_avro(schema)
    named: dict[str, Any] = parsed.get("__named_schemas", {}) if isinstance(parsed, dict) \
        else {}

    def decode(data: bytes) -> Any:
        return read_avro(parsed, data)

    if not view_json:
        def check(payload: bytes) -> bytes:
            decode(payload)
            return payload
        return check

    def encode(payload: bytes) -> bytes:
        value = from_view(parse_json(payload), parsed, named)
        try:
            fastavro.validation.validate(value, parsed, raise_errors=True)
        except fastavro.validation.ValidationError as e:
            errors = getattr(e, "errors", None)
            errors = list(errors) if isinstance(errors, list | tuple) and errors else [e]
            first = str(errors[0]).strip().splitlines()[0] if str(errors[0]).strip() \
                else "invalid"
            raise Invalid(f"not a record of the Avro schema: {first}") from None
        out = io.BytesIO()
        try:
            fastavro.schemaless_writer(out, parsed, value)
        except Exception as e:  # what validate let through but the writer cannot write
            raise Invalid(f"not a record of the Avro schema: {_first_line(e)}") from None
        encoded = out.getvalue()
        extra = _not_kept(value, decode(encoded), "")
        if extra is not None:
            raise Invalid(f"not a record of the Avro schema: {extra} is not in the schema")
        return encoded
    return encode


#: Logical types whose JSON view is ISO 8601 text (`models._json_default`), and how to read it.
_ISO = {"date": datetime.date.fromisoformat, "time-millis": datetime.time.fromisoformat,
        "time-micros": datetime.time.fromisoformat,
        "timestamp-millis": datetime.datetime.fromisoformat,
        "timestamp-micros": datetime.datetime.fromisoformat,
        "local-timestamp-millis": datetime.datetime.fromisoformat,
        "local-timestamp-micros": datetime.datetime.fromisoformat}


def from_view(value: Any, schema: Any, named: dict[str, Any]) -> Any:
    """The JSON view (what reads deliver: `models.compile_avro`) back as the values fastavro
    writes: `bytes` and `fixed` from latin-1 text, decimals from their text, dates and times
    from ISO 8601. Anything else is left for validation to judge."""
    if isinstance(schema, str):
        if schema in named:
            return from_view(value, named[schema], named)
        if schema == "bytes" and isinstance(value, str):
            return _latin1(value)
        return value
    if isinstance(schema, list):  # a union: the branch the value's JSON type points to
        if isinstance(value, str) and "string" not in schema:
            for branch in schema:
                converted = from_view(value, branch, named)
                if converted is not value:
                    return converted
        if isinstance(value, dict | list):
            for branch in schema:
                kind = _kind(branch, named)
                if (kind in ("record", "map")) == isinstance(value, dict) and \
                        kind in ("record", "map", "array"):
                    return from_view(value, branch, named)
        return value
    if not isinstance(schema, dict):
        return value
    kind, logical = schema.get("type"), schema.get("logicalType")
    if isinstance(value, str):
        if logical == "decimal":
            try:
                return decimal.Decimal(value)
            except decimal.InvalidOperation:
                return value
        if logical in _ISO:
            try:
                return _ISO[logical](value)
            except ValueError:
                return value
        if kind in ("bytes", "fixed"):
            return _latin1(value)
    if kind == "record" and isinstance(value, dict):
        fields = {f["name"]: f["type"] for f in schema.get("fields", ())}
        return {k: from_view(v, fields[k], named) if k in fields else v
                for k, v in value.items()}
    if kind == "array" and isinstance(value, list):
        return [from_view(v, schema.get("items"), named) for v in value]
    if kind == "map" and isinstance(value, dict):
        return {k: from_view(v, schema.get("values"), named) for k, v in value.items()}
    if isinstance(kind, str | list | dict) and kind not in _PRIMITIVES:
        return from_view(value, kind, named)
    return value


_PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string",
                         "record", "enum", "array", "map", "fixed"})


def _kind(schema: Any, named: dict[str, Any]) -> str | None:
    if isinstance(schema, str):
        return _kind(named[schema], named) if schema in named else schema
    if isinstance(schema, dict):
        kind = schema.get("type")
        return kind if isinstance(kind, str) else None
    return None


def _latin1(text: str) -> bytes | str:
    try:
        return text.encode("latin-1")
    except UnicodeEncodeError:
        return text  # not the view of bytes: validation says so


def _not_kept(sent: Any, kept: Any, path: str) -> str | None:
    """The first member of `sent` that writing dropped (a field the schema does not have)."""
    if isinstance(sent, dict) and isinstance(kept, dict):
        for name, value in sent.items():
            where = f"{path}.{name}" if path else str(name)
            if name not in kept:
                return where
            found = _not_kept(value, kept[name], where)
            if found is not None:
                return found
    elif isinstance(sent, list) and isinstance(kept, list):
        for i, (a, b) in enumerate(zip(sent, kept, strict=False)):
            found = _not_kept(a, b, f"{path}[{i}]")
            if found is not None:
                return found
    return None


def protobuf_encoder(schema: Schema, record: str | None, view_json: bool) -> Codec:
    """JSON -> the message `record` names (`view: json`), or its binary form checked; both
    after the message indexes."""
    from ssekd.catalogs import protobuf

    try:
        proto = protobuf.parse_proto(schema.text)
        path = proto.path_of(record)
        cls = proto.message_class(path)
    except protobuf.ProtoError as e:
        raise BadSchema(f"not a proto3 schema ssekd reads: {e.at(schema.source)}") \
            from None
    indexes = protobuf.encode_indexes(path)

    def encode(payload: bytes) -> bytes:
        try:
            body = protobuf.json_to_binary(cls, payload) if view_json \
                else protobuf.check_binary(cls, payload)
        except ValueError as e:
            raise Invalid(f"not a {cls.DESCRIPTOR.full_name} message: {e}") from None
        return indexes + body
    return encode
