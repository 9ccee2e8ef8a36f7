"""Cross-origin resource sharing for the http binding (docs/config-reference.md `options.access-control`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from twisted.web.server import Request


@dataclass(frozen=True)
class AccessControl:
    cross_origin: bool = False
    origins: frozenset[str] | None = None  # None: any origin
    methods: tuple[str, ...] | None = None  # None: echo the request's
    headers: tuple[str, ...] | None = None  # None: echo the request's
    credentials: bool = False
    max_age: int | None = None
    expose: tuple[str, ...] | None = None

    @classmethod
    def from_options(cls, options: Mapping[str, Any] | None) -> AccessControl:
        if not options or options.get("policy", "same-origin") == "same-origin":
            return cls()
        allow = options.get("allow") or {}
        expose = (options.get("expose") or {}).get("headers")
        return cls(
            cross_origin=True,
            origins=frozenset(o.rstrip("/").lower() for o in allow["origins"])
            if "origins" in allow else None,
            methods=tuple(allow["methods"]) if "methods" in allow else None,
            headers=tuple(allow["headers"]) if "headers" in allow else None,
            credentials=bool(allow.get("credentials", False)),
            max_age=options.get("max-age"),
            expose=tuple(expose) if expose else None,
        )

    def allows(self, origin: str, scheme: str, authority: str) -> bool:
        """May a request with this `Origin` header proceed?"""
        if not self.cross_origin:
            return same_origin(origin, scheme, authority)
        if self.origins is None:
            return True
        return origin.rstrip("/").lower() in self.origins or \
            same_origin(origin, scheme, authority)

    def is_preflight(self, request: Request) -> bool:
        return request.method == b"OPTIONS" and \
            request.requestHeaders.hasHeader(b"origin") and \
            request.requestHeaders.hasHeader(b"access-control-request-method")

    def _allow_origin(self, request: Request, origin: bytes) -> None:
        if self.origins is not None or self.credentials:
            request.setHeader(b"access-control-allow-origin", origin)
            request.responseHeaders.addRawHeader(b"vary", b"Origin")
        else:
            request.setHeader(b"access-control-allow-origin", b"*")
        if self.credentials:
            request.setHeader(b"access-control-allow-credentials", b"true")

    def answer_preflight(self, request: Request, origin: bytes) -> bytes:
        """204 with the allow headers; the caller has checked the origin."""
        request.setResponseCode(204)
        self._allow_origin(request, origin)
        method = request.getHeader(b"access-control-request-method") or b""
        methods = ", ".join(self.methods).encode() if self.methods else method
        request.setHeader(b"access-control-allow-methods", methods)
        asked = request.getHeader(b"access-control-request-headers")
        if self.headers:
            request.setHeader(b"access-control-allow-headers", ", ".join(self.headers).encode())
        elif asked:
            request.setHeader(b"access-control-allow-headers", asked)
        if self.max_age is not None:
            request.setHeader(b"access-control-max-age", str(self.max_age).encode())
        return b""

    def decorate(self, request: Request, origin: bytes) -> None:
        """Headers for an actual (non-preflight) cross-origin response."""
        if not self.cross_origin:
            return
        self._allow_origin(request, origin)
        if self.expose:
            request.setHeader(b"access-control-expose-headers", ", ".join(self.expose).encode())


def same_origin(origin: str, scheme: str, authority: str) -> bool:
    """Is `origin` (e.g. `http://localhost:7114`) the origin of this request?"""
    try:
        parts = urlsplit(origin.strip())
        port = parts.port
    except ValueError:
        return False
    if parts.scheme.lower() != scheme or not parts.hostname:
        return False
    port = port or (443 if scheme == "https" else 80)
    host = parts.hostname.lower()
    if ":" in host:
        host = f"[{host}]"
    return f"{host}:{port}" == authority
