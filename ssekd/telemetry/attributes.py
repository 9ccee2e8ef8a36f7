"""A binding's `telemetry.attributes`: labels of its own http metrics, taken from each request.

As in Zilla, an attribute's value is an expression: `${http.request.method}`,
`${http.request.path}`, `${http.response.status}`, or `${http.request.<header>}` /
`${http.response.<header>}` for a header's value (`:scheme` and `:authority` too). An http
server puts them on its `http.*` series: the request's on all four (`http.active.requests`,
`http.request.size`, ...), the response's on those measured once it is answered
(`http.response.size`, `http.duration`). A value that is not an expression is a constant label.

What a client sends becomes a label, so ssekd bounds it where Zilla does not:

- the path is the path without its query string (a query may carry a token, and every distinct
  one would be a series of its own), with what the http binding hides in logged paths hidden;
- a value longer than `MAX_VALUE` characters is cut there;
- a binding keeps at most `MAX_SETS` distinct sets of values: a request with a new set after
  that is counted under `OTHER` for every attribute taken from requests, so a client sending
  path after path cannot grow the metrics (and each scrape) without end;
- an attribute may not read a credential (`Authorization`, `Cookie`, `Proxy-Authorization`, or
  a header the http binding reads tokens from): the http binding refuses such a config.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from ssekd.telemetry.metrics import label_name

#: `${http.request.<field>}` or `${http.response.<field>}`.
EXPRESSION = re.compile(r"\$\{http\.(request|response)\.([^}]+)\}")
#: Zilla's short names for pseudo-headers.
FIELDS = {"method": ":method", "path": ":path", "status": ":status"}
#: What a request's side can name besides headers, and a response's.
REQUEST_PSEUDO = frozenset({":method", ":path", ":scheme", ":authority"})
RESPONSE_PSEUDO = frozenset({":status"})
#: Headers never read into a label: credentials.
CREDENTIALS = frozenset({"authorization", "proxy-authorization", "cookie", "set-cookie"})
#: Distinct sets of request values a binding keeps as series of their own.
MAX_SETS = 1000
#: The longest value kept (characters).
MAX_VALUE = 200
#: What stands for a value once a binding has `MAX_SETS` sets.
OTHER = "(other)"

Side = Literal["request", "response", "constant"]


@dataclass(frozen=True)
class Attribute:
    """One attribute: its label, which side of the exchange it reads, and what."""

    label: str
    side: Side
    #: A pseudo-header (`:method`) or a header name (lower case); the value of a constant.
    field: str


def parse(name: str, value: str) -> Attribute | str:
    """The attribute `name: value`, or what is wrong with it."""
    label = label_name(name)
    m = EXPRESSION.fullmatch(value)
    if m is None:
        if "${" in value:
            return (f"expected ${{http.request.<field>}} or ${{http.response.<field>}} "
                    f"(method, path, status, or a header name), or a constant; got {value!r}")
        return Attribute(label, "constant", value)
    side: Side = "request" if m[1] == "request" else "response"
    field = FIELDS.get(m[2], m[2]).lower()
    pseudo = REQUEST_PSEUDO if side == "request" else RESPONSE_PSEUDO
    if field.startswith(":") and field not in pseudo:
        return f"a {side} has no {m[2]}; expected one of {', '.join(sorted(pseudo))} or a header"
    if field in CREDENTIALS:
        return f"{m[2]} carries credentials: never a label"
    return Attribute(label, side, field)


class BindingAttributes:
    """The attributes of one http server binding, and the value sets seen so far."""

    def __init__(self, attributes: Collection[Attribute],
                 redact: Callable[[str], str] = lambda path: path,
                 max_sets: int = MAX_SETS) -> None:
        self.constant = {a.label: a.field for a in attributes if a.side == "constant"}
        self.request = [a for a in attributes if a.side == "request"]
        self.response = [a for a in attributes if a.side == "response"]
        #: How a path is shown in logs (the http binding's `logged`): labels show no more.
        self.redact = redact
        self.max_sets = max_sets
        self._seen: set[tuple[str, ...]] = set()

    def __bool__(self) -> bool:
        return bool(self.constant or self.request or self.response)

    def of_request(self, request: Any) -> dict[str, str]:
        """The labels of a request as it arrives: constants and the request's attributes."""
        values = tuple(_cut(self._request_value(request, a.field)) for a in self.request)
        if values not in self._seen:
            if len(self._seen) >= self.max_sets:
                values = (OTHER,) * len(values)
            else:
                self._seen.add(values)
        return {**self.constant, **{a.label: v for a, v in zip(self.request, values, strict=True)}}

    def of_response(self, request: Any) -> dict[str, str]:
        """The response's attributes, once it is answered (a status is a short list; a
        response header's values are the server's own)."""
        return {a.label: _cut(self._response_value(request, a.field)) for a in self.response}

    def _request_value(self, request: Any, field: str) -> str:
        if field == ":method":
            return bytes(request.method).decode("latin-1")
        if field == ":path":
            return self.redact(bytes(request.path).decode("latin-1"))
        if field == ":scheme":
            return "https" if request.isSecure() else "http"
        if field == ":authority":
            field = "host"
        raw = request.getHeader(field.encode("latin-1"))
        return bytes(raw).decode("latin-1") if raw is not None else ""

    @staticmethod
    def _response_value(request: Any, field: str) -> str:
        if field == ":status":
            return str(request.code)
        values = request.responseHeaders.getRawHeaders(field.encode("latin-1"))
        return bytes(values[0]).decode("latin-1") if values else ""


def compile_attributes(attributes: Mapping[str, str],
                       never: Collection[str] = ()) -> tuple[list[Attribute], dict[str, str]]:
    """The attributes of a binding, and the problems by attribute name; `never` are more
    header names (lower case) an attribute may not read (where a binding reads tokens)."""
    found: list[Attribute] = []
    problems: dict[str, str] = {}
    for name, value in attributes.items():
        parsed = parse(name, str(value))
        if isinstance(parsed, str):
            problems[name] = parsed
        elif parsed.side != "constant" and parsed.field in never:
            problems[name] = (f"{parsed.field} is where the http binding reads tokens: never "
                              f"a label")
        else:
            found.append(parsed)
    return found, problems


def _cut(value: str) -> str:
    return value if len(value) <= MAX_VALUE else value[:MAX_VALUE]
