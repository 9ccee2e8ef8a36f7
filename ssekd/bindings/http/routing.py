"""Matching requests to http routes by pseudo-headers and headers (SPEC §4).

A pattern matches the whole value; `*` is a wildcard and `{name}` captures. A `:path` pattern that
does not end in `*` also matches with any query string. Patterns are compiled once, at build.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from twisted.web.server import Request

_TOKEN = re.compile(r"\{([a-zA-Z_][a-zA-Z0-9_]*)\}|\*")


@dataclass(frozen=True)
class HeaderPattern:
    name: str
    regex: re.Pattern[str]

    @classmethod
    def compile(cls, name: str, pattern: str) -> HeaderPattern:
        name = name.lower()
        # In a path, a capture stops at / and ?; in other headers it takes what it can.
        capture = r"[^/?]*" if name == ":path" else r".*?"
        parts, pos = [], 0
        for m in _TOKEN.finditer(pattern):
            parts.append(re.escape(pattern[pos:m.start()]))
            parts.append(f"(?P<{m.group(1)}>{capture})" if m.group(1) else ".*")
            pos = m.end()
        parts.append(re.escape(pattern[pos:]))
        body = "".join(parts)
        if name == ":path" and not pattern.endswith("*"):
            body += r"(?:\?.*)?"
        return cls(name, re.compile(body, re.DOTALL))


@dataclass(frozen=True)
class Condition:
    """One `when` item: every header pattern must match."""

    patterns: tuple[HeaderPattern, ...]

    def match(self, headers: Mapping[str, str]) -> dict[str, str] | None:
        params: dict[str, str] = {}
        for p in self.patterns:
            value = headers.get(p.name)
            if value is None:
                return None
            m = p.regex.fullmatch(value)
            if m is None:
                return None
            params.update({k: v for k, v in m.groupdict().items() if v is not None})
        return params


def match_any(conditions: Sequence[Condition],
              headers: Mapping[str, str]) -> dict[str, str] | None:
    """Params of the first condition that matches; a route without conditions matches all."""
    if not conditions:
        return {}
    for c in conditions:
        params = c.match(headers)
        if params is not None:
            return params
    return None


def _text(value: bytes) -> str:
    # Latin-1 maps every byte to one character: a non-UTF-8 path cannot make matching fail
    # with an exception, it simply matches only patterns that allow those characters.
    return value.decode("latin-1")


def request_headers(request: Request) -> dict[str, str]:
    """The request's headers (lower-case names, first value) plus the pseudo-headers."""
    headers: dict[str, str] = {}
    for name, values in request.requestHeaders.getAllRawHeaders():
        if values:
            headers.setdefault(_text(name).lower(), _text(values[0]))
    scheme = "https" if request.isSecure() else "http"
    headers[":scheme"] = scheme
    headers[":method"] = _text(request.method)
    headers[":path"] = _text(request.uri)
    headers[":authority"] = authority(headers.get("host"), scheme, request)
    return headers


def authority(host: str | None, scheme: str, request: Request) -> str:
    """`host:port`, always with a port: `Host: localhost` on plain http is `localhost:80`."""
    if not host:
        local = request.getHost()
        return f"{getattr(local, 'host', '')}:{getattr(local, 'port', '')}"
    host = host.strip().lower()
    if host.startswith("["):  # IPv6 literal
        end = host.find("]")
        if end != -1 and host[end + 1:end + 2] == ":":
            return host
        return f"{host}:{443 if scheme == 'https' else 80}"
    if ":" in host:
        return host
    return f"{host}:{443 if scheme == 'https' else 80}"
