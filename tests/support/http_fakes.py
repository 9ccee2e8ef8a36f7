"""In-memory peers for the unit tests of the HTTP layer: the http binding's own `HttpSite` over a
`StringTransport` on a `MemoryReactorClock`, with exits that stand in for real ones."""

from __future__ import annotations

from typing import Any

import h2.config
import h2.connection
import h2.events
from twisted.internet.address import IPv4Address
from twisted.internet.interfaces import IPushProducer
from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.web.server import Request
from zope.interface import implementer

from ssekd.bindings.http.channel import Limits
from ssekd.bindings.http.cors import AccessControl
from ssekd.bindings.http.h2_limits import LimitedH2Connection
from ssekd.bindings.http.h2c import h2_connection
from ssekd.bindings.http.roles import HttpContext
from ssekd.bindings.http.server import HttpRoot, HttpSite
from ssekd.telemetry.events import EventLog
from tests.support.h2client import ReceivedH2Events


class Upload:
    """An exit that takes request bodies: answers 200 with the body's length."""

    max_idle: float | None = None
    takes_body = True

    def __init__(self) -> None:
        self.bodies: list[bytes] = []

    def render(self, request: Request, ctx: HttpContext) -> bytes:
        content: Any = request.content
        self.bodies.append(content.read())
        return b"%d" % len(self.bodies[-1])


class GetOnly:
    """An exit like the sse binding: no bodies, GET only (405 otherwise)."""

    max_idle: float | None = None
    takes_body = False

    def __init__(self) -> None:
        self.rendered: list[bytes] = []

    def render(self, request: Request, ctx: HttpContext) -> bytes:
        self.rendered.append(request.method)
        if request.method != b"GET":
            request.setResponseCode(405)
            request.setHeader(b"allow", b"GET")
            return b""
        return b"ok"


def http_site(clock: MemoryReactorClock, exit: Any, limits: Limits | None = None) -> HttpSite:
    root = HttpRoot("http0", [], exit, AccessControl(), EventLog("test"))
    return HttpSite(root, limits or Limits(), clock)


def http11(site: HttpSite) -> tuple[Any, StringTransport]:
    """An HTTP/1.1 connection to `site`, as the tcp binding would make it."""
    proto: Any = site.buildProtocol(IPv4Address("TCP", "127.0.0.1", 40000))
    transport = StringTransport(hostAddress=IPv4Address("TCP", "127.0.0.1", 8080),
                                peerAddress=IPv4Address("TCP", "127.0.0.1", 40000))
    proto.makeConnection(transport)
    return proto, transport


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


class H2Peer(ReceivedH2Events):
    """A client `h2` connection whose bytes go straight into the HTTP/2 connection of `site`."""

    def __init__(self, site: Any) -> None:
        self.clock: MemoryReactorClock = site.reactor
        self.server: LimitedH2Connection = h2_connection(site)
        self.transport = StringTransport(hostAddress=IPv4Address("TCP", "127.0.0.1", 8080),
                                         peerAddress=IPv4Address("TCP", "127.0.0.1", 40000))
        self.server.makeConnection(self.transport)
        self.client = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
        self.client.initiate_connection()
        self.events: list[h2.events.Event] = []
        self.send()
        self.read()

    def request(self, method: str, path: str = "/", *, end_stream: bool = True,
                headers: list[tuple[str, str]] | None = None) -> int:
        stream_id: int = self.client.get_next_available_stream_id()
        self.client.send_headers(stream_id, [(":method", method), (":scheme", "http"),
                                             (":authority", "localhost:8080"), (":path", path),
                                             *(headers or [])], end_stream=end_stream)
        return stream_id

    def send(self) -> None:
        data = self.client.data_to_send()
        if data:
            self.server.dataReceived(data)

    def send_raw(self, data: bytes) -> None:
        self.server.dataReceived(data)

    def read(self) -> list[h2.events.Event]:
        """Run the reactor turns due now, feed what the server wrote to the client; its events."""
        self.clock.advance(0)
        data = self.transport.value()
        self.transport.clear()
        events = list(self.client.receive_data(data)) if data else []
        self.events += events
        self.send()  # the client's acks
        return events

    def goaway(self) -> h2.events.ConnectionTerminated | None:
        found = self.of(h2.events.ConnectionTerminated)
        return found[0] if found else None


@implementer(IPushProducer)
class CountingProducer:
    """A streaming response's producer (as an SSE stream is): whether it may produce, and how
    often it was paused and resumed."""

    def __init__(self) -> None:
        self.paused = False
        self.pauses = 0
        self.resumes = 0

    def pauseProducing(self) -> None:  # noqa: N802 - Twisted's names
        self.paused = True
        self.pauses += 1

    def resumeProducing(self) -> None:  # noqa: N802
        self.paused = False
        self.resumes += 1

    def stopProducing(self) -> None:  # noqa: N802
        pass
