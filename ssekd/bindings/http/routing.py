"""Matching requests to http routes by pseudo-headers and headers (docs/config-reference.md).

A pattern matches the whole value, with the rules of `ssekd.patterns` (`*` a wildcard, `{name}`
a capture). A `:path` pattern that does not end in `*` also matches with any query string.
Patterns are compiled once, at build.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from twisted.web.server import Request

from ssekd.patterns import Pattern


@dataclass(frozen=True)
class HeaderPattern:
    name: str
    pattern: Pattern

    @classmethod
    def compile(cls, name: str, pattern: str) -> HeaderPattern:
        return cls(name.lower(), Pattern.compile(pattern))

    def match(self, value: str) -> dict[str, str] | None:
        if self.name == ":path" and not self.pattern.open_ended:
            value = value.partition("?")[0]
        return self.pattern.match(value)


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
            captured = p.match(value)
            if captured is None:
                return None
            params.update(captured)
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
    return head_headers(request, request.method, request.uri)


def head_headers(request: Request, method: bytes, uri: bytes) -> dict[str, str]:
    """`request_headers` for a request whose head is in but which Twisted has not yet handed on
    (its method and uri are set only then): the channel knows them."""
    headers: dict[str, str] = {}
    for name, values in request.requestHeaders.getAllRawHeaders():
        if values:
            headers.setdefault(_text(name).lower(), _text(values[0]))
    scheme = "https" if request.isSecure() else "http"
    headers[":scheme"] = scheme
    headers[":method"] = _text(method)
    headers[":path"] = _text(uri)
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
