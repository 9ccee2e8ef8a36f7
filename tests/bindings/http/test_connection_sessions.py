"""The sessions a connection opened before HTTP (a tls server's client certificate) reach the
routes of the http server behind it, over HTTP/1.1 and HTTP/2: a route guarded by that guard
takes the request when the session has the roles, and answers `404` without them or without a
session, as Zilla does (no route for it); a good token lacking a route's roles is `404` too."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import h2.events
from twisted.internet.address import IPv4Address
from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.web.server import Request

from ssekd.bindings.http.authorization import Authorization, Credentials
from ssekd.bindings.http.channel import Limits
from ssekd.bindings.http.cors import AccessControl
from ssekd.bindings.http.roles import HttpContext
from ssekd.bindings.http.routing import Condition, HeaderPattern
from ssekd.bindings.http.server import HttpRoot, HttpRoute, HttpServer, HttpSite
from ssekd.guards.x509 import X509Guard
from ssekd.spi.connection import ConnectionInfo
from ssekd.spi.guard import Refusal, Session
from ssekd.telemetry.events import EventLog
from tests.support.h2client import ReceivedH2Events

PEER = IPv4Address("TCP", "127.0.0.1", 40000)
HOST = IPv4Address("TCP", "127.0.0.1", 8443)


@dataclass(frozen=True)
class Granted:
    identity: str | None
    roles: frozenset[str]
    expires_at: float | None = None


class WhoAmI:
    """An exit answering with the identities its context has."""

    max_idle: float | None = None
    takes_body = False

    def render(self, request: Request, ctx: HttpContext) -> bytes:
        return ",".join(f"{g}={i}" for g, i in sorted(ctx.identities().items())).encode()


class TokenGuard:
    """A guard whose tokens are `identity:role`."""

    challenge = 0.0

    def __init__(self) -> None:
        self.reported: list[str] = []

    def verify(self, token: str) -> Session | Refusal:
        who, _, role = token.partition(":")
        return Granted(who, frozenset({role}))

    def report(self, reason: str) -> None:
        self.reported.append(reason)


def server(tokens: TokenGuard | None = None) -> HttpServer:
    def route(path: str, guarded: dict[str, tuple[str, ...]]) -> HttpRoute:
        return HttpRoute((Condition((HeaderPattern.compile(":path", path),)),), WhoAmI(), guarded)
    guards: dict[str, Any] = {"certs": X509Guard("certs", {}, EventLog("test"))}
    credentials = {}
    if tokens is not None:
        guards["tokens"] = tokens
        credentials["tokens"] = Credentials.from_options({"headers": {"x-token": "{credentials}"}})
    root = HttpRoot("http0", [route("/mine", {"certs": ("client",)}),
                              route("/token", {"tokens": ("read",)})], None, AccessControl(),
                    EventLog("test"), Authorization(guards, credentials))
    return HttpServer("http0", HttpSite(root, Limits(), MemoryReactorClock()), ("http/1.1", "h2"))


def connect(http: HttpServer, alpn: str, sessions: dict[str, Session]) -> tuple[Any, Any]:
    conn = ConnectionInfo(HOST, PEER, secure=True, alpn=alpn, sessions=sessions)
    protocol: Any = http.build_protocol(conn)
    transport: Any = StringTransport(hostAddress=HOST, peerAddress=PEER)
    transport.negotiatedProtocol = alpn.encode()  # what TLS says after ALPN
    protocol.makeConnection(transport)
    return protocol, transport


def get11(http: HttpServer, path: str, sessions: dict[str, Session],
          headers: bytes = b"") -> bytes:
    protocol, transport = connect(http, "http/1.1", sessions)
    protocol.dataReceived(b"GET %s HTTP/1.1\r\nHost: localhost\r\n%s\r\n" % (path.encode(), headers))
    return bytes(transport.value())


CLIENT = {"certs": Granted("client-1", frozenset({"client"}))}
NO_ROLE = {"certs": Granted("client-2", frozenset())}


def test_the_connections_session_reaches_the_route_over_http11() -> None:
    http = server()
    assert get11(http, "/mine", CLIENT).startswith(b"HTTP/1.1 200 OK")
    assert get11(http, "/mine", CLIENT).endswith(b"\r\n\r\ncerts=client-1")
    assert get11(http, "/mine", NO_ROLE).startswith(b"HTTP/1.1 404 ")
    no_certificate = get11(http, "/mine", {})
    assert no_certificate.startswith(b"HTTP/1.1 404 ")
    assert b"www-authenticate" not in no_certificate.lower()


class _H2(ReceivedH2Events):
    def __init__(self, http: HttpServer, sessions: dict[str, Session]) -> None:
        import h2.config
        import h2.connection
        self.protocol, self.transport = connect(http, "h2", sessions)
        self.clock: MemoryReactorClock = http.site.reactor
        self.client = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
        self.client.initiate_connection()
        self.events: list[h2.events.Event] = []

    def get(self, path: str) -> tuple[str | None, bytes]:
        stream = self.client.get_next_available_stream_id()
        self.client.send_headers(stream, [(":method", "GET"), (":scheme", "https"),
                                          (":authority", "localhost"), (":path", path)],
                                 end_stream=True)
        self.protocol.dataReceived(self.client.data_to_send())
        self.clock.advance(0)  # the connection writes what a turn made ready at its end
        self.events += self.client.receive_data(self.transport.value())
        self.transport.clear()
        return self.status(stream), b"".join(e.data for e in self.of(h2.events.DataReceived,
                                                                       stream))


def test_the_connections_session_reaches_the_route_over_http2() -> None:
    http = server()
    assert _H2(http, CLIENT).get("/mine") == ("200", b"certs=client-1")
    assert _H2(http, NO_ROLE).get("/mine")[0] == "404"
    assert _H2(http, {}).get("/mine")[0] == "404"


def test_a_good_token_without_the_routes_role_is_404_with_its_reason_reported() -> None:
    tokens = TokenGuard()
    http = server(tokens)
    assert get11(http, "/token", {}, b"X-Token: alice:read\r\n").endswith(b"tokens=alice")
    assert get11(http, "/token", {}, b"X-Token: bob:write\r\n").startswith(b"HTTP/1.1 404 ")
    assert tokens.reported == ["bob lacks role(s) read"]
    no_token = get11(http, "/token", {})
    assert no_token.startswith(b"HTTP/1.1 401 ") and b"WWW-Authenticate: Bearer" in no_token
