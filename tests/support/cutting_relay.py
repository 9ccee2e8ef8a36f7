"""A TCP relay in front of a daemon that can lose an answer: the request goes through and is
handled, then the connection is reset before any byte of the answer reaches the client. That is
the failure an idempotency key exists for (the client cannot tell whether it was written), made
on real sockets: the client sees a network error, the daemon did the write."""

from __future__ import annotations

import socket
import struct
import threading
from dataclasses import dataclass, field

from ssekd.dev.broker import free_port


@dataclass
class _Pair:
    client: socket.socket
    upstream: socket.socket
    doomed: bool = False


@dataclass
class CuttingRelay:
    """Relays 127.0.0.1:`port` to 127.0.0.1:`upstream_port`. `cut(marker)` arms it: the next
    request whose bytes contain `marker` is forwarded, and its answer dropped: that connection and
    every other one open then are reset (`times` such requests)."""

    upstream_port: int
    port: int = field(default_factory=free_port)
    sent: bytearray = field(default_factory=bytearray)  # every byte clients sent, in order
    cuts: int = 0  # answers dropped
    doomed: int = 0  # requests marked to lose their answer (a cut may reset one before it)
    _marker: bytes | None = None
    _left: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _listener: socket.socket | None = None
    _pairs: list[_Pair] = field(default_factory=list)

    def start(self) -> CuttingRelay:
        self._listener = socket.create_server(("127.0.0.1", self.port))
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def cut(self, marker: bytes, times: int = 1) -> None:
        with self._lock:
            self._marker, self._left = marker, times

    def stop(self) -> None:
        if self._listener is not None:
            self._listener.close()
        for pair in self._pairs:
            for s in (pair.client, pair.upstream):
                s.close()

    def _accept(self) -> None:
        assert self._listener is not None
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.upstream_port), 10)
            except OSError:
                client.close()
                continue
            pair = _Pair(client, upstream)
            self._pairs.append(pair)
            threading.Thread(target=self._requests, args=(pair,), daemon=True).start()
            threading.Thread(target=self._answers, args=(pair,), daemon=True).start()

    def _requests(self, pair: _Pair) -> None:
        try:
            while chunk := pair.client.recv(65536):
                with self._lock:
                    self.sent += chunk
                    if self._left and self._marker is not None and self._marker in chunk:
                        self._left -= 1
                        self.doomed += 1
                        pair.doomed = True  # before the daemon can answer it
                pair.upstream.sendall(chunk)
        except OSError:
            pass
        finally:
            _shut(pair.upstream)

    def _answers(self, pair: _Pair) -> None:
        try:
            while chunk := pair.upstream.recv(65536):
                if pair.doomed:
                    with self._lock:
                        self.cuts += 1
                        pairs = list(self._pairs)
                    # The network drops: every connection of the relay is reset, this one
                    # before any byte of its answer, so that none is idle for a client to
                    # send the request on again by itself.
                    for other in pairs:
                        _reset(other)
                    return
                pair.client.sendall(chunk)
        except OSError:
            pass
        finally:
            _shut(pair.client)


def _reset(pair: _Pair) -> None:
    """SO_LINGER 0: the close sends a reset. The shutdown first wakes the thread blocked
    reading the client, which would otherwise hold the socket open."""
    try:
        pair.client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        pair.client.shutdown(socket.SHUT_RD)
    except OSError:
        pass
    pair.client.close()
    pair.upstream.close()


def _shut(s: socket.socket) -> None:
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
