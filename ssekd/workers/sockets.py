"""Listening sockets made by hand, for the worker processes that share them.

Twisted's `listenTCP` opens and listens in one call; a supervisor that hands its sockets to
worker processes (and a worker that opens one beside its siblings) needs the socket itself,
then lets each worker's reactor adopt it (`adoptStreamPort`).
"""

from __future__ import annotations

import errno
import os
import socket

from twisted.internet import tcp

#: Connections the kernel queues per socket before workers accept them. Twisted's default (50)
#: is for one process accepting as fast as it can; many clients reconnecting at once to a few
#: busy workers need more room.
BACKLOG = 4096

#: Connections one turn of the reactor accepts on a listening port, at most. Twisted starts at
#: 100 and adds 20 after every turn that accepted as many as it was allowed, without bound:
#: through a storm of connections (100,000 clients opening their streams over a minute or two,
#: the load of a restart) one turn accepted hundreds, the next read and answered every one's
#: request, and for the seconds those turns took on a busy machine the worker did nothing else:
#: no events written to the streams it had, no answer to its parent's heartbeat, so the parent
#: took it for stuck and killed it, with every stream it held (seen with 8 workers opening
#: 100,000 streams on 2 cores shared at a load average of 14 to 22: 9 workers killed and 65,000
#: streams lost while connecting; `ssekd.heartbeats` now also tells a busy worker from a stuck
#: one). Bounded, every turn stays short and the connections not accepted yet wait in the
#: kernel's accept queue (`BACKLOG`), which is what it is for; a turn costs little beside its
#: connections, so accepting costs no more CPU per connection (measured: 0.20-0.30 ms per
#: connect with the bound, 0.22-0.30 ms without, alternating on a shared machine).
ACCEPTS_PER_TURN = 32


class _AcceptsBounded(tcp.Port):
    """A listening port that accepts at most `ACCEPTS_PER_TURN` connections per turn."""

    def doRead(self) -> None:  # noqa: N802 - Twisted's name
        self.numberAccepts = min(self.numberAccepts, ACCEPTS_PER_TURN)
        super().doRead()


def bound_accepts(port: object) -> None:
    """Hold `port` (what `listenTCP` or `adoptStreamPort` returned) to `ACCEPTS_PER_TURN`
    accepts per turn. The reactor makes its ports itself, so the port becomes the subclass that
    bounds them (it adds no state); anything else (a test's fake port) is left as it is."""
    if type(port) is tcp.Port:
        port.__class__ = _AcceptsBounded


def listening_socket(host: str, port: int, reuse_port: bool = False) -> socket.socket:
    """A non-blocking socket listening on (host, port), as `listenTCP` would open it, plus
    SO_REUSEPORT when several processes each open their own on the same port."""
    family, kind, proto, _, address = socket.getaddrinfo(
        host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(address)
        sock.listen(BACKLOG)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


def family_of(fd: int) -> socket.AddressFamily:
    """The address family of the socket open on `fd` (which stays open)."""
    probe = socket.socket(fileno=os.dup(fd))
    try:
        return probe.family
    finally:
        probe.close()


def port_taken(port: int, config: object, udp: bool = False) -> str:
    """The one line every part of ssekd says when a port of `config` is held by another process
    (the daemon, its workers' parent, `make run`), after its own `ssekd:` or `ssekd.dev:`."""
    return (f"{'UDP ' if udp else ''}port {port} is in use (another ssekd? a `make run` in "
            f"another terminal?): stop it, or change the port in {config}")


def port_in_use(host: str, port: int, udp: bool = False) -> bool:
    """Whether another socket holds (host, port), so listening there would fail: a bind as
    `listenTCP` makes it (SO_REUSEADDR, so a port left in TIME_WAIT is free), without
    SO_REUSEPORT (which would share the port with another process that set it too). `udp`: a
    UDP port, as a quic binding binds it."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_DGRAM if udp else socket.SOCK_STREAM,
            flags=socket.AI_PASSIVE)[0]
    except OSError:
        return False  # an address that does not resolve: the daemon says so itself
    with socket.socket(family, kind, proto) as probe:
        if not udp:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as e:
            return e.errno == errno.EADDRINUSE
    return False


def datagram_socket(host: str, port: int, reuse_port: bool = False) -> socket.socket:
    """A non-blocking UDP socket bound to (host, port), plus SO_REUSEPORT when several
    processes each hold one on the same port (`steer_by_connection_id` says which gets what)."""
    family, kind, proto, _, address = socket.getaddrinfo(
        host or None, port, type=socket.SOCK_DGRAM, flags=socket.AI_PASSIVE)[0]
    sock = socket.socket(family, kind, proto)
    try:
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(address)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


#: `SO_ATTACH_REUSEPORT_CBPF` (linux/asm-generic/socket.h); Python's socket module lacks it.
SO_ATTACH_REUSEPORT_CBPF = 51


def steering_program(count: int) -> list[tuple[int, int, int, int]]:
    """The classic BPF program that picks, for each datagram of a QUIC port shared by `count`
    workers, the socket of the worker that holds its connection: the first byte of the
    destination connection id modulo `count` (byte 1 of a short header packet, byte 6 of a long
    one). Each worker makes its own connection ids so that this lands on itself
    (`ssekd.bindings.quic.ids`), so a connection's datagrams reach its worker whatever address
    they come from: a client that moves to another network (QUIC's connection migration)
    would otherwise be spread by the kernel's hash of its new address, to a worker that does
    not know it. A client's first packets carry an id it chose at random: they all carry the
    same one, so they all reach the same worker, which answers with an id of its own. A packet
    too short for the load ends the program with 0 (the first socket), and the kernel falls back
    to its hash for any index past the group's sockets."""
    ld_b_abs, jset_k, ja, mod_k, ret_a = 0x30, 0x45, 0x05, 0x94, 0x16
    return [
        (ld_b_abs, 0, 0, 0),     # A = first byte (the header form)
        (jset_k, 0, 2, 0x80),    # long header? next : skip to the short header's load
        (ld_b_abs, 0, 0, 6),     # long: A = the first byte of the destination id
        (ja, 0, 0, 1),
        (ld_b_abs, 0, 0, 1),     # short: A = the first byte of the destination id
        (mod_k, 0, 0, count),
        (ret_a, 0, 0, 0),
    ]


def steer_by_connection_id(sock: socket.socket, count: int) -> None:
    """Attach `steering_program(count)` to the SO_REUSEPORT group `sock` is in (every socket of
    it bound, in worker order: the kernel numbers them in the order they joined)."""
    import ctypes

    class Filter(ctypes.Structure):
        _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8),
                    ("k", ctypes.c_uint32)]

    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(Filter))]

    code = steering_program(count)
    filters = (Filter * len(code))(*[Filter(*c) for c in code])
    program = Program(len(code), ctypes.cast(filters, ctypes.POINTER(Filter)))
    sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_REUSEPORT_CBPF, bytes(program))
