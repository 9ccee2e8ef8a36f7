"""An in-memory UDP network for the quic binding's tests: real aioquic client connections (with
HTTP/3 on top) and the real `QuicServer`, their datagrams passed by hand on a
`MemoryReactorClock`, so that every timer (idle, handshake, acknowledgement delay, loss
recovery) runs when the test advances the clock and nothing depends on the machine's speed.

A client can move to another address (`Client.move`), stop hearing the server (`deaf`: the
server's datagrams are lost, so nothing it sends is ever acknowledged) or stop talking (`mute`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from aioquic.h3.connection import H3Connection
from aioquic.h3.events import DataReceived, H3Event, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.connection import QuicConnection
from aioquic.quic.events import ProtocolNegotiated, QuicEvent, StreamReset
from cryptography.hazmat.primitives.serialization import Encoding
from twisted.internet.testing import MemoryReactorClock
from twisted.web.server import NOT_DONE_YET, Request

from ssekd.bindings.connection_limits import ConnectionLimits, OpenConnections
from ssekd.bindings.http.channel import Limits
from ssekd.bindings.http.cors import AccessControl
from ssekd.bindings.http.roles import HttpContext
from ssekd.bindings.http.server import HttpRoot, HttpServer, HttpSite
from ssekd.bindings.quic.server import QuicLimits, QuicRoute, QuicServer
from ssekd.dev.certs import Issued, issue, make_ca
from ssekd.spi.connection import Peer, QuicSessionBinding
from ssekd.telemetry.events import EventLog
from ssekd.telemetry.metrics import Metrics
from tests.support.http_fakes import CountingProducer

SERVER: Peer = ("127.0.0.1", 7443)
#: Where the clock starts: a retry token carries its time, and 0 is no time to start at.
START = 1000.0


@dataclass(frozen=True)
class Keys:
    """A CA and two server keys signed by it (a.example, b.example; the first also localhost)."""

    ca: Issued
    a: Issued
    b: Issued

    @property
    def ca_pem(self) -> bytes:
        return self.ca.cert.public_bytes(Encoding.PEM)

    def choose(self, name: str | None) -> tuple[Any, list[Any], Any]:
        """The quic binding's key choice, for a server built here rather than from a config."""
        key = self.b if name == "b.example" else self.a
        return key.cert, [], key.key


@cache
def keys() -> Keys:
    """Made once per test run: signing keys is the slow part of these tests."""
    ca = make_ca("quic test CA")
    return Keys(ca, issue(ca, ["a.example", "localhost"]), issue(ca, ["b.example"]))


class Held:
    """An exit that keeps each GET open with a streaming producer (as the sse binding does) and
    hands it to the test; `/whole/N` answers N bytes written whole instead (an http-kafka
    answer), `/parts/SIZE/COUNT` COUNT writes of SIZE bytes with no length announced."""

    max_idle: float | None = None
    takes_body = False

    def __init__(self) -> None:
        self.held: list[tuple[Any, CountingProducer]] = []
        self.lost: list[Any] = []
        #: Requests of /parts/ the exit finished.
        self.finished = 0

    def render(self, request: Request, ctx: HttpContext) -> Any:
        req: Any = request
        if req.path.startswith(b"/whole/"):
            return b"w" * int(req.path.rsplit(b"/", 1)[1])
        if req.path.startswith(b"/parts/"):  # /parts/SIZE/COUNT, no length announced
            size, count = (int(n) for n in req.path.split(b"/")[2:4])
            for _ in range(count):
                req.write(b"p" * size)
            req.finish()
            self.finished += 1
            return NOT_DONE_YET
        producer = CountingProducer()
        req.registerProducer(producer, True)
        req.setHeader(b"content-type", b"text/event-stream")
        req.write(b": hello\n\n")
        req.notifyFinish().addErrback(lambda f: self.lost.append(f))
        self.held.append((req, producer))
        return NOT_DONE_YET


def http_server(clock: MemoryReactorClock, exit: Any, limits: Limits | None = None,
                events: EventLog | None = None, alt_svc: bytes | None = None) -> HttpServer:
    """The http binding's own server (site, root, limits) around `exit`, as `_build` makes it."""
    root = HttpRoot("http0", [], exit, AccessControl(), events or EventLog("test"))
    root.alt_svc = alt_svc
    return HttpServer("http0", HttpSite(root, limits or Limits(), clock), ("http/1.1", "h2"))


def quic_server(clock: MemoryReactorClock, exit: QuicSessionBinding | None, *,
                events: EventLog | None = None, metrics: Metrics | None = None,
                routes: Sequence[QuicRoute] = (), retry: bool = True, streams: int = 100,
                idle_timeout: float = 60.0, handshake_timeout: float = 10.0,
                connections: int = 100, per_ip: int = 100, sni: Sequence[str] | None = None,
                health: Any = None, table: OpenConnections | None = None) -> QuicServer:
    """A quic server as `_build` makes it, from arguments instead of a config."""
    limits = QuicLimits(ConnectionLimits(connections, per_ip), streams, idle_timeout,
                        handshake_timeout)
    return QuicServer("quic0", SERVER[0], SERVER[1], keys().choose, sni, ["h3"], list(routes),
                      exit, limits, retry, events or EventLog("test", clock=clock.seconds),
                      metrics or Metrics(), clock, health, table or OpenConnections(1000))


def clock() -> MemoryReactorClock:
    c = MemoryReactorClock()
    c.advance(START)
    return c


class Client:
    """One aioquic client connection, with HTTP/3 once the handshake negotiated it."""

    def __init__(self, wire: Wire, addr: Peer, server_name: str | None,
                 alpn: Sequence[str]) -> None:
        self.wire = wire
        self.addr = addr
        configuration = QuicConfiguration(is_client=True, alpn_protocols=list(alpn),
                                          server_name=server_name)
        configuration.load_verify_locations(cadata=keys().ca_pem)
        self.quic = QuicConnection(configuration=configuration)
        self.h3: H3Connection | None = None
        #: Datagrams the server sent this client, not yet received.
        self.inbox: list[bytes] = []
        #: Datagrams received from the server, their sizes.
        self.received: list[int] = []
        self.quic_events: list[QuicEvent] = []
        self.h3_events: list[H3Event] = []
        #: The server's datagrams are lost on the way (nothing of it is acknowledged).
        self.deaf = False
        #: The client's datagrams are lost on the way.
        self.mute = False
        self.quic.connect(SERVER, now=wire.clock.seconds())

    # -- the network's side ----------------------------------------------------------------

    def take(self, now: float) -> None:
        inbox, self.inbox = self.inbox, []
        for data in inbox:
            if not self.deaf:
                self.received.append(len(data))
                self.quic.receive_datagram(data, SERVER, now)
        self._events()

    def _events(self) -> None:
        while (event := self.quic.next_event()) is not None:
            self.quic_events.append(event)
            if isinstance(event, ProtocolNegotiated) and event.alpn_protocol == "h3":
                self.h3 = H3Connection(self.quic)
            if self.h3 is not None:
                self.h3_events.extend(self.h3.handle_event(event))

    def flight(self) -> list[bytes]:
        """The datagrams the client would send now (taken from it: the test delivers them)."""
        return [data for data, _ in self.quic.datagrams_to_send(self.wire.clock.seconds())]

    def move(self, addr: Peer) -> None:
        """The client's address changes (it left one network for another)."""
        self.wire.clients.pop(self.addr, None)
        self.addr = addr
        self.wire.clients[addr] = self

    # -- HTTP/3 ------------------------------------------------------------------------------

    def request(self, method: str = "GET", path: str = "/", *,
                headers: Sequence[tuple[bytes, bytes]] = (), body: bytes | None = None,
                end: bool = True, authority: bytes = b"localhost") -> int:
        assert self.h3 is not None, "no HTTP/3 yet"
        stream_id: int = self.quic.get_next_available_stream_id()
        self.h3.send_headers(stream_id, [(b":method", method.encode()), (b":scheme", b"https"),
                                         (b":authority", authority), (b":path", path.encode()),
                                         *headers], end_stream=body is None and end)
        if body is not None:
            self.h3.send_data(stream_id, body, end_stream=end)
        return stream_id

    def response_headers(self, stream_id: int) -> dict[bytes, bytes]:
        for e in self.h3_events:
            if isinstance(e, HeadersReceived) and e.stream_id == stream_id:
                return dict(e.headers)
        return {}

    def status(self, stream_id: int) -> bytes | None:
        return self.response_headers(stream_id).get(b":status")

    def body(self, stream_id: int) -> bytes:
        return b"".join(e.data for e in self.h3_events
                        if isinstance(e, DataReceived) and e.stream_id == stream_id)

    def ended(self, stream_id: int) -> bool:
        return any(isinstance(e, HeadersReceived | DataReceived) and e.stream_id == stream_id
                   and e.stream_ended for e in self.h3_events)

    def reset(self, stream_id: int) -> int | None:
        """The error code the server reset `stream_id` with, if it did."""
        for e in self.quic_events:
            if isinstance(e, StreamReset) and e.stream_id == stream_id:
                return int(e.error_code)
        return None

    def of(self, kind: type[Any]) -> list[Any]:
        return [e for e in (*self.quic_events, *self.h3_events) if isinstance(e, kind)]


@dataclass
class Wire:
    """The network between one server and its clients (module docstring)."""

    server: QuicServer
    clock: MemoryReactorClock
    clients: dict[Peer, Client] = field(default_factory=dict)
    #: Every datagram the server sent: (bytes, to).
    sent: list[tuple[bytes, Peer]] = field(default_factory=list)
    #: Raw datagrams to deliver to the server as if from an address, before the clients'.
    #: (index, count): the server's share of the connection ids (workers share the port).
    shard: tuple[int, int] = (0, 1)

    def __post_init__(self) -> None:
        self.server.start(self._from_server, self.shard)

    def _from_server(self, data: bytes, to: Peer) -> None:
        self.sent.append((data, to))
        client = self.clients.get(to)
        if client is not None:
            client.inbox.append(data)

    def client(self, port: int = 40000, *, host: str = "127.0.0.1",
               server_name: str | None = "localhost", alpn: Sequence[str] = ("h3",)) -> Client:
        client = Client(self, (host, port), server_name, alpn)
        self.clients[client.addr] = client
        return client

    def connect(self, port: int = 40000, **kwargs: Any) -> Client:
        """A client whose handshake is done (HTTP/3 ready)."""
        client = self.client(port, **kwargs)
        self.run(0.2)
        assert client.h3 is not None, client.quic_events
        return client

    def exchange(self) -> bool:
        """Pass every datagram waiting on either side once; whether any moved."""
        moved = False
        now = self.clock.seconds()
        for client in list(self.clients.values()):
            for data, _ in client.quic.datagrams_to_send(now):
                moved = True
                if not client.mute:
                    self.server.datagram_received(data, client.addr)
        self.clock.advance(0)  # what the server queued for this turn goes out
        for client in list(self.clients.values()):
            if client.inbox:
                moved = True
                client.take(now)
        return moved

    def run(self, seconds: float = 0.0, *, until: Callable[[], bool] | None = None) -> None:
        """Exchange datagrams and run every timer (server's and clients') due within `seconds`
        from now, in time order; stop early once `until()` holds."""
        end = self.clock.seconds() + seconds
        for _ in range(100_000):
            if until is not None and until():
                return
            if self.exchange():
                continue
            due = [t for c in self.clients.values() if (t := c.quic.get_timer()) is not None]
            due += [c.getTime() for c in self.clock.getDelayedCalls() if c.active()]
            now = self.clock.seconds()
            if not due or min(due) > end:
                break
            self.clock.advance(max(0.0, min(due) - now))
            now = self.clock.seconds()
            for client in list(self.clients.values()):
                timer = client.quic.get_timer()
                if timer is not None and timer <= now:
                    client.quic.handle_timer(now)
                    client._events()  # noqa: SLF001 - its own helper
        else:
            raise AssertionError("the exchange never settled")
        if until is None:
            self.clock.advance(max(0.0, end - self.clock.seconds()))
