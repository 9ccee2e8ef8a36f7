"""The `protobuf` model's schema: a `.proto` file's text, read at run time into message classes.

A catalog holds a `.proto` as text (a filesystem file, an inline schema, a registry schema of
`schemaType: PROTOBUF`), and no `protoc` runs here: this module reads the text itself into a
`FileDescriptorProto` and lets the `protobuf` package (already a dependency, for the OTLP
exporter) build the message classes, encode, decode and map to and from JSON.

What is read: `syntax = "proto3"`, `package`, `import` of the well-known types
(`google/protobuf/*.proto`, which the `protobuf` package ships), `option` statements (ignored),
messages with nested messages and enums, scalar, message and enum fields, `repeated`,
`optional`, `map<K, V>`, `oneof`, `reserved`, field options in brackets (ignored), enums (with
`option allow_alias`). What is refused at load, naming the line: proto2 and editions, imports of
other files, `extend`/`extensions`, `group`, `service` (a record schema has no use for one).

The Confluent wire format puts the record's *message indexes* before the message: which message
of the file it is, as a path of indexes (top-level index, then nested ones), written as a
zig-zag varint count followed by zig-zag varint indexes; the path `[0]` (the first top-level
message, the common case) is the single byte 0. Zilla writes them with every catalog, after the
registry's five-byte header when there is one; they are read and written here.
"""

from __future__ import annotations

import importlib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory
from google.protobuf.message import DecodeError, Message

F = descriptor_pb2.FieldDescriptorProto

SCALARS = {
    "double": F.TYPE_DOUBLE, "float": F.TYPE_FLOAT, "int64": F.TYPE_INT64,
    "uint64": F.TYPE_UINT64, "int32": F.TYPE_INT32, "fixed64": F.TYPE_FIXED64,
    "fixed32": F.TYPE_FIXED32, "bool": F.TYPE_BOOL, "string": F.TYPE_STRING,
    "bytes": F.TYPE_BYTES, "uint32": F.TYPE_UINT32, "sfixed32": F.TYPE_SFIXED32,
    "sfixed64": F.TYPE_SFIXED64, "sint32": F.TYPE_SINT32, "sint64": F.TYPE_SINT64,
}
#: Map keys may be any integral or string scalar (not floating point, bytes, or a message).
MAP_KEYS = frozenset(SCALARS) - {"double", "float", "bytes"}

_TOKEN = re.compile(r"""
    (?P<space>\s+) | (?P<comment>//[^\n]*|/\*.*?\*/)
  | (?P<string>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')
  | (?P<number>[-+]?(?:0[xX][0-9a-fA-F]+|[0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?|inf|nan))
  | (?P<ident>\.?[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)
  | (?P<symbol>[{}()\[\]<>;=,:])
""", re.VERBOSE | re.DOTALL)


class ProtoError(Exception):
    """The text is not a `.proto` this module reads: `line` (None: not one line's fault) and
    `what`."""

    def __init__(self, what: str, line: int | None = None) -> None:
        super().__init__(what if line is None else f"line {line}: {what}")
        self.what = what
        self.line = line

    def at(self, source: str | None) -> str:
        """The message naming `source` (the schema file) and the line."""
        if source is None:
            return str(self)
        return f"{source}:{self.line}: {self.what}" if self.line is not None \
            else f"{source}: {self.what}"


@dataclass(frozen=True)
class _Token:
    kind: str
    text: str
    line: int


def _tokens(text: str) -> list[_Token]:
    out, pos, line = [], 0, 1
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise ProtoError(f"unexpected {text[pos]!r}", line)
        kind = m.lastgroup or ""
        if kind not in ("space", "comment"):
            out.append(_Token(kind, m.group(), line))
        line += m.group().count("\n")
        pos = m.end()
    return out


class _Parser:
    """A recursive-descent reader of the subset described in the module docstring."""

    def __init__(self, text: str) -> None:
        self.tokens = _tokens(text)
        self.at = 0
        self.file = descriptor_pb2.FileDescriptorProto(name="schema.proto", syntax="proto3")
        #: Fields whose type name is resolved once every type is known: (field, scope, line).
        self.pending: list[tuple[Any, str, str, int]] = []
        #: Full names (with a leading dot) of the declared and imported types -> is an enum.
        self.types: dict[str, bool] = {}
        self.imports: list[descriptor_pb2.FileDescriptorProto] = []

    # -- tokens --------------------------------------------------------------------------------

    def peek(self, ahead: int = 0) -> _Token | None:
        i = self.at + ahead
        return self.tokens[i] if i < len(self.tokens) else None

    def line(self) -> int:
        t = self.peek()
        return t.line if t is not None else (self.tokens[-1].line if self.tokens else 1)

    def fail(self, what: str) -> ProtoError:
        return ProtoError(what, self.line())

    def next(self) -> _Token:
        t = self.peek()
        if t is None:
            raise self.fail("unexpected end of the file")
        self.at += 1
        return t

    def expect(self, text: str) -> _Token:
        t = self.next()
        if t.text != text:
            self.at -= 1
            raise self.fail(f"expected {text!r}, got {t.text!r}")
        return t

    def accept(self, text: str) -> bool:
        t = self.peek()
        if t is not None and t.text == text:
            self.at += 1
            return True
        return False

    def ident(self, what: str = "a name") -> str:
        t = self.next()
        if t.kind != "ident":
            self.at -= 1
            raise self.fail(f"expected {what}, got {t.text!r}")
        return t.text

    def number(self) -> int:
        t = self.next()
        try:
            return int(t.text, 0)
        except ValueError:
            self.at -= 1
            raise self.fail(f"expected an integer, got {t.text!r}") from None

    def skip_until(self, end: str) -> None:
        """Skip an option's value (a constant, or an aggregate in braces) up to `end`."""
        depth = 0
        while True:
            t = self.next()
            if t.text == end and depth == 0:
                return
            if t.kind == "symbol" and t.text in "{[(":
                depth += 1
            elif t.kind == "symbol" and t.text in "}])":
                depth -= 1

    # -- the file ------------------------------------------------------------------------------

    def parse(self) -> descriptor_pb2.FileDescriptorProto:
        if self.accept("syntax"):
            self.expect("=")
            t = self.next()
            if t.text.strip("'\"") != "proto3":
                self.at -= 1
                raise self.fail(f"only proto3 is read, not {t.text}")
            self.expect(";")
        elif self.accept("edition"):
            raise self.fail("editions are not read: only proto3")
        else:
            raise self.fail('expected `syntax = "proto3";` first (proto2 is not read)')
        while self.peek() is not None:
            t = self.next()
            if t.text == ";":
                continue
            if t.text == "package":
                self.file.package = self.ident("a package name")
                self.expect(";")
            elif t.text == "import":
                self._import()
            elif t.text == "option":
                self.skip_until(";")
            elif t.text == "message":
                self._message(self.file.message_type.add(), self._scope(""))
            elif t.text == "enum":
                self._enum(self.file.enum_type.add(), self._scope(""))
            else:
                self.at -= 1
                raise self.fail(f"{t.text!r} is not read here (messages, enums, package, "
                                f"imports of well-known types and options are)")
        self._resolve()
        return self.file

    def _scope(self, name: str, outer: str | None = None) -> str:
        base = outer if outer is not None else ("." + self.file.package if self.file.package
                                                else "")
        return f"{base}.{name}" if name else base

    def _import(self) -> None:
        if self.accept("public") or self.accept("weak"):
            pass
        t = self.next()
        name = t.text.strip("'\"")
        self.expect(";")
        m = re.fullmatch(r"google/protobuf/(\w+)\.proto", name)
        module = None
        if m is not None:
            try:
                module = importlib.import_module(f"google.protobuf.{m.group(1)}_pb2")
            except ImportError:
                module = None
        if module is None:
            self.at -= 1
            raise self.fail(f"import {name!r}: only the well-known types "
                            f"(google/protobuf/*.proto) can be imported")
        proto = descriptor_pb2.FileDescriptorProto()
        module.DESCRIPTOR.CopyToProto(proto)
        self.imports.append(proto)
        self.file.dependency.append(name)
        self._declare(proto.message_type, proto.enum_type, "." + proto.package)

    def _declare(self, messages: Any, enums: Any, scope: str) -> None:
        for e in enums:
            self.types[f"{scope}.{e.name}"] = True
        for msg in messages:
            self.types[f"{scope}.{msg.name}"] = False
            self._declare(msg.nested_type, msg.enum_type, f"{scope}.{msg.name}")

    def _message(self, msg: Any, outer: str) -> None:
        msg.name = self.ident("a message name")
        scope = f"{outer}.{msg.name}"
        self.types[scope] = False
        self.expect("{")
        while not self.accept("}"):
            self._member(msg, scope, None)

    def _member(self, msg: Any, scope: str, oneof: int | None) -> None:
        t = self.peek()
        if t is None:
            raise self.fail("unexpected end of the file (a `}` is missing)")
        word = t.text
        if word == ";":
            self.at += 1
        elif word == "option":
            self.at += 1
            self.skip_until(";")
        elif word == "reserved":
            self.at += 1
            self.skip_until(";")
        elif word == "message" and oneof is None:
            self.at += 1
            self._message(msg.nested_type.add(), scope)
        elif word == "enum" and oneof is None:
            self.at += 1
            self._enum(msg.enum_type.add(), scope)
        elif word == "oneof" and oneof is None:
            self.at += 1
            index = len(msg.oneof_decl)
            msg.oneof_decl.add().name = self.ident("a oneof name")
            self.expect("{")
            while not self.accept("}"):
                self._member(msg, scope, index)
        elif word in ("extend", "extensions", "group", "required", "service"):
            raise self.fail(f"{word!r} is not read (proto3 record schemas only)")
        else:
            self._field(msg, scope, oneof)

    def _field(self, msg: Any, scope: str, oneof: int | None) -> None:
        line = self.line()
        label = F.LABEL_OPTIONAL
        proto3_optional = False
        if oneof is None and self.accept("repeated"):
            label = F.LABEL_REPEATED
        elif oneof is None and self.accept("optional"):
            proto3_optional = True
        if self.accept("map"):
            if oneof is not None:
                raise self.fail("a map cannot be in a oneof")
            self._map(msg, scope, line)
            return
        type_name = self.ident("a field type")
        name, number = self._field_tail()
        field = msg.field.add(name=name, number=number, label=label)
        field.json_name = _json_name(name)
        self._type(field, type_name, scope, line)
        if oneof is not None:
            field.oneof_index = oneof
        if proto3_optional:
            field.proto3_optional = True
            field.oneof_index = len(msg.oneof_decl)
            msg.oneof_decl.add().name = f"_{name}"

    def _field_tail(self) -> tuple[str, int]:
        """`name = number [options];`, which ends every field and map field: its name and
        number (the options are read past: none changes what a record holds)."""
        name = self.ident("a field name")
        self.expect("=")
        number = self.number()
        if self.accept("["):
            self.skip_until("]")
        self.expect(";")
        return name, number

    def _map(self, msg: Any, scope: str, line: int) -> None:
        self.expect("<")
        key_type = self.ident("a map key type")
        if key_type not in MAP_KEYS:
            raise self.fail(f"a map key is an integer, bool or string type, not {key_type!r}")
        self.expect(",")
        value_type = self.ident("a map value type")
        self.expect(">")
        name, number = self._field_tail()
        entry = msg.nested_type.add(name="".join(p[:1].upper() + p[1:]
                                                 for p in name.split("_")) + "Entry")
        entry.options.map_entry = True
        entry_scope = f"{scope}.{entry.name}"
        self.types[entry_scope] = False
        key = entry.field.add(name="key", number=1, label=F.LABEL_OPTIONAL, json_name="key")
        self._type(key, key_type, entry_scope, line)
        value = entry.field.add(name="value", number=2, label=F.LABEL_OPTIONAL,
                                json_name="value")
        self._type(value, value_type, entry_scope, line)
        field = msg.field.add(name=name, number=number, label=F.LABEL_REPEATED,
                              type=F.TYPE_MESSAGE, type_name=entry_scope)
        field.json_name = _json_name(name)

    def _type(self, field: Any, type_name: str, scope: str, line: int) -> None:
        if type_name in SCALARS:
            field.type = SCALARS[type_name]
        else:
            self.pending.append((field, type_name, scope, line))

    def _enum(self, enum: Any, outer: str) -> None:
        enum.name = self.ident("an enum name")
        self.types[f"{outer}.{enum.name}"] = True
        self.expect("{")
        while not self.accept("}"):
            if self.accept(";"):
                continue
            if self.accept("option"):
                ahead = self.peek()
                if ahead is not None and ahead.text == "allow_alias":
                    enum.options.allow_alias = True
                self.skip_until(";")
                continue
            if self.accept("reserved"):
                self.skip_until(";")
                continue
            name = self.ident("an enum value name")
            self.expect("=")
            number = self.number()
            if self.accept("["):
                self.skip_until("]")
            self.expect(";")
            enum.value.add(name=name, number=number)
        if not enum.value or enum.value[0].number != 0:
            raise self.fail(f"enum {enum.name}: the first value must be 0 in proto3")

    def _resolve(self) -> None:
        for field, name, scope, line in self.pending:
            found = self._lookup(name, scope)
            if found is None:
                raise ProtoError(f"unknown type {name!r}", line)
            field.type_name = found
            field.type = F.TYPE_ENUM if self.types[found] else F.TYPE_MESSAGE

    def _lookup(self, name: str, scope: str) -> str | None:
        """Protobuf's scoping: a name is looked for from the innermost scope outwards."""
        if name.startswith("."):
            return name if name in self.types else None
        parts = scope.split(".") if scope else [""]
        for i in range(len(parts), 0, -1):
            candidate = ".".join(parts[:i]) + "." + name
            if candidate in self.types:
                return candidate
        candidate = "." + name
        return candidate if candidate in self.types else None


def _json_name(name: str) -> str:
    """protoc's JSON name of a field: underscores dropped, the next letter upper-cased."""
    out, upper = [], False
    for c in name:
        if c == "_":
            upper = True
        else:
            out.append(c.upper() if upper else c)
            upper = False
    return "".join(out)


def parse_proto(text: str) -> ProtoSchema:
    """Read `.proto` text; raises `ProtoError` naming the line of what it cannot read."""
    parser = _Parser(text)
    file = parser.parse()
    pool = descriptor_pool.DescriptorPool()
    for dependency in parser.imports:
        pool.Add(dependency)
    try:
        pool.Add(file)
        descriptor = pool.FindFileByName(file.name)
    except (TypeError, KeyError, ValueError) as e:
        raise ProtoError(f"not a consistent schema: {e}") from None
    return ProtoSchema(file, descriptor)


class ProtoSchema:
    """A read `.proto`: its messages by name and by message-index path."""

    def __init__(self, file: descriptor_pb2.FileDescriptorProto, descriptor: Any) -> None:
        self.file = file
        self.descriptor = descriptor
        self._paths: dict[str, tuple[int, ...]] = {}
        self._by_path: dict[tuple[int, ...], Any] = {}
        top = [descriptor.message_types_by_name[m.name] for m in file.message_type]
        for path, message in self._walk(top, ()):
            self._paths[message.full_name] = path
            self._by_path[path] = message

    def _walk(self, messages: Any, prefix: tuple[int, ...]) -> Iterator[tuple[tuple[int, ...],
                                                                                 Any]]:
        for i, message in enumerate(messages):
            path = (*prefix, i)
            yield path, message
            yield from self._walk(message.nested_types, path)

    def message_names(self) -> list[str]:
        return sorted(self._paths)

    def path_of(self, record: str | None) -> tuple[int, ...]:
        """The message-index path of `record` (a name, with or without the package; nested
        ones as `Outer.Inner`); None names the first message of the file."""
        if record is None:
            if not self._by_path:
                raise ProtoError("the schema has no message")
            return (0,)
        package = self.file.package
        for name in (record, f"{package}.{record}" if package else record):
            if name in self._paths:
                return self._paths[name]
        raise ProtoError(f"no message {record!r} in the schema (it has "
                         f"{', '.join(self.message_names()) or 'none'})")

    def message_class(self, path: tuple[int, ...]) -> type[Message]:
        descriptor = self._by_path.get(path)
        if descriptor is None:
            raise ProtoError(f"no message at index path {list(path)}")
        return message_factory.GetMessageClass(descriptor)  # type: ignore[no-any-return]


# -- message indexes ---------------------------------------------------------------------------

def _zigzag(n: int) -> int:
    return (n << 1) ^ (n >> 63)


def _varint(n: int) -> bytes:
    out = bytearray()
    while n & ~0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def encode_indexes(path: tuple[int, ...]) -> bytes:
    """The message indexes before a record (`[0]` is the single byte 0)."""
    if path == (0,):
        return b"\0"
    return _varint(_zigzag(len(path))) + b"".join(_varint(_zigzag(i)) for i in path)


def decode_indexes(payload: bytes) -> tuple[tuple[int, ...], int]:
    """The message-index path at the start of `payload` and the bytes it takes."""
    at = 0

    def read() -> int:
        nonlocal at
        value, at = _read_varint(payload, at, "the message indexes are cut short")
        return (value >> 1) ^ -(value & 1)

    count = read()
    if count == 0:
        return (0,), at
    if count < 0 or count > 64:
        raise ValueError(f"{count} message indexes")
    return tuple(read() for _ in range(count)), at


# -- codecs ------------------------------------------------------------------------------------

def json_to_binary(cls: type[Message], body: bytes) -> bytes:
    """A JSON document (proto3's JSON mapping) as the message's binary form; unknown fields
    are refused. Raises `ValueError` with the reason."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"not UTF-8 text: {e.reason} at byte {e.start}") from None
    message = cls()
    try:
        json_format.Parse(text, message, ignore_unknown_fields=False)
    except json_format.ParseError as e:
        raise ValueError(str(e).splitlines()[0] if str(e) else "not valid") from None
    return message.SerializeToString()  # type: ignore[no-any-return]


def binary_to_json(cls: type[Message], payload: bytes) -> bytes:
    """The message's binary form as JSON: proto field names and every field, defaults too
    (as Zilla's JSON view writes it). Raises `ValueError` when it does not decode."""
    message = _parse(cls, payload)[0]
    data = json_format.MessageToDict(message, preserving_proto_field_name=True,
                                     always_print_fields_with_no_presence=True)
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode()


def check_binary(cls: type[Message], payload: bytes) -> bytes:
    """The message's binary form checked as Zilla's protobuf model checks it, and the bytes to
    deliver: what was read, less the fields the message does not have.

    Zilla parses the wire form against the message and writes again what it parsed: a field of
    the message in another wire type than its type's (a string where an int32 is, as a sender
    with an other `.proto` writes it) is refused, and a field number the message does not
    have is skipped, so it is not written. The protobuf package alone would keep both as
    unknown fields. Raises `ValueError` with the reason."""
    return _parse(cls, payload)[1]


def _parse(cls: type[Message], payload: bytes) -> tuple[Message, bytes]:
    """`payload` parsed as the message (well formed, strings UTF-8), every field of the
    message in its type's wire type, and its bytes less the fields the message lacks; raises
    `ValueError` with the reason."""
    message = cls()
    try:
        message.ParseFromString(payload)
    except DecodeError as e:
        raise ValueError(f"not protobuf of this message: {e}") from None
    return message, _known(cls.DESCRIPTOR, payload, cls.DESCRIPTOR.full_name)


#: The wire type each field type is written in (proto3 has no groups).
_WIRE = {F.TYPE_DOUBLE: 1, F.TYPE_FIXED64: 1, F.TYPE_SFIXED64: 1, F.TYPE_FLOAT: 5,
         F.TYPE_FIXED32: 5, F.TYPE_SFIXED32: 5, F.TYPE_STRING: 2, F.TYPE_BYTES: 2,
         F.TYPE_MESSAGE: 2}
_VARINT, _I64, _LEN, _SGROUP, _EGROUP, _I32 = range(6)
_WIRE_NAMES = {_VARINT: "varint", _I64: "64-bit", _LEN: "length-delimited",
               _SGROUP: "start-group", _EGROUP: "end-group", _I32: "32-bit"}


def _read_varint(data: bytes, at: int,
                 short: str = "not protobuf of this message: a varint is cut short"
                 ) -> tuple[int, int]:
    """The varint at `at` and the offset after it; `ValueError(short)` when it runs past the
    end (or past 64 bits)."""
    value, shift = 0, 0
    while True:
        if at >= len(data) or shift > 63:
            raise ValueError(short)
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, at


def _skip(data: bytes, at: int, wire: int, number: int) -> int:
    """The offset after a field's value of wire type `wire` at `at`."""
    if wire == _VARINT:
        return _read_varint(data, at)[1]
    if wire == _I64:
        return at + 8
    if wire == _I32:
        return at + 4
    if wire == _LEN:
        length, at = _read_varint(data, at)
        return at + length
    if wire == _SGROUP:
        while True:
            tag, at = _read_varint(data, at)
            if tag & 7 == _EGROUP:
                if tag >> 3 != number:
                    raise ValueError(f"not protobuf of this message: group {number} ends as "
                                     f"{tag >> 3}")
                return at
            at = _skip(data, at, tag & 7, tag >> 3)
    raise ValueError(f"not protobuf of this message: wire type {wire}")


def _known(descriptor: Any, data: bytes, where: str) -> bytes:
    """`data` (a message `descriptor` describes, already parsed whole) walked field by field:
    raises `ValueError` for a field of the message in the wrong wire type, and gives the bytes
    without the fields the message lacks (the others verbatim, in their order; a nested
    message's length written again when something was dropped inside it)."""
    out = bytearray()
    at = 0
    while at < len(data):
        start = at
        tag, at = _read_varint(data, at)
        number, wire = tag >> 3, tag & 7
        field = descriptor.fields_by_number.get(number)
        end = _skip(data, at, wire, number)
        if field is None:
            at = end
            continue
        expected = _WIRE.get(field.type, _VARINT)
        packed = field.is_repeated and wire == _LEN and expected != _LEN
        if wire != expected and not packed:
            raise ValueError(f"not protobuf of this message: field {number} ({field.name}) "
                             f"of {where} comes as {_WIRE_NAMES[wire]}, where {_type_name(field)} is "
                             f"{_WIRE_NAMES[expected]}")
        if field.type == F.TYPE_MESSAGE:
            length, body = _read_varint(data, at)
            inner = _known(field.message_type, data[body:body + length],
                           f"{where}.{field.name}")
            out += data[start:at] + _varint(len(inner)) + inner
        else:
            out += data[start:end]
        at = end
    return bytes(out)


def _type_name(field: Any) -> str:
    """`an int32`, `a string`, `an enum`, `a message`: what the field is, for a reason."""
    names = {v: k for k, v in SCALARS.items()}
    name = "enum" if field.type == F.TYPE_ENUM else names.get(field.type, "message")
    return f"{'an' if name[0] in 'aei' else 'a'} {name}"
