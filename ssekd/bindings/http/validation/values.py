"""The models of one value (`string`, `int32`/`int64`, and `json`/`avro` from a catalog): what a
header, a path or query parameter, or a body of an `options.requests` entry is checked against.

Their `Invalid` messages say where and why a value fails, never the value itself: they become the
body of a `400` (or the reason a response is cut), and a header may be a credential, a body
anything.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from ssekd.catalogs.catalog import Catalog, Schema
from ssekd.catalogs.models import (
    WIRE_HEADER,
    WIRE_MAGIC,
    Codec,
    FieldModel,
    Invalid,
    ModelConfig,
    compile_avro,
    json_problem,
    json_validator,
    parse_json,
)

#: Seconds before a catalog that could not answer is asked again (and the `Retry-After` of a
#: request's `503` when the catalog says nothing better).
RETRY_AFTER = 1.0
#: The integer models and the values each takes as text.
INT_BOUNDS = {"int32": (-(1 << 31), (1 << 31) - 1), "int64": (-(1 << 63), (1 << 63) - 1)}


class ValueModel(Protocol):
    """Checks one value (a header, a parameter, a body): returns, or raises `Invalid` (its
    message names no part of the value) or `Pending` (the schema is not held yet)."""

    def check(self, value: bytes) -> object: ...


@dataclass(frozen=True)
class StringModel:
    """`model: string`: text in its encoding, `minLength`/`maxLength` characters, a `pattern`
    the whole text must match."""

    encoding: str = "utf-8"
    min_length: int | None = None
    max_length: int | None = None
    pattern: re.Pattern[str] | None = None

    def check(self, value: bytes) -> None:
        try:
            text = value.decode(self.encoding)
        except UnicodeDecodeError:
            raise Invalid(f"not {self.encoding} text") from None
        if self.min_length is not None and len(text) < self.min_length:
            raise Invalid(f"shorter than {self.min_length} characters")
        if self.max_length is not None and len(text) > self.max_length:
            raise Invalid(f"longer than {self.max_length} characters")
        if self.pattern is not None and self.pattern.fullmatch(text) is None:
            raise Invalid(f"does not match the pattern {self.pattern.pattern}")


@dataclass(frozen=True)
class IntegerModel:
    """`model: int32|int64`: decimal text (`format: text`, the default) or big-endian bytes
    (`format: binary`), within the type, its `range` (`[1,10)`, `(,0]`) and a `multiple`."""

    kind: str
    binary: bool = False
    low: int | None = None
    high: int | None = None
    multiple: int | None = None

    def check(self, value: bytes) -> None:
        if self.binary:
            size = 4 if self.kind == "int32" else 8
            if len(value) != size:
                raise Invalid(f"not a {size}-byte {self.kind}")
            number = int.from_bytes(value, "big", signed=True)
        else:
            if re.fullmatch(rb"-?[0-9]+", value) is None:
                raise Invalid(f"not an {self.kind}")
            number = int(value)
            lowest, highest = INT_BOUNDS[self.kind]
            if not lowest <= number <= highest:
                raise Invalid(f"not an {self.kind}")
        if self.low is not None and number < self.low:
            raise Invalid("below its range")
        if self.high is not None and number > self.high:
            raise Invalid("above its range")
        if self.multiple and number % self.multiple:
            raise Invalid(f"not a multiple of {self.multiple}")


class SchemaModel(FieldModel):
    """`model: json|avro` with a schema from a catalog: the kafka cache's `FieldModel` (one
    compiled schema per version, `latest` followed, registry ids fetched once), with messages
    that name where a value fails and never the value, and a registry that could not answer
    asked again by the next request rather than by a timer of its own (a binding replaced by a
    reload leaves nothing running)."""

    def __init__(self, config: ModelConfig, catalog: Catalog | None, clock: Any,
                 report: Callable[[str, str], None]) -> None:
        super().__init__(config, catalog, clock, report)
        #: `strategy: encoded`: every payload names its schema (the registry's wire format).
        self.encoded = config.subject is None and config.schema_id is None
        if self.encoded:
            self.wire_only = True
        self._failed_at: float | None = None

    def compile(self, schema: Schema) -> Codec:
        key = (schema.kind, schema.text)
        codec = self._compiled.get(key)
        if codec is None:
            if self.config.model == "avro":
                codec = _quiet(compile_avro(schema, False), "not Avro of its schema")
            else:
                codec = compile_json_quietly(schema)
            self._compiled[key] = codec
        return codec

    def _broken(self, why: str) -> None:
        self._problem = why
        self._failed_at = self.clock.seconds()
        self.report("CATALOG_SCHEMA_UNAVAILABLE", why)

    def prepare(self) -> None:
        """Ask the catalog for the schema now if it is not held (a response to check is on
        its way), unless it was asked less than `RETRY_AFTER` seconds ago."""
        if not self.wire_only and not self.ready and self._resolving is None:
            failed = self._failed_at
            if failed is None or self.clock.seconds() - failed >= RETRY_AFTER:
                self.resolve()

    def check(self, payload: bytes) -> bytes:
        if self.wire_only and (len(payload) < WIRE_HEADER or payload[0] != WIRE_MAGIC):
            raise Invalid("not in the schema registry's wire format (byte 0, then a 4-byte "
                          "schema id)")
        self.prepare()
        return super().check(payload)


def _quiet(codec: Codec, message: str) -> Codec:
    """`codec` raising `message` in place of its own (a decoder's words may quote the bytes)."""
    def check(payload: bytes) -> bytes:
        try:
            return codec(payload)
        except Invalid:
            raise Invalid(message) from None
    return check


def compile_json_quietly(schema: Schema) -> Codec:
    """A JSON Schema checker whose `Invalid` says where the document fails and which keyword
    of the schema it fails (with what the schema wants), never a value of the document."""
    validator = json_validator(schema)

    def check(payload: bytes) -> bytes:
        try:
            value = parse_json(payload)
        except Invalid:
            raise Invalid("not JSON") from None
        error = json_problem(validator, value)
        if error is not None:
            raise Invalid(_json_problem(error))
        return payload
    return check


def _json_problem(error: Any) -> str:
    where = "".join(f"[{p!r}]" if isinstance(p, int) else f".{p}"
                    for p in error.absolute_path) or "the document"
    keyword = str(error.validator)
    wanted = error.validator_value
    if keyword in ("additionalProperties", "unevaluatedProperties") and wanted is False:
        return f"{where}: has a property its schema does not allow"
    if keyword == "required":
        missing = [name for name in wanted if isinstance(error.instance, dict)
                   and name not in error.instance]
        return f"{where}: lacks required {', '.join(map(str, missing)) or 'properties'}"
    if isinstance(wanted, str | int | float | bool) or (
            isinstance(wanted, list) and all(isinstance(w, str | int | float) for w in wanted)):
        shown = str(wanted)
        if len(shown) <= 80:
            return f"{where}: fails {keyword} {shown}"
    return f"{where}: fails {keyword}"
