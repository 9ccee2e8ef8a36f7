"""A partition whose leader is unavailable, as Kafka clients see it: the dev broker (tansu, one
node, where no partition ever loses its leader) behind a proxy that reads the Kafka protocol and
rewrites Metadata answers.

For the partitions in `Leaderless.partitions` each Metadata response says what a cluster whose
leader for them is down says: error `LEADER_NOT_AVAILABLE` (5) and leader -1. A client then
fetches nothing of them, and asks for metadata again until the leader is back; emptying the set
brings it back. Everything else passes through unchanged. The broker advertises the proxy's
address, so every connection of every client goes through it (as `tests.support.outage` does).

Only what locating those fields needs is parsed: request headers (api key, version and
correlation id) and Metadata responses, versions 1 to 12, flexible (9+) or not. The rewrite
keeps every length, so the frame is patched in place.
"""

from __future__ import annotations

import socket
import struct
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ssekd.dev.broker import free_port
from tests.support.broker import start_tansu, stop_tansu

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
class Leaderless:
    """Forwards 127.0.0.1:`port` to the broker at `target`, rewriting Metadata answers."""

    target: int
    port: int = field(default_factory=free_port)
    #: (topic, partition) whose leader the proxy says is unavailable.
    partitions: set[tuple[str, int]] = field(default_factory=set)
    #: Metadata responses rewritten so far.
    rewritten: int = 0

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", self.port))
        self._listener.listen(128)
        threading.Thread(target=self._accept, daemon=True).start()

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
            asked: dict[int, int] = {}  # correlation id -> Metadata version, per connection
            threading.Thread(target=self._requests, args=(client, upstream, asked),
                             daemon=True).start()
            threading.Thread(target=self._responses, args=(upstream, client, asked),
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
                  asked: dict[int, int]) -> None:
        try:
            for frame in self._frames(source):
                key, version, correlation = struct.unpack_from(">hhi", frame, 4)
                if key == METADATA:
                    asked[correlation] = version
                sink.sendall(frame)
        except OSError:
            pass
        finally:
            self._close(source, sink)

    def _responses(self, source: socket.socket, sink: socket.socket,
                   asked: dict[int, int]) -> None:
        try:
            for frame in self._frames(source):
                (correlation,) = struct.unpack_from(">i", frame, 4)
                version = asked.pop(correlation, None)
                if version is not None and self.partitions:
                    patched = bytearray(frame)
                    for error_at, leader_at in leaderless_fields(frame[4:], version,
                                                                  set(self.partitions)):
                        struct.pack_into(">h", patched, 4 + error_at, LEADER_NOT_AVAILABLE)
                        struct.pack_into(">i", patched, 4 + leader_at, -1)
                        self.rewritten += 1
                    frame = bytes(patched)
                sink.sendall(frame)
        except OSError:
            pass
        finally:
            self._close(source, sink)

    def _close(self, *sockets: socket.socket) -> None:
        for s in sockets:
            with self._lock:
                self._sockets.discard(s)
            try:
                s.close()
            except OSError:
                pass


@dataclass
class LeaderlessBroker:
    """A tansu its clients reach only through `proxy` (its advertised address)."""

    process: subprocess.Popen[bytes]
    proxy: Leaderless

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.proxy.port}"

    def stop(self) -> None:
        self.proxy.close()
        stop_tansu(self.process)


def start_leaderless_broker(folder: Path) -> LeaderlessBroker:
    port = free_port()
    proxy = Leaderless(port)
    process, _ = start_tansu(folder, port, proxy.port)
    return LeaderlessBroker(process, proxy)
