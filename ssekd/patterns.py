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
`when`, `${guarded['guard'].identity}` to the identity a guard authenticated. One rule for a
value a reference cannot find:

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
    r"|(?P<name>[A-Za-z_][A-Za-z0-9_]*))\}")


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


def substitute(template: str, params: Mapping[str, str],
               identities: Mapping[str, str] | None = None,
               values: Mapping[str, str] | None = None) -> str:
    """`template` with each reference replaced: `${params.name}` by its captured value,
    `${guarded['guard'].identity}` by the identity that guard authenticated, and `${name}` by
    `values[name]` for the names a binding defines (http-kafka's `${idempotencyKey}`); any other
    `${name}` stays as it is. One pass: a value put in is never read for references."""
    def value(m: re.Match[str]) -> str:
        if m["name"] is not None:
            found = (values or {}).get(m["name"])
            return m[0] if found is None else found
        if m["param"] is not None:
            found = params.get(m["param"])
            if found is None:
                raise Unresolvable(f"no path parameter {m['param']}")
            return found
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


def reference_problems(templates: Iterable[str], patterns: Iterable[Pattern],
                       guards: Collection[str]) -> list[str]:
    """Why a route's `with` values (`templates`) could never resolve, whatever the request, as
    config error messages; empty when they always can. `patterns` are the route's `when.path`
    patterns and `guards` the guards the config defines."""
    templates = list(templates)
    problems: list[str] = []
    missing = missing_captures(templates, patterns)
    if missing:
        problems.append(f"expected references to what every `when.path` captures; "
                        f"{', '.join(missing)} is not captured by all of them")
    unknown = unknown_guards(templates, guards)
    if unknown:
        problems.append(f"expected `guarded[...]` to name a guard defined under guards; "
                        f"{', '.join(unknown)} is not")
    return problems
