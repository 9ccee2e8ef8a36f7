"""Listening sockets made by hand, for the worker processes that share them.

Twisted's `listenTCP` opens and listens in one call; a supervisor that hands its sockets to
worker processes (and a worker that opens one beside its siblings) needs the socket itself,
then lets each worker's reactor adopt it (`adoptStreamPort`).
"""

from __future__ import annotations

import errno
import os
import socket

#: Connections the kernel queues per socket before workers accept them. Twisted's default (50)
#: is for one process accepting as fast as it can; many clients reconnecting at once to a few
#: busy workers need more room.
BACKLOG = 4096


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


def port_taken(port: int, config: object) -> str:
    """The one line every part of ssekd says when a port of `config` is held by another process
    (the daemon, its workers' parent, `make run`), after its own `ssekd:` or `ssekd.dev:`."""
    return (f"port {port} is in use (another ssekd? a `make run` in another terminal?): stop "
            f"it, or change the port in {config}")


def port_in_use(host: str, port: int) -> bool:
    """Whether another socket holds (host, port), so listening there would fail: a bind as
    `listenTCP` makes it (SO_REUSEADDR, so a port left in TIME_WAIT is free), without
    SO_REUSEPORT (which would share the port with another process that set it too)."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
    except OSError:
        return False  # an address that does not resolve: the daemon says so itself
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as e:
            return e.errno == errno.EADDRINUSE
    return False
