"""How many connections a tcp server holds: in total and per client address (an ssekd addition
to the tcp server's options, `limits: {connections, connections-per-ip}`).

A connection over a limit is closed as soon as it is accepted, before a byte of it is read, and
without an answer. At this layer nothing says yet whether it will carry an SSE request, and the
two kinds of client want different answers: a browser's EventSource gives up for good on any
status but `200` (docs/protocol.md), while it retries a connection that closes. Closing is the one answer
every client takes as "try again".

Every accepted socket is a file descriptor, and so is every Kafka socket, file being served and
log file. When the process runs out (EMFILE), Twisted's accept loop does not spin: it keeps one
descriptor in reserve and spends it to accept and close the clients waiting (logging three lines
for each). But everything else that opens a descriptor fails too: a file request on a connection
already open gets a 404, a Kafka client cannot reconnect. So the total limit defaults to the
process's soft `RLIMIT_NOFILE` (`ulimit -n`) less a reserve for those, and one count per process
(`OpenConnections`) holds every tcp server of the process under that budget too, however their
own limits add up: the daemon refuses connections itself, cleanly, before the kernel refuses it
anything.
"""

from __future__ import annotations

import resource
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from twisted.internet.interfaces import IProtocol, ITransport
from twisted.internet.protocol import Protocol, connectionDone
from twisted.python.failure import Failure

#: Connections from one client address, by default: generous for many browsers behind one NAT,
#: yet one address cannot take a large daemon's every connection.
DEFAULT_PER_IP = 1000
#: File descriptors kept back from connections: at least this many ...
FD_RESERVE_MIN = 128
#: ... or this share of the limit, whichever is more (Kafka sockets grow with the brokers).
FD_RESERVE_SHARE = 0.1
#: What "no limit" means for a process without a file descriptor limit.
UNLIMITED = 1 << 30


def fd_budget() -> int:
    """Connections the process can hold with its file descriptor limit, less the reserve."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return UNLIMITED
    return max(1, soft - max(FD_RESERVE_MIN, int(soft * FD_RESERVE_SHARE)))


@dataclass(frozen=True)
class ConnectionLimits:
    """`options.limits` of a tcp server."""

    connections: int
    per_ip: int = DEFAULT_PER_IP

    @classmethod
    def from_options(cls, options: Mapping[str, Any] | None, budget: int) -> ConnectionLimits:
        o = options or {}
        return cls(connections=int(o.get("connections", budget)),
                   per_ip=int(o.get("connections-per-ip", DEFAULT_PER_IP)))


LIMITS_SCHEMA: Mapping[str, Any] = {
    "type": "object", "additionalProperties": False, "x-ssekd-addition": True,
    "description": "How many connections this tcp server holds; one over a limit is "
                   "closed at once, unanswered (a browser's EventSource retries)",
    "properties": {
        "connections": {
            "type": "integer", "minimum": 1, "x-ssekd-addition": True,
            "x-ssekd-default": "ulimit -n less max(128, a tenth of it)",
            "description": "Open connections in all; default: the process's file descriptor "
                           "limit (ulimit -n) less a reserve of max(128, a tenth of it), so "
                           "the daemon refuses connections before it runs out of descriptors",
        },
        "connections-per-ip": {
            "type": "integer", "minimum": 1, "default": DEFAULT_PER_IP, "x-ssekd-addition": True,
            "description": "Open connections from one client address",
        },
    },
}


class OpenConnections:
    """The accepted connections of this process that are still open: in all, per tcp server
    binding, and per (binding, client address). Kept by binding name, so the count survives a
    reload that rebuilds the binding while its connections stay open."""

    def __init__(self, budget: int) -> None:
        #: Connections the whole process may hold (see `fd_budget`).
        self.budget = budget
        self.total = 0
        self._bindings: dict[str, int] = {}
        self._addresses: dict[tuple[str, str], int] = {}

    def admit(self, binding: str, address: str, limits: ConnectionLimits) -> str | None:
        """Count one more connection, or say which limit it would pass (and count nothing)."""
        key = (binding, address)
        if self._addresses.get(key, 0) >= limits.per_ip:
            return f"connections-per-ip limit {limits.per_ip} reached"
        if self._bindings.get(binding, 0) >= limits.connections:
            return f"connections limit {limits.connections} reached"
        if self.total >= self.budget:
            return f"file descriptor budget of {self.budget} connections reached (ulimit -n)"
        self.total += 1
        self._bindings[binding] = self._bindings.get(binding, 0) + 1
        self._addresses[key] = self._addresses.get(key, 0) + 1
        return None

    def release(self, binding: str, address: str) -> None:
        key = (binding, address)
        self.total -= 1
        self._bindings[binding] -= 1
        if self._addresses[key] == 1:
            del self._addresses[key]  # no entry left behind per address ever seen
        else:
            self._addresses[key] -= 1

    def count(self, binding: str, address: str | None = None) -> int:
        if address is None:
            return self._bindings.get(binding, 0)
        return self._addresses.get((binding, address), 0)


#: The one count of the process: file descriptors are a per-process resource.
PROCESS = OpenConnections(fd_budget())


class CountedConnection(Protocol):
    """Stands between the TCP transport and the exit's protocol only to give the connection's
    place back when it closes. The exit's protocol gets the real transport, so writes (the hot
    path) do not pass through here; reads are handed on."""

    def __init__(self, inner: IProtocol, table: OpenConnections, binding: str,
                 address: str) -> None:
        self.inner = inner
        self._table = table
        self._binding = binding
        self._address = address
        self._counted = True

    def makeConnection(self, transport: ITransport) -> None:
        self.connected = True
        self.transport = transport
        self.inner.makeConnection(transport)

    def dataReceived(self, data: bytes) -> None:
        self.inner.dataReceived(data)

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        if self._counted:
            self._counted = False
            self._table.release(self._binding, self._address)
        self.connected = False
        self.inner.connectionLost(reason)
