"""Models: what a topic's record values (or keys) must be, checked once per record at the cache.

A model config is Zilla's `{model: json|avro|protobuf|string, view?: json, catalog: {name:
[{subject | id | strategy: topic, version, record?}]}}`. ssekd reads one schema per model (the
single entry of the single catalog listed; the config schema refuses more). What each model
does with a payload:

- `string`: it must be UTF-8 text; delivered as it is.
- `json`: it must be a JSON document valid against the schema (JSON Schema, compiled once per
  schema version); delivered as it is. A Confluent wire-format payload (byte 0, then a 4-byte
  big-endian schema id) is checked against the schema with that id and delivered without
  the five-byte prefix.
- `avro`: it must decode with the Avro schema, leaving no byte over. With a `schema-registry`
  catalog every payload must be in the wire format (as Confluent's serializers write it; a plain
  Avro record may start with byte 0 too, so the two cannot be told apart by looking) and is
  decoded with the schema of its id (the writer's schema: a new version is picked up the first
  time a record carries its id); with a local catalog, which has no ids, payloads are plain
  Avro decoded with the configured schema. With `view: json` it
  is delivered as JSON (the decoded record, bytes as latin-1 text, decimals as strings); without,
  the Avro bytes are delivered (without the wire-format prefix).
- `protobuf`: the schema is `.proto` text (`ssekd.catalogs.protobuf`); a payload is the message
  indexes naming one of its messages, then that message, which must decode. With a registry
  the wire format comes first, as for Avro. With `view: json` it is delivered as JSON (proto
  field names, every field, defaults too, as Zilla's JSON view); without, the message's bytes.
  `record` names the message a writer writes (`ssekd.catalogs.writing`); it must exist.

A payload that fails raises `Invalid` (its message is what the event reports). A payload whose
schema is not held yet raises `Pending` with a `Deferred` that fires once it is worth trying
again: the caller (the kafka cache's record gate) holds the record, and those after it, till
then, so the order of records never changes.

Keys are checked the same way but never converted: filters and key-form event ids compare the
key's bytes as Kafka holds them.
"""

from __future__ import annotations

import datetime
import decimal
import io
import json
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import fastavro
import jsonschema
from twisted.internet.defer import Deferred
from twisted.internet.task import deferLater

from ssekd.catalogs.catalog import (
    LATEST,
    Catalog,
    CatalogUnavailable,
    Schema,
    SchemaNotFound,
)
from ssekd.catalogs.local import LocalCatalog

#: Seconds between two tries of a catalog that could not answer, at first; doubles to the max.
RETRY_FIRST = 1.0
RETRY_MAX = 30.0
#: Seconds an id the registry said it does not have is not asked about again.
UNKNOWN_ID_SECONDS = 30.0
#: Ids remembered as unknown (or unavailable) at most, per model: records name ids, and a
#: producer writing made-up ones must not grow the daemon's memory without end. Past it, the
#: ones remembered longest are forgotten (asked about again if they come back).
MAX_REMEMBERED_IDS = 1000
#: The Confluent wire format: a zero byte, then the schema id as 4 bytes big-endian.
WIRE_MAGIC = 0
WIRE_HEADER = 5


class Invalid(Exception):
    """The payload does not satisfy its model; the record is skipped."""


class Pending(Exception):
    """The payload's schema is not held yet; try again when `ready` fires."""

    def __init__(self, ready: Deferred[None], why: str) -> None:
        super().__init__(why)
        self.ready = ready


class BadSchema(Exception):
    """A schema that does not compile (not JSON, not a valid JSON Schema or Avro schema)."""


@dataclass(frozen=True)
class ModelConfig:
    """One `value` or `key` model of a cache_server topic, as the config states it."""

    model: str
    view: str | None
    catalog: str | None
    subject: str | None
    schema_id: int | None
    version: str
    #: For `protobuf`: the message of the schema the records are (its first one when absent).
    record: str | None = None

    @staticmethod
    def parse(topic: str, part: str, spec: Mapping[str, Any]) -> ModelConfig:
        """`part` is `value` or `key`; `strategy: topic` names the subject `<topic>-<part>`,
        as Confluent's TopicNameStrategy does."""
        catalogs = spec.get("catalog") or {}
        name, entries = next(iter(catalogs.items()), (None, [{}]))
        entry: Mapping[str, Any] = entries[0] if entries else {}
        subject = entry.get("subject")
        if entry.get("strategy") == "topic":
            subject = f"{topic}-{part}"
        sid = entry.get("id")
        record = entry.get("record")
        return ModelConfig(model=str(spec["model"]), view=spec.get("view"), catalog=name,
                           subject=subject, schema_id=int(sid) if sid is not None else None,
                           version=str(entry.get("version", LATEST)),
                           record=None if record is None else str(record))

    def describe(self) -> str:
        if self.schema_id is not None:
            return f"{self.catalog}: id {self.schema_id}"
        return f"{self.catalog}: {self.subject} version {self.version}"


# -- compiled schemas --------------------------------------------------------------------------

Codec = Callable[[bytes], bytes]


def json_validator(schema: Schema) -> Any:
    """The validator of a JSON Schema (of the draft its `$schema` names), or `BadSchema`."""
    try:
        document = json.loads(schema.text)
        cls = jsonschema.validators.validator_for(document)
        cls.check_schema(document)
    except (ValueError, jsonschema.SchemaError) as e:
        raise BadSchema(f"not a JSON Schema: {_first_line(e)}") from None
    return cls(document)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def parse_json(payload: bytes) -> Any:
    """A payload as JSON, or `Invalid`: what a record, a body or an event carries is anyone's.

    Python's parser takes `NaN` and `Infinity`, which JSON has not: refused. A document nested
    deeper than the interpreter's recursion limit raises `RecursionError`, not `ValueError`:
    uncaught, a record of 100,000 `[` would stop its topic's cache at that record for good (the
    gate retries the record it failed on), and a body would be answered 500. Refused too."""
    try:
        return json.loads(payload, parse_constant=_no_constant)
    except RecursionError:
        raise Invalid("not JSON: nested too deeply") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise Invalid(f"not JSON: {_first_line(e)}") from None


def json_problem(validator: Any, value: Any) -> Any | None:
    """The error `jsonschema` finds most relevant in `value`, or None when it is valid. The
    validator walks the document by recursion: one too deep for it is `Invalid`."""
    try:
        if validator.is_valid(value):
            return None
        return jsonschema.exceptions.best_match(validator.iter_errors(value))
    except RecursionError:
        raise Invalid("the document: nested too deeply to check") from None


def compile_json(schema: Schema) -> Codec:
    """A JSON Schema checker: raises `Invalid` or returns the payload unchanged."""
    validator = json_validator(schema)

    def check(payload: bytes) -> bytes:
        error = json_problem(validator, parse_json(payload))
        if error is not None:
            where = "".join(f"[{p!r}]" for p in error.absolute_path) or "the document"
            raise Invalid(f"{where}: {_first_line(error)}")
        return payload
    return check


def parse_avro(schema: Schema) -> Any:
    """An Avro schema parsed (fastavro's form, for reading and writing), or `BadSchema`."""
    try:
        return fastavro.parse_schema(json.loads(schema.text))
    except Exception as e:  # fastavro raises several kinds on a schema it cannot use
        raise BadSchema(f"not an Avro schema: {_first_line(e)}") from None


def read_avro(parsed: Any, payload: bytes) -> Any:
    """The record `payload` is (Avro binary of the `parsed` schema, nothing after it), or
    `Invalid`."""
    data = io.BytesIO(payload)
    try:
        record = fastavro.schemaless_reader(data, parsed, None)
    except Exception as e:  # EOFError, ValueError, IndexError, UnicodeDecodeError...
        raise Invalid(f"not Avro of this schema: {_first_line(e) or type(e).__name__}") \
            from None
    if data.tell() != len(payload):
        raise Invalid(f"not Avro of this schema: {len(payload) - data.tell()} bytes left "
                      f"after the record")
    return record


def compile_avro(schema: Schema, view_json: bool) -> Codec:
    """An Avro decoder: raises `Invalid`, or returns the payload (as JSON with `view: json`)."""
    parsed = parse_avro(schema)

    def check(payload: bytes) -> bytes:
        record = read_avro(parsed, payload)
        if not view_json:
            return payload
        return json.dumps(record, default=_json_default, separators=(",", ":"),
                          ensure_ascii=False).encode()
    return check


def compile_protobuf(schema: Schema, record: str | None, view_json: bool) -> Codec:
    """A protobuf decoder (`ssekd.catalogs.protobuf`): a payload is the message indexes, then
    the message they name, which must decode; with `view: json` it is delivered as JSON, else
    as the message's bytes (without the indexes, nor the fields the message lacks: Zilla writes
    again what it parsed). `record` must name a message of the schema."""
    from ssekd.catalogs import protobuf

    try:
        proto = protobuf.parse_proto(schema.text)
        proto.path_of(record)
    except protobuf.ProtoError as e:
        raise BadSchema(f"not a proto3 schema ssekd reads: {e.at(schema.source)}") \
            from None

    def check(payload: bytes) -> bytes:
        try:
            path, skip = protobuf.decode_indexes(payload)
            cls = proto.message_class(path)
            body = payload[skip:]
            if view_json:
                return protobuf.binary_to_json(cls, body)
            return protobuf.check_binary(cls, body)
        except (ValueError, protobuf.ProtoError) as e:
            raise Invalid(str(e)) from None
    return check


def check_string(payload: bytes) -> bytes:
    """The `string` model: UTF-8 text, delivered as it is."""
    try:
        payload.decode("utf-8")
    except UnicodeDecodeError as e:
        raise Invalid(f"not UTF-8 text: {e.reason} at byte {e.start}") from None
    return payload


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("latin-1")  # Avro's own JSON encoding of bytes and fixed
    if isinstance(value, decimal.Decimal | uuid.UUID):
        return str(value)
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    return str(value)


def _first_line(error: BaseException) -> str:
    message = getattr(error, "message", None) or str(error)
    text = str(message).splitlines()[0] if str(message) else ""
    return text if len(text) <= 200 else text[:200] + "…"


# -- one model at run time ---------------------------------------------------------------------

class FieldModel:
    """The model of a topic's values (or keys): holds its schema, compiles each version once,
    keeps following `latest` (`cache-ttl`), and fetches wire-format ids it has not seen."""

    def __init__(self, config: ModelConfig, catalog: Catalog | None, clock: Any,
                 report: Callable[[str, str], None], convert: bool = True) -> None:
        self.config = config
        self.catalog = catalog
        self.clock = clock
        self.report = report
        self.convert = convert
        #: The schema plain payloads are checked against (None until resolved).
        self.current: Schema | None = None
        self._codec: Codec | None = None
        self._compiled: dict[tuple[str | None, str], Codec] = {}
        self._problem: str | None = None
        self._resolving: Deferred[Any] | None = None
        self._retry = RETRY_FIRST
        self._next_refresh = 0.0
        self._ids: dict[int, Codec] = {}
        self._unknown_ids: dict[int, float] = {}
        self._id_waits: dict[int, Deferred[Any]] = {}
        self._id_retry_at: dict[int, float] = {}
        #: The timer of the next try after a failure; cancelled by `stop`.
        self._retry_call: Any = None
        self._stopped = False
        ids = catalog is not None and catalog.has_ids and config.model != "string"
        #: Avro with a registry: the wire format only. JSON with a registry: a payload starting
        #: with byte 0 (never JSON) is the wire format.
        self.wire_only = ids and config.model in ("avro", "protobuf")
        self.wire_possible = ids and config.model == "json"
        if config.model == "string" or catalog is None:
            self._codec = check_string if config.model == "string" else None

    @property
    def ready(self) -> bool:
        """Whether plain payloads can be checked now (the schema is held and compiles)."""
        return self._codec is not None

    @property
    def problem(self) -> str | None:
        """Why it is not ready, when it tried and failed."""
        return self._problem

    def compile(self, schema: Schema) -> Codec:
        key = (schema.kind, schema.text)
        codec = self._compiled.get(key)
        if codec is None:
            if self.config.model == "avro":
                codec = compile_avro(schema, self.convert and self.config.view == "json")
            elif self.config.model == "protobuf":
                codec = compile_protobuf(schema, self.config.record,
                                         self.convert and self.config.view == "json")
            else:
                codec = compile_json(schema)
            self._compiled[key] = codec
        return codec

    # -- resolving the configured schema ------------------------------------------------------

    def resolve(self) -> Deferred[None]:
        """Fetch (or re-fetch) the configured schema; on failure try again later, with an event.
        The Deferred fires once this attempt is over, whatever its outcome."""
        if self._resolving is not None:
            return _follow(self._resolving)
        catalog, c = self.catalog, self.config
        if catalog is None:
            return _done()
        if c.schema_id is not None:
            d = catalog.by_id(c.schema_id)
        else:
            assert c.subject is not None
            d = catalog.resolve(c.subject, c.version)
        self._resolving = d  # before the callbacks, which may run at once and clear it
        d.addCallbacks(self._resolved, self._failed)
        return _follow(d)

    def _resolved(self, schema: Schema) -> None:
        self._resolving = None
        try:
            codec = self.compile(schema)
        except BadSchema as e:
            self._broken(f"{self.config.describe()}: {e}")
            return
        if self.current is not None and schema != self.current:
            self.report("CATALOG_SCHEMA_UPDATED",
                        f"{self.config.describe()}: now version {schema.version} (id {schema.id})")
        elif self._problem is not None:
            self.report("CATALOG_SCHEMA_RESOLVED", f"{self.config.describe()}: resolved")
        self.current, self._codec, self._problem = schema, codec, None
        self._retry = RETRY_FIRST

    def _failed(self, failure: Any) -> None:
        self._resolving = None
        error = failure.value
        if not isinstance(error, SchemaNotFound | CatalogUnavailable):
            failure.raiseException()  # a bug: let it be seen
        self._broken(str(error))

    def _broken(self, why: str) -> None:
        """Keep what we had (if anything), say why, and try again after a back-off."""
        self._problem = why
        if self._stopped:
            return
        self.report("CATALOG_SCHEMA_UNAVAILABLE", f"{why}; retrying in {self._retry:g} s")
        self._retry_call = self.clock.callLater(self._retry, self._try_again)
        self._retry = min(self._retry * 2, RETRY_MAX)

    def _try_again(self) -> None:
        self._retry_call = None
        self.resolve()

    @property
    def next_try_in(self) -> float | None:
        """Seconds until the catalog is asked again after a failure (None: no try pending)."""
        call = self._retry_call
        if call is None or not call.active():
            return None
        return max(0.0, float(call.getTime()) - float(self.clock.seconds()))

    def stop(self) -> None:
        """No more tries (the cache_server stopped: a reload replaced it, or shutdown)."""
        self._stopped = True
        if self._retry_call is not None and self._retry_call.active():
            self._retry_call.cancel()
        self._retry_call = None

    # -- checking payloads (reactor thread, once per record) ----------------------------------

    def check(self, payload: bytes) -> bytes:
        """The payload to deliver, or `Invalid`, or `Pending` (hold it: see the module)."""
        if self.wire_only or (payload[:1] == b"\0" and self.wire_possible):
            if len(payload) < WIRE_HEADER or payload[0] != WIRE_MAGIC:
                raise Invalid("not Confluent wire format (byte 0 and a 4-byte schema id)")
            schema_id = int.from_bytes(payload[1:WIRE_HEADER], "big")
            return self._by_id(schema_id)(payload[WIRE_HEADER:])
        return self._ready_codec()(payload)

    def _ready_codec(self) -> Codec:
        """The codec of the schema in force (`Pending` while none is resolved); asks again
        for `latest` when it is due, for the records after this one."""
        codec = self._codec
        if codec is None:
            raise Pending(self._resolving_or_retry(), self._problem or "schema not resolved yet")
        if self.catalog is not None and self.config.version == LATEST \
                and self.config.schema_id is None and self.clock.seconds() >= self._next_refresh:
            self._refresh()
        return codec

    def _resolving_or_retry(self) -> Deferred[None]:
        if self._resolving is not None:
            return _follow(self._resolving)
        if self._stopped:
            return Deferred()  # never: what waits goes with its stopped cache
        return deferLater(self.clock, self._retry / 2, lambda: None)

    def _refresh(self) -> None:
        """Ask for `latest` again in the background once the catalog's copy is stale."""
        assert self.catalog is not None and self.config.subject is not None
        self._next_refresh = self.clock.seconds() + 1.0  # ask the catalog at most once a second
        if self._resolving is None and self.catalog.stale(self.config.subject, LATEST):
            self.resolve()

    def _by_id(self, schema_id: int) -> Codec:
        codec = self._ids.get(schema_id)
        if codec is not None:
            return codec
        assert self.catalog is not None
        now = self.clock.seconds()
        if self._unknown_ids.get(schema_id, 0.0) > now:
            raise Invalid(f"unknown schema id {schema_id}")
        known = self.catalog.known_id(schema_id)
        if known is not None:
            return self._compile_id(schema_id, known)
        wait = self._id_waits.get(schema_id)
        if wait is not None:
            raise Pending(_follow(wait), f"fetching schema id {schema_id}")
        retry_at = self._id_retry_at.get(schema_id, 0.0)
        if retry_at > now:
            raise Pending(deferLater(self.clock, retry_at - now, lambda: None),
                          f"schema id {schema_id} unavailable")
        d = self.catalog.by_id(schema_id)

        def got(schema: Schema) -> None:
            self._id_waits.pop(schema_id, None)
            try:
                self._compile_id(schema_id, schema)
            except Invalid as e:
                self.report("CATALOG_SCHEMA_UNAVAILABLE", f"schema id {schema_id}: {e}")

        def failed(failure: Any) -> None:
            self._id_waits.pop(schema_id, None)
            error = failure.value
            if isinstance(error, SchemaNotFound):
                _remember(self._unknown_ids, schema_id,
                          self.clock.seconds() + UNKNOWN_ID_SECONDS, self.clock.seconds())
            elif isinstance(error, CatalogUnavailable):
                _remember(self._id_retry_at, schema_id, self.clock.seconds() + RETRY_FIRST * 5,
                          self.clock.seconds())
                self.report("CATALOG_SCHEMA_UNAVAILABLE", f"schema id {schema_id}: {error}")
            else:
                failure.raiseException()

        self._id_waits[schema_id] = d  # before the callbacks, which may run at once
        d.addCallbacks(got, failed)
        raise Pending(_follow(d), f"fetching schema id {schema_id}")

    def _compile_id(self, schema_id: int, schema: Schema) -> Codec:
        try:
            codec = self.compile(schema)
        except BadSchema as e:
            # the registry's schema for this id is unusable: every record naming it is invalid
            _remember(self._unknown_ids, schema_id, float("inf"), self.clock.seconds())
            raise Invalid(f"schema id {schema_id}: {e}") from None
        self._ids[schema_id] = codec
        return codec


def _remember(until: dict[int, float], schema_id: int, at: float, now: float) -> None:
    """`until[schema_id] = at`, keeping at most `MAX_REMEMBERED_IDS` entries: the expired go
    first, then those remembered longest (a dict keeps its insertion order)."""
    until.pop(schema_id, None)
    if len(until) >= MAX_REMEMBERED_IDS:
        for sid in [sid for sid, t in until.items() if t <= now]:
            del until[sid]
        while len(until) >= MAX_REMEMBERED_IDS:
            del until[next(iter(until))]
    until[schema_id] = at


def _follow(d: Deferred[Any]) -> Deferred[None]:
    """A Deferred that fires (with None, never failing) when `d` does, leaving `d` alone."""
    mine: Deferred[None] = Deferred()

    def fire(_: Any) -> Any:
        if not mine.called:
            mine.callback(None)
        return _

    d.addBoth(fire)
    return mine


def _done() -> Deferred[None]:
    d: Deferred[None] = Deferred()
    d.callback(None)
    return d


def local_problem(field: FieldModel) -> str | None:
    """What is wrong with a model whose catalog is local (`inline`, `filesystem`), checked
    when the config is built; None when fine or when the catalog is a registry (asked later)."""
    c, catalog = field.config, field.catalog
    if catalog is None or not isinstance(catalog, LocalCatalog):
        return None
    if c.subject is None:
        return f"catalog {c.catalog!r} is local: name a `subject` (it has no registry ids)"
    try:
        field.compile(catalog.fetch_blocking(c.subject, c.version))
    except (SchemaNotFound, BadSchema) as e:
        return f"{c.describe()}: {e}"
    return None


class TopicModel:
    """The models of one topic's values and keys (either may be absent)."""

    def __init__(self, topic: str, value: FieldModel | None, key: FieldModel | None) -> None:
        self.topic = topic
        self.value = value
        self.key = key
        self.fields = tuple(f for f in (value, key) if f is not None)

    @property
    def ready(self) -> bool:
        return all(f.ready for f in self.fields)

    @property
    def problem(self) -> str | None:
        return next((f.problem for f in self.fields if f.problem), None)

    def resolve(self) -> Deferred[None]:
        """Fetch every configured schema (see `FieldModel.resolve`)."""
        for f in self.fields:
            f.resolve()
        return _done()

    @property
    def next_try_in(self) -> float | None:
        return max((t for f in self.fields if (t := f.next_try_in) is not None), default=None)

    def stop(self) -> None:
        for f in self.fields:
            f.stop()

    def check(self, key: bytes | None, value: bytes | None) -> tuple[bytes | None, bytes | None]:
        """The (key, value) to deliver; raises `Invalid` or `Pending`. A tombstone (no value)
        and a record without a key have nothing to check there."""
        if self.key is not None and key is not None:
            try:
                self.key.check(key)
            except Invalid as e:
                raise Invalid(f"key: {e}") from None
        if self.value is not None and value is not None:
            value = self.value.check(value)
        return key, value
