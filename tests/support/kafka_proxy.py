"""The dev broker (tansu, one node) behind a proxy that reads the Kafka protocol, to show its
clients what tansu never does by itself. The broker advertises the proxy's address, so every
connection of every client goes through it (as `tests.support.outage` does).

- `Leaderless`: a partition whose leader is unavailable. For the partitions in
  `Leaderless.partitions` each Metadata response says what a cluster whose leader for them is
  down says: error `LEADER_NOT_AVAILABLE` (5) and leader -1. A client then fetches nothing of
  them, and asks for metadata again until the leader is back; emptying the set brings it back.
- `WedgedFetches`: a fetch path that stops for the connections open at `wedge()`: their Fetch
  responses are dropped, every other answer still comes.

Only what that needs is parsed: request headers (api key, version and correlation id) and
Metadata responses, versions 1 to 12, flexible (9+) or not. The rewrite keeps every length, so
the frame is patched in place.
"""

from __future__ import annotations

import socket
import struct
import subprocess
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, TypeVar

from ssekd.dev.broker import free_port
from tests.support.broker import start_tansu, stop_tansu
from tests.support.outage import forget_and_close

FETCH = 1
METADATA = 3
LEADER_NOT_AVAILABLE = 5


class _Reader:
    """Walks a response body, noting where the fields to patch are."""

    def __init__(self, data: bytes, at: int) -> None:
        self.data = data
        self.at = at

    def skip(self, n: int) -> None:
        self.at += n

    def int16(self) -> int:
        (v,) = struct.unpack_from(">h", self.data, self.at)
        self.at += 2
        return int(v)

    def int32(self) -> int:
        (v,) = struct.unpack_from(">i", self.data, self.at)
        self.at += 4
        return int(v)

    def uvarint(self) -> int:
        shift = value = 0
        while True:
            b = self.data[self.at]
            self.at += 1
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7

    def string(self, flexible: bool) -> str | None:
        if flexible:
            n = self.uvarint() - 1
        else:
            n = self.int16()
        if n < 0:
            return None
        text = self.data[self.at:self.at + n].decode("utf-8")
        self.at += n
        return text

    def count(self, flexible: bool) -> int:
        return self.uvarint() - 1 if flexible else self.int32()

    def tags(self, flexible: bool) -> None:
        if not flexible:
            return
        for _ in range(self.uvarint()):
            self.uvarint()
            self.skip(self.uvarint())


def leaderless_fields(body: bytes, version: int, partitions: set[tuple[str, int]]
                      ) -> list[tuple[int, int]]:
    """(error code offset, leader id offset) in a Metadata response `body` (after the size) for
    each partition of `partitions` it lists."""
    flexible = version >= 9
    r = _Reader(body, 4)  # the correlation id
    r.tags(flexible)  # the response header's, from v9 on
    if version >= 3:
        r.skip(4)  # throttle_time_ms
    for _ in range(r.count(flexible)):  # brokers
        r.skip(4)
        r.string(flexible)
        r.skip(4)
        if version >= 1:
            r.string(flexible)  # rack
        r.tags(flexible)
    if version >= 2:
        r.string(flexible)  # cluster id
    if version >= 1:
        r.skip(4)  # controller id
    found = []
    for _ in range(r.count(flexible)):  # topics
        r.skip(2)
        name = r.string(flexible)
        if version >= 10:
            r.skip(16)  # topic id
        if version >= 1:
            r.skip(1)  # is_internal
        for _ in range(r.count(flexible)):
            error_at = r.at
            r.skip(2)
            index = r.int32()
            leader_at = r.at
            r.skip(4)
            if version >= 7:
                r.skip(4)  # leader epoch
            for _ in range(3 if version >= 5 else 2):  # replicas, isr, offline replicas
                r.skip(4 * r.count(flexible))
            r.tags(flexible)
            if (name, index) in partitions:
                found.append((error_at, leader_at))
        if version >= 8:
            r.skip(4)  # topic authorized operations
        r.tags(flexible)
    return found


@dataclass
class _Connection:
    """One client connection through a `KafkaProxy`."""

    #: In the order the proxy accepted them.
    serial: int
    #: correlation id -> (api key, version) of the requests not answered yet
    asked: dict[int, tuple[int, int]] = field(default_factory=dict)


@dataclass
class KafkaProxy:
    """Forwards 127.0.0.1:`port` to the broker at `target` frame by frame, each response beside
    the request it answers: `response` may rewrite or drop it (subclasses say how)."""

    target: int
    port: int = field(default_factory=free_port)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._serial = 0
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", self.port))
        self._listener.listen(128)
        threading.Thread(target=self._accept, daemon=True).start()

    def response(self, connection: _Connection, key: int, version: int,
                 frame: bytes) -> bytes | None:
        """The frame to send the client for a response to request `key` (None: nothing)."""
        return frame

    def close(self) -> None:
        self._listener.close()
        with self._lock:
            sockets, self._sockets = self._sockets, set()
        for s in sockets:
            try:
                s.close()
            except OSError:
                pass

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
                upstream = socket.create_connection(("127.0.0.1", self.target), timeout=5)
            except OSError:
                return
            upstream.settimeout(None)
            with self._lock:
                self._sockets.update((client, upstream))
                self._serial += 1
                connection = _Connection(self._serial)
            threading.Thread(target=self._requests, args=(client, upstream, connection),
                             daemon=True).start()
            threading.Thread(target=self._responses, args=(upstream, client, connection),
                             daemon=True).start()

    def _frames(self, source: socket.socket) -> Iterator[bytes]:
        buf = b""
        while True:
            while len(buf) < 4 or len(buf) < 4 + struct.unpack_from(">i", buf)[0]:
                data = source.recv(65536)
                if not data:
                    return
                buf += data
            size = struct.unpack_from(">i", buf)[0]
            frame, buf = buf[:4 + size], buf[4 + size:]
            yield frame

    def _requests(self, source: socket.socket, sink: socket.socket,
                  connection: _Connection) -> None:
        try:
            for frame in self._frames(source):
                key, version, correlation = struct.unpack_from(">hhi", frame, 4)
                connection.asked[correlation] = (key, version)
                sink.sendall(frame)
        except OSError:
            pass
        finally:
            self._close(source, sink)

    def _responses(self, source: socket.socket, sink: socket.socket,
                   connection: _Connection) -> None:
        try:
            for frame in self._frames(source):
                (correlation,) = struct.unpack_from(">i", frame, 4)
                key, version = connection.asked.pop(correlation, (-1, -1))
                out = self.response(connection, key, version, frame)
                if out is not None:
                    sink.sendall(out)
        except OSError:
            pass
        finally:
            self._close(source, sink)

    def _close(self, *sockets: socket.socket) -> None:
        forget_and_close(self._lock, self._sockets, *sockets)


@dataclass
class Leaderless(KafkaProxy):
    """A `KafkaProxy` rewriting Metadata answers."""

    #: (topic, partition) whose leader the proxy says is unavailable.
    partitions: set[tuple[str, int]] = field(default_factory=set)
    #: Metadata responses rewritten so far.
    rewritten: int = 0

    def response(self, connection: _Connection, key: int, version: int,
                 frame: bytes) -> bytes | None:
        if key != METADATA or not self.partitions:
            return frame
        patched = bytearray(frame)
        for error_at, leader_at in leaderless_fields(frame[4:], version, set(self.partitions)):
            struct.pack_into(">h", patched, 4 + error_at, LEADER_NOT_AVAILABLE)
            struct.pack_into(">i", patched, 4 + leader_at, -1)
            self.rewritten += 1
        return bytes(patched)


@dataclass
class WedgedFetches(KafkaProxy):
    """A `KafkaProxy` that can wedge the fetches of the connections open now: from `wedge()` on,
    their Fetch responses are dropped while every other answer (metadata, offsets) still comes,
    and connections opened later work. What a consumer sees of a broker whose fetch path stopped
    for one connection: it stays connected, nothing fails, and no record comes."""

    #: Fetch responses dropped so far.
    dropped: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        self._wedged_up_to = 0

    def wedge(self) -> None:
        with self._lock:
            self._wedged_up_to = self._serial

    def response(self, connection: _Connection, key: int, version: int,
                 frame: bytes) -> bytes | None:
        if key == FETCH and connection.serial <= self._wedged_up_to:
            self.dropped += 1
            return None
        return frame


P = TypeVar("P", bound=KafkaProxy)


@dataclass
class ProxiedBroker(Generic[P]):
    """A tansu its clients reach only through `proxy` (its advertised address)."""

    process: subprocess.Popen[bytes]
    proxy: P

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.proxy.port}"

    def stop(self) -> None:
        self.proxy.close()
        stop_tansu(self.process)


def start_proxied_broker(folder: Path, proxy: Callable[[int], P]) -> ProxiedBroker[P]:
    """A tansu behind `proxy(its port)`: `start_proxied_broker(tmp_path, Leaderless)`."""
    port = free_port()
    front = proxy(port)
    process, _ = start_tansu(folder, port, front.port)
    return ProxiedBroker(process, front)
