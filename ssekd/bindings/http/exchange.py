"""One request carried upstream by the http client, as both sides of it see it.

The connection that carries a request (an HTTP/1.1 connection of Twisted's `Agent`, or a stream
of an HTTP/2 connection, `upstream_h2`) reports the response to a `ResponseSink`, and the
proxying side (`proxying.Relay`) steers the response through an `UpstreamCall`: it pauses
reading while the downstream cannot take more (so at most a flow-control window or a socket
buffer of the upstream's body waits in the daemon) and cancels it when the downstream is gone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

#: Lower-case header names that belong to one hop, never passed on (RFC 9110 7.6.1, with the
#: ones HTTP/2 forbids: RFC 9113 8.2.2). The names a `Connection` header lists are too.
HOP_BY_HOP = frozenset({
    "connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer",
    "upgrade", "http2-settings", "proxy-authenticate", "proxy-authorization",
})


@dataclass(frozen=True)
class UpstreamRequest:
    """What goes upstream: `headers` are lower-case (name, value) pairs, hop-by-hop ones,
    `Host` and `Content-Length` already left out; `authority` is the `Host` (HTTP/1.1) or
    `:authority` (HTTP/2)."""

    method: bytes
    path: bytes
    authority: bytes
    headers: tuple[tuple[bytes, bytes], ...]
    body: bytes


class ResponseSink(Protocol):
    """Where a connection reports the response to one request, in this order: `head` once,
    `data` any number of times, then `end`; or `failed` at any point (and nothing after)."""

    def head(self, status: int, headers: list[tuple[bytes, bytes]]) -> None: ...

    def data(self, chunk: bytes) -> None: ...

    def end(self) -> None: ...

    def failed(self, why: str) -> None:
        """The request or its response was cut off: `why` is a short reason for the event
        (`refused`, `reset`, ...)."""


class UpstreamCall(Protocol):
    """The upstream side of one request, as the relay steers it."""

    def pause(self) -> None:
        """Stop reading the response body until `resume` (the downstream is full)."""

    def resume(self) -> None: ...

    def cancel(self) -> None:
        """Give up the request (the downstream is gone): the upstream sees it cancelled (an
        HTTP/2 `RST_STREAM`, a closed HTTP/1.1 connection). No sink call follows."""


def connection_listed(headers: list[tuple[bytes, bytes]]) -> frozenset[str]:
    """The header names a `Connection` header among `headers` lists (hop-by-hop too)."""
    listed: set[str] = set()
    for name, value in headers:
        if name.lower() == b"connection":
            listed.update(v.strip().lower() for v in value.decode("latin-1").split(",") if v.strip())
    return frozenset(listed)


def end_to_end(headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """`headers` without the hop-by-hop ones (and those the `Connection` header names)."""
    dropped = HOP_BY_HOP | connection_listed(headers)
    return [(n, v) for n, v in headers if n.lower().decode("latin-1") not in dropped]
