"""echo server (docs/config-reference.md): Zilla's smallest binding, what it is given comes back.

Behind a tcp or tls server it takes the connection and writes every byte it reads back, in
order, as it reads it; the client closing (or the connection failing) ends it. It reads no
faster than its client takes the bytes back (`EchoConnection`). Behind an http
server it answers each request `200` with the request's body and the request's headers, as
Zilla's does (its echo returns the request's stream: headers, then data). ssekd leaves out the
headers that would do harm as response headers, which Zilla does not:

- credentials (`Authorization`, `Proxy-Authorization`, `Cookie`, and whatever header the http
  binding's `authorization` reads a token from): a script of the page could read them back
  from the response, an `HttpOnly` cookie included (cross-site tracing);
- headers that steer the client: `Set-Cookie`, `Location`, `Refresh`, `Strict-Transport-Security`,
  `Alt-Svc`, `Access-Control-*`: a request must not be able to set a cookie or a CORS grant
  on its own answer;
- headers about this connection or message rather than the content: `Host`, `Connection`,
  `Keep-Alive`, `Transfer-Encoding`, `TE`, `Trailer`, `Upgrade`, `Expect`, `HTTP2-Settings`,
  `Content-Length` (the answer's own length is sent), and the `Server` and `Date` the http
  binding sets.

The role it plays, `EchoService`, extends both the role a tcp or tls server's exit plays and
the one an http server's exit plays, so one kind stands in either place (`ssekd.spi.binding.plays`).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any, Protocol, cast, runtime_checkable

from twisted.internet.interfaces import IProtocol, IPushProducer
from twisted.internet.protocol import Protocol as TwistedProtocol
from twisted.web.server import Request
from zope.interface import implementer

from ssekd.bindings.http.roles import HttpBinding, HttpContext
from ssekd.config.model import Binding
from ssekd.spi.binding import BindingType, BuildContext, KindSpec
from ssekd.spi.connection import ConnectionInfo, StreamBinding

#: Request headers never echoed (lower case): see the module docstring.
NOT_ECHOED = frozenset({
    "authorization", "proxy-authorization", "cookie",
    "set-cookie", "set-cookie2", "location", "refresh", "strict-transport-security", "alt-svc",
    "host", "connection", "keep-alive", "proxy-connection", "transfer-encoding", "te",
    "trailer", "upgrade", "expect", "http2-settings", "content-length", "server", "date",
})
#: Request headers starting so are never echoed either (a CORS grant).
NOT_ECHOED_PREFIXES = ("access-control-",)


@runtime_checkable
class EchoService(StreamBinding, HttpBinding, Protocol):
    """Takes a connection (after a tcp or tls server) or a request (after an http server)."""


@implementer(IPushProducer)
class EchoConnection(TwistedProtocol):
    """One connection: each read written straight back.

    A client that writes and does not read must not make the daemon hold what it cannot send:
    the connection is its own transport's producer, so when the bytes waiting to be sent pass
    Twisted's buffer size the transport pauses it, and it stops reading the socket (the
    client's writes then wait in its own kernel buffers) until they have gone out."""

    def connectionMade(self) -> None:
        transport: Any = self.transport
        transport.registerProducer(self, True)

    def dataReceived(self, data: bytes) -> None:
        transport: Any = self.transport
        transport.write(data)

    def pauseProducing(self) -> None:
        _socket(self.transport).pauseProducing()

    def resumeProducing(self) -> None:
        _socket(self.transport).resumeProducing()

    def stopProducing(self) -> None:
        """The connection is going: nothing of ours to stop."""


def _socket(transport: Any) -> Any:
    """The transport that reads the socket: a TLS layer's own transport (it has no reading to
    pause itself), or the connection's."""
    while not hasattr(transport, "pauseProducing") and hasattr(transport, "transport"):
        transport = transport.transport
    return transport


class EchoServer:
    """Runtime of an echo server binding."""

    #: Answers are whole, never held open (see `HttpBinding.max_idle`).
    max_idle: float | None = None
    #: The body is what it answers with (bounded by the http binding's `limits.body-bytes`).
    takes_body = True

    def __init__(self, name: str) -> None:
        self.name = name

    @property
    def versions(self) -> Collection[str] | None:
        """Any protocol a tls server negotiated: bytes are bytes."""
        return None

    def build_protocol(self, conn: ConnectionInfo) -> IProtocol | None:
        return cast(IProtocol, EchoConnection())

    def render(self, request: Request, ctx: HttpContext) -> bytes | int:
        req: Any = request  # twisted.web is untyped for mypy
        for name, values in req.requestHeaders.getAllRawHeaders():
            lower = bytes(name).decode("latin-1").lower()
            if echoed(lower, ctx.credential_headers):
                req.responseHeaders.setRawHeaders(name, list(values))
        content = req.content
        if content is None:
            return b""
        content.seek(0)
        body: bytes = content.read()
        return body


def echoed(header: str, credential_headers: Collection[str] = ()) -> bool:
    """Whether request header `header` (lower case) goes back in the answer."""
    return (header not in NOT_ECHOED and header not in credential_headers
            and not header.startswith(NOT_ECHOED_PREFIXES))


def _build(ctx: BuildContext, binding: Binding) -> EchoServer:
    return EchoServer(binding.name)


BINDING = BindingType("echo", {
    "server": KindSpec(
        role=EchoService, build=_build,
        options={"type": "object", "additionalProperties": False,
                 "description": "Sends back what it gets. After a tcp or tls server: every byte "
                                "of the connection, as it arrives. After an http server: `200` "
                                "with the request's body and its headers, but for credentials, "
                                "headers that would steer the client (`Set-Cookie`, `Location`, "
                                "`Access-Control-*`, ...) and those about the connection. It "
                                "takes no options."},
    ),
})

__all__ = ["BINDING", "EchoServer", "EchoService", "echoed"]
