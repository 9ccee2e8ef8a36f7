"""A lossy UDP relay on 127.0.0.1: a bad mobile link between an HTTP/3 client and the daemon.

Each datagram, in either direction, is dropped with probability `drop`, or held back with
probability `reorder` and sent after the next datagram of the same direction (or after
`hold` seconds if none follows), so it arrives out of order. The draws come from one RNG seeded
with `seed`, so a failing run can be replayed. Each client address gets its own upstream
socket, as a NAT gives each its own mapping; `rebind()` gives each a new one (a NAT
rebinding: the server sees the client move, the client does not know).

Datagrams pass in a background thread; `dropped`, `reordered` and `forwarded` count per
direction ("up": client to server, "down": server to client).
"""

from __future__ import annotations

import random
import select
import socket
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Literal, Self

Address = tuple[str, int]
Direction = Literal["up", "down"]


@dataclass
class _Held:
    """A datagram held back to be sent after a later one."""

    data: bytes
    sock: socket.socket
    to: Address
    since: float


@dataclass
class UdpRelay:
    """Relays 127.0.0.1:`port` to `upstream` (host, port), losing and reordering datagrams.

    `drop` and `reorder` are probabilities per datagram (0.03 is 3 %); `spare` datagrams of each
    direction pass untouched first (0 by default: the handshake is as exposed as the rest).
    """

    upstream: Address
    drop: float = 0.0
    reorder: float = 0.0
    seed: int = 42
    hold: float = 0.02
    spare: int = 0
    host: str = "127.0.0.1"
    port: int = 0
    forwarded: Counter[str] = field(default_factory=Counter)
    dropped: Counter[str] = field(default_factory=Counter)
    reordered: Counter[str] = field(default_factory=Counter)
    rebinds: int = 0
    _rng: random.Random = field(init=False, repr=False)
    _listener: socket.socket | None = field(default=None, init=False, repr=False)
    _up: dict[Address, socket.socket] = field(default_factory=dict, init=False, repr=False)
    _client_of: dict[socket.socket, Address] = field(default_factory=dict, init=False, repr=False)
    _held: dict[Direction, _Held] = field(default_factory=dict, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    _stopping: bool = field(default=False, init=False, repr=False)
    _thread: threading.Thread | None = field(default=None, init=False, repr=False)

    def start(self) -> Self:
        self._rng = random.Random(self.seed)
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._listener.bind((self.host, self.port))
        self._listener.setblocking(False)
        self.port = self._listener.getsockname()[1]
        self._thread = threading.Thread(target=self._run, name="udp-relay", daemon=True)
        self._thread.start()
        return self

    @property
    def address(self) -> Address:
        return (self.host, self.port)

    def set_loss(self, drop: float, reorder: float) -> None:
        """Change the link's quality from now on."""
        with self._lock:
            self.drop, self.reorder = drop, reorder

    def rebind(self, keep_old: bool = True) -> None:
        """Give every client a new upstream socket: the server sees each client's next packets
        come from a new address (a NAT rebinding). With `keep_old`, what the server still sends
        to the old address reaches the client (the old mapping lingers), so the client's next
        ACK tells the server where it went. Without, the old socket closes at once: a client
        that only receives then sends nothing the server could learn its new address from, until
        it has something to say (a PING, a request) -- no server can help that."""
        with self._lock:
            for client, old in list(self._up.items()):
                if not keep_old:
                    del self._client_of[old]
                    old.close()
                self._up[client] = self._upstream_socket(client)
            self.rebinds += 1

    def expire_old(self) -> int:
        """Close the old mappings `rebind(keep_old=True)` left: from now on only the current
        upstream sockets carry anything. Returns how many closed."""
        with self._lock:
            current = set(self._up.values())
            old = [s for s in self._client_of if s not in current]
            for sock in old:
                del self._client_of[sock]
                sock.close()
            return len(old)

    def upstream_addresses(self) -> list[Address]:
        """The addresses the server sees the relayed clients at, now."""
        with self._lock:
            return [s.getsockname() for s in self._up.values()]

    def stop(self) -> None:
        self._stopping = True
        if self._thread is not None:
            self._thread.join(2)
        with self._lock:
            for s in [*self._client_of, *([self._listener] if self._listener else [])]:
                s.close()
            self._up.clear()
            self._client_of.clear()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def summary(self) -> str:
        return (f"forwarded {dict(self.forwarded)}, dropped {dict(self.dropped)}, "
                f"reordered {dict(self.reordered)}")

    # -- the relay thread ----------------------------------------------------------------------

    def _upstream_socket(self, client: Address) -> socket.socket:
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        sock.bind((self.host, 0))
        sock.setblocking(False)
        self._client_of[sock] = client
        return sock

    def _run(self) -> None:
        assert self._listener is not None
        while not self._stopping:
            with self._lock:
                sockets = [self._listener, *self._client_of]
            try:
                readable = select.select(sockets, [], [], self.hold / 2)[0]
            except (OSError, ValueError):
                continue  # an upstream socket closed by rebind() meanwhile
            with self._lock:
                for sock in readable:
                    self._drain(sock)
                self._release_stale(time.monotonic())

    def _drain(self, sock: socket.socket) -> None:
        """Pass on what `sock` has (lock held)."""
        while True:
            try:
                data, source = sock.recvfrom(65536)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return  # closed by rebind(), or an ICMP error
            if sock is self._listener:
                out = self._up.get(source)
                if out is None:
                    out = self._up[source] = self._upstream_socket(source)
                self._pass("up", data, out, self.upstream)
            elif sock in self._client_of:
                assert self._listener is not None
                self._pass("down", data, self._listener, self._client_of[sock])

    def _pass(self, direction: Direction, data: bytes, sock: socket.socket, to: Address) -> None:
        untouched = self.forwarded[direction] + self.dropped[direction] < self.spare
        draw = 1.0 if untouched else self._rng.random()
        if draw < self.drop:
            self.dropped[direction] += 1
            return
        held = self._held.get(direction)
        if held is None and draw < self.drop + self.reorder:
            self._held[direction] = _Held(data, sock, to, time.monotonic())
            self.reordered[direction] += 1
            return
        self._send(direction, data, sock, to)
        if held is not None:  # the held datagram goes after this later one
            del self._held[direction]
            self._send(direction, held.data, held.sock, held.to)

    def _release_stale(self, now: float) -> None:
        for direction, held in list(self._held.items()):
            if now - held.since >= self.hold:
                del self._held[direction]
                self._send(direction, held.data, held.sock, held.to)

    def _send(self, direction: Direction, data: bytes, sock: socket.socket, to: Address) -> None:
        try:
            sock.sendto(data, to)
        except OSError:
            self.dropped[direction] += 1  # buffer full or socket closed: lost like any other
            return
        self.forwarded[direction] += 1
