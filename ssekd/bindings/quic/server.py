"""The quic server: QUIC connections on one UDP socket, each handed to an http server for
HTTP/3 (docs/config-reference.md, `quic`).

One `QuicServer` per binding; it is the socket's `DatagramReceiver` (the engine owns the
socket, `ssekd.datagrams`). Every datagram is read for its destination connection id:

* an id of a connection held here goes to that connection, from whatever address it comes
  (connection migration: aioquic validates the new path before it sends much there);
* a client's first packet (an Initial of at least 1,200 bytes, QUIC's anti-amplification
  floor) gets a Retry unless it carries a token this server issued to that address (address
  validation, `retry`): until the client has shown it receives at the address it claims, the
  server keeps no state and sends one small packet, so a spoofed source cannot make it send
  more than it received, nor fill its memory;
* a validated Initial opens a connection, within the connection limits (`limits.connections`,
  `limits.connections-per-ip`, counted with the tcp servers' table kind but apart from it:
  a QUIC connection holds no file descriptor), else it is dropped unanswered;
* anything else is dropped.

Each connection (`QuicPeer`) runs aioquic's sans-I/O `QuicConnection`: datagrams in, its events
to the session of its exit (`QuicSessionBinding.quic_session`: HTTP/3), its datagrams out once
per reactor turn after anything queued data (a fan-out batch to a hundred streams of one
connection goes out as full packets, not a hundred small ones), and one timer for its loss
recovery, acknowledgement delay and idle timeout. A handshake not done within
`limits.handshake-timeout` ends the connection.

Draining: when the daemon drains (SIGTERM with `engine.drain`) every connection's session
sends GOAWAY, so clients open new requests elsewhere; when the listener stops, every connection
is closed (CONNECTION_CLOSE, H3_NO_ERROR), so clients reconnect at once rather than after their
idle timeout.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from aioquic.buffer import Buffer  # type: ignore[attr-defined]
from aioquic.h3.connection import ErrorCode
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.events import (
    ConnectionIdIssued,
    ConnectionIdRetired,
    ConnectionTerminated,
    HandshakeCompleted,
    ProtocolNegotiated,
)
from aioquic.quic.packet import (
    QuicPacketType,
    encode_quic_retry,
    encode_quic_version_negotiation,
    pull_quic_header,
)
from aioquic.quic.retry import QuicRetryTokenHandler
from twisted.application.service import Service
from twisted.internet.address import IPv4Address, IPv6Address

from ssekd.bindings.connection_limits import ConnectionLimits, OpenConnections
from ssekd.bindings.quic.ids import KeyChooser, Shard, SteeredConnection
from ssekd.health import Health
from ssekd.spi.connection import (
    ConnectionInfo,
    DatagramSpec,
    Peer,
    QuicSession,
    QuicSessionBinding,
)
from ssekd.telemetry.events import EventLog
from ssekd.telemetry.metrics import Metrics

#: QUIC's smallest datagram a client's first flight must fill (RFC 9000 §14.1).
SMALLEST_INITIAL = 1200
#: Connection id length of ours (aioquic's default; the steering reads only the first byte).
CID_LENGTH = 8
#: Seconds between looks at whether the daemon started draining.
DRAIN_CHECK = 0.5


@dataclass(frozen=True)
class QuicLimits:
    """`options.limits` of a quic server."""

    connections: ConnectionLimits
    streams: int
    idle_timeout: float
    handshake_timeout: float


@dataclass(frozen=True)
class QuicRoute:
    """A route: server-name patterns (any, when empty) to an http server."""

    authorities: tuple[Any, ...]
    exit: QuicSessionBinding

    def matches(self, authority: str | None) -> bool:
        return not self.authorities or (authority is not None and any(
            p.fullmatch(authority) for p in self.authorities))


class QuicServer(Service):
    """Runtime of a quic server binding (module docstring)."""

    def __init__(self, name: str, host: str, port: int, choose: KeyChooser,
                 sni: Sequence[str] | None, alpn: Sequence[str], routes: Sequence[QuicRoute],
                 default: QuicSessionBinding | None, limits: QuicLimits, retry: bool,
                 events: EventLog, metrics: Metrics, reactor: Any, health: Health | None,
                 table: OpenConnections) -> None:
        self.name = name
        #: The binding's name, for events and metrics (Service's `name` may be None).
        self.binding = name
        self.host = host
        self.port = port
        self._keys = choose
        self.sni = None if sni is None else {s.lower() for s in sni}
        self.alpn = list(alpn)
        self.routes = list(routes)
        self.default = default
        self.limits = limits
        self.retry = QuicRetryTokenHandler() if retry else None
        self.events = events
        self.metrics = metrics
        self.reactor = reactor
        self.health = health
        self.table = table
        #: Which connection ids reach this process's socket (workers share the port).
        self.shard = Shard()
        #: Connection id -> the connection it reaches (every id a connection answers to).
        self.by_id: dict[bytes, QuicPeer] = {}
        self.peers: set[QuicPeer] = set()
        self._send: Callable[[bytes, Peer], None] | None = None
        self._retired = False
        self._draining = False
        self._drain_call: Any = None
        self.open = metrics.gauge("quic.connections", name)
        self.migrations = metrics.counter("quic.migrations", name)

    # -- the listener --------------------------------------------------------------------------

    def datagram_specs(self) -> list[DatagramSpec]:
        return [DatagramSpec(self.host, self.port, self)]

    def startService(self) -> None:  # noqa: N802 - Twisted's name
        super().startService()
        self._watch_drain()

    def stopService(self) -> Any:  # noqa: N802
        """Stopped by a reload that replaced it: the connections it holds go on (the socket's
        switch still hands them their datagrams, `ssekd.datagrams`), and so does the watch
        for a drain, until they are gone. The engine's stop closes them (`stop`)."""
        super().stopService()
        return None

    def _watch_drain(self) -> None:
        self._drain_call = None
        if self.health is not None and self.health.draining and not self._draining:
            self._draining = True
            for peer in list(self.peers):
                peer.going_away()
        if not self._draining and (self.running or self.peers):
            self._drain_call = self.reactor.callLater(DRAIN_CHECK, self._watch_drain)

    # -- DatagramReceiver -------------------------------------------------------------------

    def start(self, send: Callable[[bytes, Peer], None], shard: tuple[int, int]) -> None:
        self._send = send
        self.shard = Shard(*shard)
        self._retired = False

    def retire(self) -> None:
        """Replaced by a reload: no new connection; those held go on until their clients
        leave."""
        self._retired = True

    def stop(self) -> None:
        """The socket closes (the daemon stops): every connection is closed now, so its client
        reconnects at once instead of waiting out its idle timeout."""
        self._retired = True
        if self._drain_call is not None and self._drain_call.active():
            self._drain_call.cancel()
        self._drain_call = None
        for peer in list(self.peers):
            peer.close(ErrorCode.H3_NO_ERROR, "server stopping")

    @property
    def idle(self) -> bool:
        return not self.peers

    def claims(self, data: bytes) -> bool:
        return self._destination(data) in self.by_id

    def send(self, data: bytes, peer: Peer) -> None:
        if self._send is not None:
            self._send(data, peer)

    def datagram_received(self, data: bytes, peer: Peer) -> None:
        try:
            header = pull_quic_header(Buffer(data=data), host_cid_length=CID_LENGTH)
        except ValueError:
            return  # not QUIC, or cut short: nothing to answer
        known = self.by_id.get(header.destination_cid)
        if known is not None:
            try:
                known.receive(data, peer)
            except Exception as e:
                # a bug of ours or of aioquic's met on one connection's packet: that connection
                # ends, said once; the reactor and every other connection go on
                known.failed(e)
            return
        try:
            self._first(data, peer, header)
        except Exception as e:
            self.events.emit(self.binding, "BINDING_QUIC_ERROR",
                             f"{peer[0]}: first packet refused: {type(e).__name__}: {e}")

    def _first(self, data: bytes, peer: Peer, header: Any) -> None:
        """A packet of no connection held here (module docstring)."""
        if header.packet_type != QuicPacketType.INITIAL or len(data) < SMALLEST_INITIAL \
                or self._retired or self._draining:
            return
        configuration = self._configuration()
        if header.version not in configuration.supported_versions:
            self.send(encode_quic_version_negotiation(
                source_cid=header.destination_cid, destination_cid=header.source_cid,
                supported_versions=configuration.supported_versions), peer)
            return
        original = header.destination_cid
        retry_source = None
        if self.retry is not None:
            now = self.reactor.seconds()
            if not header.token:
                source = self.shard.new_id(CID_LENGTH)
                self.send(encode_quic_retry(
                    version=header.version, source_cid=source,
                    destination_cid=header.source_cid, original_destination_cid=original,
                    retry_token=self.retry.create_token(
                        address=peer, original_destination_connection_id=original,
                        retry_source_connection_id=source, now=now)), peer)
                return
            try:
                original = self.retry.validate_token(address=peer,
                                                     destination_cid=header.destination_cid,
                                                     token=header.token, now=now)
            except ValueError:
                return  # a token not ours, for another address or too old: dropped
            retry_source = header.destination_cid
        address = peer[0]
        refused = self.table.admit(self.binding, address, self.limits.connections)
        if refused is not None:
            self.events.emit(self.binding, "BINDING_QUIC_CONNECTION_REFUSED", f"{address}: {refused}")
            return
        quic = SteeredConnection(
            shard=self.shard, choose=self.choose, streams=self.limits.streams,
            configuration=configuration, original_destination_connection_id=original,
            retry_source_connection_id=retry_source)
        connection = QuicPeer(self, quic, peer)
        self.peers.add(connection)
        self.open.value += 1
        self.index(header.destination_cid, connection)
        for cid in quic._host_cids:  # noqa: SLF001 - aioquic's own list (ids.py)
            self.index(cid.cid, connection)
        connection.receive(data, peer)

    def _configuration(self) -> QuicConfiguration:
        configuration = QuicConfiguration(is_client=False, alpn_protocols=self.alpn,
                                          connection_id_length=CID_LENGTH,
                                          idle_timeout=self.limits.idle_timeout)
        # the first key; the client's server name may pick another (ids.py)
        configuration.certificate, configuration.certificate_chain, \
            configuration.private_key = self.choose(None)
        return configuration

    @staticmethod
    def _destination(data: bytes) -> bytes | None:
        try:
            return bytes(pull_quic_header(Buffer(data=data),
                                          host_cid_length=CID_LENGTH).destination_cid)
        except ValueError:
            return None

    # -- what a connection asks of its server --------------------------------------------------

    def authority(self, requested: str | None) -> str | None:
        """The server name the client asked for when `sni` accepts it (no `sni`: any name),
        else None: a name not accepted counts as none, for the key and the routes alike (as
        the tls binding)."""
        if requested is not None and self.sni is not None and requested not in self.sni:
            return None
        return requested

    def choose(self, requested: str | None) -> tuple[Any, list[Any], Any]:
        """The key for the server name the client asked for (`KeyChooser`)."""
        return self._keys(self.authority(requested))

    def route(self, authority: str | None) -> QuicSessionBinding | None:
        """The exit for an accepted server name (`authority`)."""
        for route in self.routes:
            if route.matches(authority):
                return route.exit
        return self.default

    def index(self, cid: bytes, connection: QuicPeer) -> None:
        """Datagrams to `cid` go to `connection` from now on."""
        self.by_id[cid] = connection
        connection.ids.add(cid)

    def forget(self, connection: QuicPeer) -> None:
        if connection in self.peers:
            self.peers.discard(connection)
            self.open.value -= 1
            self.table.release(self.binding, connection.address)
        for cid in connection.ids:  # its own list: a mass disconnect stays linear
            if self.by_id.get(cid) is connection:
                del self.by_id[cid]
        connection.ids.clear()

    def local(self) -> IPv4Address | IPv6Address:
        return (IPv6Address if ":" in self.host else IPv4Address)("UDP", self.host, self.port)


class QuicPeer:
    """One QUIC connection: aioquic's state machine driven by the reactor (module docstring);
    the `QuicTransport` its session sees."""

    def __init__(self, server: QuicServer, quic: SteeredConnection, peer: Peer) -> None:
        self.server = server
        self._quic = quic
        self.peer = peer
        #: The address it is counted under in the connection limits: the first one.
        self.address = peer[0]
        self.session: QuicSession | None = None
        #: The connection ids datagrams reach it by (`QuicServer.by_id`'s keys for it).
        self.ids: set[bytes] = set()
        self._timer: Any = None
        self._flush_call: Any = None
        self._closed = False
        reactor = server.reactor
        self._handshake_deadline = reactor.callLater(server.limits.handshake_timeout,
                                                     self._handshake_too_slow)

    # -- QuicTransport ---------------------------------------------------------------------

    @property
    def quic(self) -> Any:
        return self._quic

    def transmit(self) -> None:
        if self._flush_call is None and not self._closed:
            self._flush_call = self.server.reactor.callLater(0, self._flush)

    def unsent(self) -> int:
        """Bytes queued on the request streams and not yet acknowledged: what each stream's
        sender still holds (aioquic keeps a stream's data until the peer acknowledges it).
        Only the request streams (client-initiated, bidirectional): the HTTP/3 control and
        QPACK streams carry no response, and their few bytes queued after each request head
        would make a connection that holds no answer look as if it held one."""
        total = 0
        for stream_id, stream in self._quic._streams.items():  # noqa: SLF001 - ids.py says why
            if stream_id % 4 == 0:
                sender = stream.sender
                total += sender._buffer_stop - sender._buffer_start  # noqa: SLF001
        return total

    def close(self, error_code: int, reason: str) -> None:
        if self._closed:
            return
        self._quic.close(error_code=error_code, reason_phrase=reason)
        self._flush()

    def going_away(self) -> None:
        if self.session is not None:
            self.session.going_away()

    def failed(self, error: Exception) -> None:
        """Something raised while this connection's packet was handled: close it."""
        self.server.events.emit(self.server.binding, "BINDING_QUIC_ERROR",
                                f"{self.peer[0]}: connection closed: {type(error).__name__}: "
                                f"{error}")
        try:
            self._quic.close(error_code=0x1, reason_phrase="internal error")
            self._flush()
        except Exception:  # noqa: S110 - it is being dropped anyway
            pass
        self._over("internal error")

    # -- the reactor's side ----------------------------------------------------------------

    def receive(self, data: bytes, peer: Peer) -> None:
        if self._closed:
            return
        now = self.server.reactor.seconds()
        self._quic.receive_datagram(data, peer, now)
        self._events()
        if self.session is not None:
            self.session.sent()
        self._flush()

    def _on_timer(self) -> None:
        self._timer = None
        if self._closed:
            return
        self._quic.handle_timer(self.server.reactor.seconds())
        self._events()
        self._flush()

    def _flush(self) -> None:
        self._flush_call = None
        if self._closed:
            return
        server = self.server
        reactor = server.reactor
        for data, addr in self._quic.datagrams_to_send(reactor.seconds()):
            server.send(data, addr)
            if addr != self.peer:
                self._migrated(addr)
        self._events()  # a ConnectionTerminated among them ends it (`_over`)
        if self._closed:
            return
        when = self._quic.get_timer()
        if when is None:
            if self._timer is not None and self._timer.active():
                self._timer.cancel()
            self._timer = None
            return
        delay = max(0.0, when - reactor.seconds())
        if self._timer is not None and self._timer.active():
            self._timer.reset(delay)
        else:
            self._timer = reactor.callLater(delay, self._on_timer)

    def _migrated(self, addr: Peer) -> None:
        """aioquic sends to the client's new address once it validated it: the client moved."""
        old, self.peer = self.peer, addr
        self.server.migrations.inc()
        self.server.events.emit(self.server.binding, "BINDING_QUIC_MIGRATED",
                                f"{old[0]}:{old[1]} -> {addr[0]}:{addr[1]}")

    def _events(self) -> None:
        quic = self._quic
        server = self.server
        while True:
            event = quic.next_event()
            if event is None:
                return
            if isinstance(event, ConnectionIdIssued):
                server.index(event.connection_id, self)
            elif isinstance(event, ConnectionIdRetired):
                self.ids.discard(event.connection_id)
                if server.by_id.get(event.connection_id) is self:
                    del server.by_id[event.connection_id]
            elif isinstance(event, ProtocolNegotiated):
                self._negotiated(event.alpn_protocol)
            elif isinstance(event, HandshakeCompleted):
                if self._handshake_deadline.active():
                    self._handshake_deadline.cancel()
                server.metrics.counter("tls.handshakes", server.binding, outcome="ok",
                                       protocol=event.alpn_protocol or "none").inc()
            elif isinstance(event, ConnectionTerminated):
                if not quic._handshake_complete:  # noqa: SLF001
                    server.metrics.counter("tls.handshakes", server.binding, outcome="failed",
                                           protocol="none").inc()
                    server.events.emit(server.binding, "BINDING_QUIC_HANDSHAKE_FAILED",
                                       f"{self.peer[0]}: {event.reason_phrase or event.error_code}")
                self._over(event.reason_phrase or "connection closed")
                return
            elif self.session is not None:
                self.session.quic_event_received(event)

    def _negotiated(self, alpn: str | None) -> None:
        server = self.server
        requested = self._quic.server_name
        name = server.authority(requested)
        target = server.route(name)
        if target is None:
            server.events.emit(server.binding, "BINDING_QUIC_NO_ROUTE",
                               f"{self.peer[0]}: server name {requested or '(none)'}: no route "
                               f"takes it, closed")
            self._quic.close(error_code=ErrorCode.H3_NO_ERROR, reason_phrase="no route")
            return
        conn = ConnectionInfo(local=server.local(), peer=_address(self.peer), secure=True,
                              server_name=name, alpn=alpn)
        self.session = target.quic_session(conn, self)
        if server._draining:  # noqa: SLF001 - its own server
            self.session.going_away()

    def _handshake_too_slow(self) -> None:
        if not self._quic._handshake_complete and not self._closed:  # noqa: SLF001
            # counted as the tls binding counts its handshakes that time out
            self.server.metrics.counter("tls.handshakes", self.server.binding,
                                        outcome="failed", protocol="none").inc()
            self.server.events.emit(self.server.binding, "BINDING_QUIC_HANDSHAKE_FAILED",
                                    f"{self.peer[0]}: no handshake within "
                                    f"{self.server.limits.handshake_timeout:g} s")
            self._quic.close(error_code=0x0, reason_phrase="handshake too slow")
            self._flush()
            self._over("handshake too slow")

    def _over(self, reason: str) -> None:
        if self._closed:
            return
        self._closed = True
        for call in (self._timer, self._flush_call, self._handshake_deadline):
            if call is not None and call.active():
                call.cancel()
        self._timer = self._flush_call = None
        self.server.forget(self)
        if self.session is not None:
            self.session.connection_lost(reason)


def _address(peer: Peer) -> IPv4Address | IPv6Address:
    host, port = peer[0], peer[1]
    return (IPv6Address if ":" in host else IPv4Address)("UDP", host, port)

