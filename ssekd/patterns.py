"""Route patterns (`when` values) and the references in `with` values: one set of rules for every
binding, so a pattern means the same in an http route, an sse-kafka route and a tls route.

A pattern matches a whole value:

- `*` matches any run of characters, `/` included;
- `{name}` captures one or more characters other than `/` (one path segment);
- everything else matches itself (case-insensitively where the caller asks, e.g. host names).

A binding whose captures name files (http-filesystem) compiles with `rest=True`: a `{name}` that
ends the pattern then takes the rest of the value, `/` included and possibly empty, so `/{path}`
serves `/css/app.css` and `/` (the index).

Captured values are returned as they appear in the value: the binding that uses them knows
whether they are percent-encoded.

A route's `with` refers to values of the request: `${params.name}` to a capture of that route's
`when`, `${guarded['guard'].identity}` to the identity a guard authenticated, and - where the
binding takes them (sse-kafka, an ssekd addition, Zilla #1508) - `${headers.name}` to a request
header and `${query.name}` to a query parameter. A header or query value is the client's own
text, so it is held to more than a capture (`RequestValues`): one with a control character (a
line break above all) or that is not UTF-8 is not a value, nor is a query parameter the http
binding reads credentials from; a header that carries credentials cannot be named at all. One
rule for a value a reference cannot find:

- when the config alone shows it can never be there (a capture that some pattern of the route
  does not make, a guard the config does not define), it is a config error with its line, found
  when the binding is built (`reference_problems`);
- what only a request can lack (an identity, when it carried no credentials for that guard) makes
  `substitute` raise `Unresolvable`, which the binding answers as it answers a path that no route
  matches: 404.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

_TOKEN = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}|\*")
_REFERENCE = re.compile(
    r"\$\{(?:params\.(?P<param>[A-Za-z_][A-Za-z0-9_]*)"
    r"|guarded\[(?P<quote>['\"])(?P<guard>[A-Za-z][A-Za-z0-9._-]*)(?P=quote)\]\.identity"
    r"|headers\.(?P<header>[A-Za-z0-9_-]+)|query\.(?P<query>[A-Za-z0-9_.~-]+)"
    r"|(?P<name>[A-Za-z_][A-Za-z0-9_]*))\}")
#: Headers that carry credentials: a route cannot copy them into a topic or a filter.
CREDENTIAL_HEADERS = frozenset({"authorization", "cookie", "proxy-authorization"})
#: What a value from a request header or the query may not hold (a line break above all).
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


@dataclass(frozen=True)
class Pattern:
    """A compiled `when` value."""

    text: str
    regex: re.Pattern[str]
    #: The names of its `{name}` captures.
    captures: frozenset[str]

    @classmethod
    def compile(cls, text: str, ignore_case: bool = False, rest: bool = False) -> Pattern:
        parts: list[str] = []
        names: set[str] = set()
        pos = 0
        for m in _TOKEN.finditer(text):
            parts.append(re.escape(text[pos:m.start()]))
            name = m.group(1)
            if name is None:
                parts.append(".*")
            elif name in names:  # the same name twice must capture the same text
                parts.append(f"(?P={name})")
            else:
                names.add(name)
                takes_rest = rest and m.end() == len(text)
                parts.append(f"(?P<{name}>{'.*' if takes_rest else '[^/]+'})")
            pos = m.end()
        parts.append(re.escape(text[pos:]))
        flags = re.DOTALL | (re.IGNORECASE if ignore_case else 0)
        return cls(text, re.compile("".join(parts), flags), frozenset(names))

    @property
    def open_ended(self) -> bool:
        """Whether it ends in `*`: then it also matches whatever follows, a query string too."""
        return self.text.endswith("*")

    def match(self, value: str) -> dict[str, str] | None:
        """The captures when `value` matches as a whole, else None."""
        m = self.regex.fullmatch(value)
        return None if m is None else m.groupdict()


class Unresolvable(KeyError):
    """A reference to a value the request does not have."""

    def __str__(self) -> str:
        return str(self.args[0])  # the message, not KeyError's quoted repr of it


def references(template: str) -> set[str]:
    """The capture names a `with` value refers to as `${params.name}`."""
    return {m["param"] for m in _REFERENCE.finditer(template) if m["param"] is not None}


def guard_references(template: str) -> set[str]:
    """The guard names a `with` value refers to as `${guarded['guard'].identity}`."""
    return {m["guard"] for m in _REFERENCE.finditer(template) if m["guard"] is not None}


@dataclass(frozen=True)
class RequestValues:
    """The request's headers (lower-case names, first value) and query parameters (first
    value, percent-decoded), for `${headers.name}` and `${query.name}`; `secret_query` names
    the parameters that carry credentials (the http binding's `authorization`)."""

    headers: Mapping[str, str]
    query: Mapping[str, str]
    secret_query: frozenset[str] = frozenset()

    def header(self, name: str) -> str:
        found = self.headers.get(name.lower())
        if found is None:
            raise Unresolvable(f"no header {name}")
        if "\ufffd" in found or _CONTROL.search(found):
            raise Unresolvable(f"header {name} is not UTF-8 text without control characters")
        return found

    def parameter(self, name: str) -> str:
        if name in self.secret_query:
            raise Unresolvable(f"query parameter {name} carries credentials")
        found = self.query.get(name)
        if found is None:
            raise Unresolvable(f"no query parameter {name}")
        if "\ufffd" in found or _CONTROL.search(found):
            raise Unresolvable(f"query parameter {name} is not UTF-8 text without control "
                               f"characters")
        return found


def substitute(template: str, params: Mapping[str, str],
               identities: Mapping[str, str] | None = None,
               values: Mapping[str, str] | None = None,
               request: RequestValues | None = None) -> str:
    """`template` with each reference replaced: `${params.name}` by its captured value,
    `${guarded['guard'].identity}` by the identity that guard authenticated, `${headers.name}`
    and `${query.name}` by the request's (`RequestValues`: none without `request`), and `${name}`
    by `values[name]` for the names a binding defines (http-kafka's `${idempotencyKey}`); any
    other `${name}` stays as it is. One pass: a value put in is never read for references."""
    def value(m: re.Match[str]) -> str:
        if m["name"] is not None:
            found = (values or {}).get(m["name"])
            return m[0] if found is None else found
        if m["param"] is not None:
            found = params.get(m["param"])
            if found is None:
                raise Unresolvable(f"no path parameter {m['param']}")
            return found
        if m["header"] is not None or m["query"] is not None:
            if request is None:
                raise Unresolvable("no request values here")
            return request.header(m["header"]) if m["header"] is not None \
                else request.parameter(m["query"])
        identity = (identities or {}).get(m["guard"])
        if identity is None:
            raise Unresolvable(f"no identity for guard {m['guard']}")
        return identity

    return _REFERENCE.sub(value, template)


def missing_captures(templates: Iterable[str], patterns: Iterable[Pattern]) -> list[str]:
    """Names referenced by `templates` that some of `patterns` does not capture, in order."""
    wanted: list[str] = []
    for t in templates:
        wanted += sorted(references(t) - set(wanted))
    missing: list[str] = []
    for p in patterns:
        missing += [n for n in wanted if n not in p.captures and n not in missing]
    return missing


def unknown_guards(templates: Iterable[str], guards: Collection[str]) -> list[str]:
    """Guards referenced by `templates` that are not among `guards`, in order."""
    unknown: list[str] = []
    for t in templates:
        unknown += sorted(guard_references(t) - set(guards) - set(unknown))
    return unknown


def request_references(template: str) -> tuple[set[str], set[str]]:
    """The header names and query parameters a `with` value refers to."""
    found = list(_REFERENCE.finditer(template))
    return ({m["header"].lower() for m in found if m["header"] is not None},
            {m["query"] for m in found if m["query"] is not None})


def reference_problems(templates: Iterable[str], patterns: Iterable[Pattern],
                       guards: Collection[str], request_values: bool = False) -> list[str]:
    """Why a route's `with` values (`templates`) could never resolve, whatever the request, as
    config error messages; empty when they always can. `patterns` are the route's `when.path`
    patterns and `guards` the guards the config defines; `request_values` says whether the
    binding takes `${headers.name}` and `${query.name}`."""
    templates = list(templates)
    problems: list[str] = []
    headers: set[str] = set()
    query: set[str] = set()
    for t in templates:
        h, q = request_references(t)
        headers |= h
        query |= q
    if (headers or query) and not request_values:
        problems.append("expected only `${params.name}` and `${guarded[...].identity}` here; "
                        "`${headers...}` and `${query...}` are for sse-kafka routes")
    elif headers & CREDENTIAL_HEADERS:
        problems.append(f"expected a header that carries no credentials; "
                        f"{', '.join(sorted(headers & CREDENTIAL_HEADERS))} does")
    missing = missing_captures(templates, patterns)
    if missing:
        problems.append(f"expected references to what every `when.path` captures; "
                        f"{', '.join(missing)} is not captured by all of them")
    unknown = unknown_guards(templates, guards)
    if unknown:
        problems.append(f"expected `guarded[...]` to name a guard defined under guards; "
                        f"{', '.join(unknown)} is not")
    return problems
