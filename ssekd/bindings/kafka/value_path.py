"""Where a filter looks inside a record's value: a JSON pointer (RFC 6901), and the value found.

A route's value filter (an ssekd addition, Zilla #1507/#1062) names a field of the record's JSON
value by pointer (`/status`, `/owner/id`, `/tags/0`) and the values it may hold. What the cache
compares is a value's *canonical* form: its JSON text with no spaces and numbers without a
needless fraction (`1.0` is `1`), so a filter value and a record's field meet as bytes in a dict,
and a tail router or log index can list records under (pointer, value) as it lists them under a
key. Only scalars match (a string, a number, `true`/`false`, `null`): a field that is an object
or an array, or that is missing, matches no value.

A record's value is parsed once for every pointer and group that looks at it (`parse_value`),
and a value that is not JSON (not UTF-8, not JSON, NaN or Infinity) is `NOT_JSON`: it matches
nothing, and the tail counts it (`sse.kafka.value.not.json`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

#: A parsed value that is not JSON (see `parse_value`).
NOT_JSON: Any = type("NotJson", (), {"__repr__": lambda self: "NOT_JSON"})()
#: A filter that has not parsed the record yet.
UNPARSED: Any = type("Unparsed", (), {"__repr__": lambda self: "UNPARSED"})()

#: A pointer as the config writes it: `/` then tokens, `~0` for `~` and `~1` for `/`.
POINTER = re.compile(r"(/([^~/]|~[01])*)+")
#: Integers a JSON number may stand for exactly (a float past it has no unique integer form).
_EXACT = 2 ** 53


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


_decode = json.JSONDecoder(parse_constant=_no_constants).decode
#: A string as JSON text, quotes included (json's C encoder, as `json.dumps` without
#: `ensure_ascii`).
_quoted: Callable[[str], str] = getattr(json.encoder, "c_encode_basestring", None) \
    or json.encoder.encode_basestring
_MISSING: Any = object()


def parse_value(value: bytes | None) -> Any:
    """The record value as JSON data, or `NOT_JSON` (a tombstone's None value included)."""
    if value is None:
        return NOT_JSON
    try:
        return _decode(value.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return NOT_JSON


def canonical(value: Any) -> bytes | None:
    """A scalar's canonical JSON bytes; None for what no filter value can equal (an object,
    an array, or `NOT_JSON`)."""
    kind = type(value)
    if kind is str:
        return _quoted(value).encode("utf-8")
    if isinstance(value, bool) or value is None:
        return b"true" if value is True else b"false" if value is False else b"null"
    if isinstance(value, str):
        return _quoted(value).encode("utf-8")
    if isinstance(value, int):
        return str(value).encode("ascii")
    if isinstance(value, float):
        if value.is_integer() and abs(value) < _EXACT:
            return str(int(value)).encode("ascii")
        return repr(value).encode("ascii")
    return None


class ValuePath:
    """A JSON pointer into record values: hashable and equal by its text, so every filter that
    names the same pointer shares one lookup per record."""

    __slots__ = ("_hash", "text", "tokens")

    def __init__(self, text: str) -> None:
        if not POINTER.fullmatch(text):
            raise ValueError(f"not a JSON pointer: {text!r}")
        self.text = text
        self.tokens = tuple(t.replace("~1", "/").replace("~0", "~") for t in text.split("/")[1:])
        self._hash = hash(("ValuePath", text))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ValuePath) and other.text == self.text

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        return f"ValuePath({self.text!r})"

    def find(self, doc: Any) -> bytes | None:
        """The canonical bytes of the scalar at this pointer in `doc` (parsed), or None."""
        for token in self.tokens:
            kind = type(doc)
            if kind is dict:
                doc = doc.get(token, _MISSING)
                if doc is _MISSING:
                    return None
            elif kind is list:
                if not (token.isascii() and token.isdigit()) or (token != "0" and token[0] == "0"):
                    return None
                i = int(token)
                if i >= len(doc):
                    return None
                doc = doc[i]
            else:
                return None
        if type(doc) is str:  # the common case, without canonical's call
            return _quoted(doc).encode("utf-8")
        if doc is NOT_JSON:
            return None
        return canonical(doc)


class ParsedValue:
    """One record's value, parsed once, with what each pointer found in it: the tail hands it
    to every group the record visits, so a pointer many filters name is looked up once."""

    __slots__ = ("_found", "doc")

    def __init__(self, value: bytes | None) -> None:
        self.doc = parse_value(value)
        self._found: dict[str, bytes | None] = {}

    def at(self, path: ValuePath) -> bytes | None:
        found = self._found
        text = path.text
        if text in found:
            return found[text]
        at = found[text] = path.find(self.doc)
        return at
