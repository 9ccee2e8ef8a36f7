"""http client (docs/config-reference.md): HTTP/1.1 requests to the upstream its exit (a tcp
client, or a tls client for `https`) connects to, with Twisted's `Agent`.

Every request gets a connection of its own (no pool): the requests made here are long-lived
event streams, and an idle pooled connection would only hold a socket. `overrides` are headers
set on every request; `:authority` among them replaces the `Host` (by default the tcp client's
`host:port`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from twisted.internet.defer import Deferred
from twisted.web.client import Agent, HTTPConnectionPool
from twisted.web.http_headers import Headers

from ssekd.bindings.http.validation import Requests
from ssekd.spi.connection import Connector


def authority(host: str, port: int, secure: bool) -> str:
    """`host:port` as a `Host` header writes it: IPv6 in brackets, the scheme's port left out."""
    shown = f"[{host}]" if ":" in host else host
    return shown if port == (443 if secure else 80) else f"{shown}:{port}"


class _Quiet:
    """An endpoint that connects its factories with `noisy` off: Agent's factory would log two
    lines per upstream connection (starting, stopping), the relay's events say what matters."""

    def __init__(self, endpoint: Any) -> None:
        self.endpoint = endpoint

    def connect(self, factory: Any) -> Deferred[Any]:
        factory.noisy = False
        d: Deferred[Any] = self.endpoint.connect(factory)
        return d


class _OneEndpoint:
    """Agent's endpoint factory: every URI goes where the exit connects (the URI only carries
    the path and the `Host`)."""

    def __init__(self, connector: Connector) -> None:
        self.connector = connector

    def endpointForURI(self, uri: Any) -> Any:
        return _Quiet(self.connector.endpoint())


class HttpClient:
    """Runtime of an http client: `get` sends one GET upstream."""

    def __init__(self, name: str, reactor: Any, connector: Connector,
                 overrides: Mapping[str, str], requests: Requests | None = None) -> None:
        assert connector.address is not None  # checked when built
        self.name = name
        #: `options.requests`: what upstream responses must be (validation.py).
        self.requests = requests
        host, port = connector.address
        scheme = "https" if connector.secure else "http"
        self.host = overrides.get(":authority") or authority(host, port, connector.secure)
        self.origin = f"{scheme}://{authority(host, port, connector.secure)}"
        self.headers = {k: v for k, v in overrides.items() if not k.startswith(":")}
        pool = HTTPConnectionPool(reactor, persistent=False)
        self._agent = Agent.usingEndpointFactory(reactor, _OneEndpoint(connector), pool=pool)

    def get(self, target: str, headers: Mapping[str, str]) -> Deferred[Any]:
        raw = Headers()
        for name, value in {**headers, **self.headers}.items():
            raw.setRawHeaders(name.encode("latin-1"), [value.encode("latin-1")])
        raw.setRawHeaders(b"Host", [self.host.encode("latin-1")])
        d: Deferred[Any] = self._agent.request(b"GET", (self.origin + target).encode("ascii"),
                                               raw)
        return d
