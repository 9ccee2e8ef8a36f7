"""Route patterns (`when` values) and `${params.name}` references: one set of rules for every
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

`${params.name}` in a route's `with` refers to a capture of that route's `when`. A reference that
some pattern of the route does not capture is a config error (`missing_captures`, checked when the
binding is built), so at run time every reference resolves.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

_TOKEN = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}|\*")
_REFERENCE = re.compile(r"\$\{params\.([A-Za-z_][A-Za-z0-9_]*)\}")


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
    """A `${params.name}` reference to a value the request does not have."""


def references(template: str) -> set[str]:
    """The names a `with` value refers to as `${params.name}`."""
    return set(_REFERENCE.findall(template))


def substitute(template: str, params: Mapping[str, str]) -> str:
    """`template` with each `${params.name}` replaced by its captured value."""
    def value(m: re.Match[str]) -> str:
        try:
            return params[m.group(1)]
        except KeyError:
            raise Unresolvable(f"no path parameter {m.group(1)}") from None

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
