"""The engine's UDP sockets: one per (host, port) a datagram listener (a quic server) asks for,
kept across reloads, and the switch behind each that hands datagrams to the receivers.

A TCP socket's reload is simple: each accepted connection has its own protocol, so the new
config's factory takes the next connection and the old ones go on. QUIC connections share the
socket, and their state lives in the receiver that accepted them (the quic server of the config
that was current then). So the switch keeps the receivers a reload replaced until they hold no
connection, and hands each of them the datagrams it `claims`; the rest go to the current one.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from twisted.internet.error import CannotListenError
from twisted.internet.interfaces import IListeningPort
from twisted.internet.protocol import DatagramProtocol

from ssekd.spi.connection import DatagramReceiver, DatagramSpec, Peer
from ssekd.workers.sockets import datagram_socket, family_of


class DatagramSwitch(DatagramProtocol):
    """Behind one UDP socket: the current receiver, and the retired ones still in use."""

    noisy = False

    def __init__(self, receiver: DatagramReceiver, shard: tuple[int, int] = (0, 1)) -> None:
        self.receiver = receiver
        self.shard = shard
        self.retired: list[DatagramReceiver] = []

    def startProtocol(self) -> None:  # noqa: N802 - Twisted's name
        self.receiver.start(self.send, self.shard)

    def send(self, data: bytes, peer: Peer) -> None:
        """One datagram out. A full socket buffer (EAGAIN), an unreachable peer: the datagram
        is lost, which QUIC recovers from like any loss; Twisted would raise."""
        transport: Any = self.transport
        if transport is not None:
            try:
                transport.write(data, peer)
            except OSError:
                pass

    def replace(self, receiver: DatagramReceiver) -> None:
        """A reload: `receiver` takes the new connections, the one it replaces keeps its own."""
        if receiver is self.receiver:
            return
        old = self.receiver
        old.retire()
        if not old.idle:
            self.retired.append(old)
        self.receiver = receiver
        if self.transport is not None:
            receiver.start(self.send, self.shard)

    def datagramReceived(self, datagram: bytes, addr: Any) -> None:  # noqa: N802
        retired = self.retired
        if retired:
            for old in retired:
                if old.claims(datagram):
                    old.datagram_received(datagram, addr)
                    break
            else:
                self.receiver.datagram_received(datagram, addr)
            self.retired = [r for r in retired if not r.idle]
            return
        self.receiver.datagram_received(datagram, addr)

    def stop(self) -> None:
        """The socket closes: every receiver ends its connections."""
        for receiver in (*self.retired, self.receiver):
            receiver.stop()
        self.retired = []


@dataclass
class DatagramPorts:
    """The engine's UDP sockets by configured (host, port)."""

    reactor: Any
    #: A worker's sockets, opened by its parent, by (host, port): descriptors to adopt, and
    #: the worker's shard of the port's connection ids (`DatagramReceiver.start`).
    inherited: dict[tuple[str, int], tuple[int, tuple[int, int]]] = field(default_factory=dict)
    #: In a worker: open a socket the parent did not give with SO_REUSEPORT beside the others.
    worker: bool = False
    ports: dict[tuple[str, int], tuple[IListeningPort, DatagramSwitch]] = \
        field(default_factory=dict)

    def listen(self, specs: list[DatagramSpec]) -> list[tuple[str, int]]:
        """Open what `specs` ask for and point kept sockets at their new receivers; close the
        ones no longer asked for. All or nothing: a socket that cannot open closes the ones this
        call opened and raises. Returns the keys opened."""
        wanted = {(s.host, s.port): s for s in specs}
        opened: list[tuple[str, int]] = []
        try:
            for key, spec in wanted.items():
                if key in self.ports:
                    self.ports[key][1].replace(spec.receiver)
                    continue
                inherited = self.inherited.pop(key, None)
                switch = DatagramSwitch(spec.receiver, inherited[1] if inherited else (0, 1))
                self.ports[key] = (self._open(key, switch, inherited), switch)
                opened.append(key)
        except Exception:
            for key in opened:
                port, switch = self.ports.pop(key)
                switch.stop()
                port.stopListening()
            raise
        for key in [k for k in self.ports if k not in wanted]:
            self.close(key)
        return opened

    def close(self, key: tuple[str, int]) -> None:
        port, switch = self.ports.pop(key)
        switch.stop()
        port.stopListening()

    def close_all(self) -> list[Any]:
        stops = []
        for key in list(self.ports):
            port, switch = self.ports.pop(key)
            switch.stop()
            stops.append(port.stopListening())
        return stops

    def bound(self) -> dict[tuple[str, int], int]:
        """Configured (host, port) -> the port actually bound (differs when configured 0)."""
        return {k: int(getattr(p.getHost(), "port", 0)) for k, (p, _) in self.ports.items()}

    def _open(self, key: tuple[str, int], switch: DatagramSwitch,
              inherited: tuple[int, tuple[int, int]] | None) -> IListeningPort:
        if inherited is not None:
            fd = inherited[0]
            try:
                port: IListeningPort = self.reactor.adoptDatagramPort(fd, family_of(fd), switch)
            finally:
                os.close(fd)  # the port holds its own copy
            return port
        try:
            sock = datagram_socket(key[0], key[1], reuse_port=self.worker)
        except OSError as e:
            raise CannotListenError(key[0], key[1], e) from e
        try:
            adopted: IListeningPort = self.reactor.adoptDatagramPort(sock.fileno(), sock.family,
                                                                     switch)
        finally:
            sock.close()
        return adopted
