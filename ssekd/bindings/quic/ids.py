"""What ssekd changes in aioquic's server connection: whose connection ids it makes, and which
key it shows a client.

Connection ids. Workers share a QUIC port: each has its own socket in one SO_REUSEPORT group,
and the kernel picks the socket for each datagram by the first byte of its destination
connection id modulo the worker count (`ssekd.workers.sockets.steering_program`). So every id a
worker hands out, the first it answers with and the spares it issues for migration, has a first
byte that lands on its own socket (`Shard`). aioquic draws them with `os.urandom` in two places
(the connection's constructor and `_replenish_connection_ids`); `SteeredConnection` redraws the
first and overrides the other. Both names are aioquic's internals, pinned with the version in
the constraints and checked by the tests of this package.

Keys by server name. aioquic's TLS takes one certificate per configuration, chosen before the
client's hello is read. `SteeredConnection` swaps its TLS context's class for `_NamedKeys`,
which reads the server name from the hello first and serves the key whose certificate names it
(as the tls binding does), else the first key.

A full packet. For each packet it builds, aioquic offers the packet to every stream that has
data waiting, full or not; a fan-out batch to a hundred streams of one connection fills about
a dozen packets, so most of those offers find no room, and each costs the frame's header
computed first (an eighth to a quarter of the daemon's CPU per delivery in bench/h3.py, at
1,000 streams over 10 connections). `_write_stream_frame` returns at once when fewer bytes are
left than any stream frame's header takes, which aioquic finds out only after computing it:
the same frames, in the same packets.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aioquic import tls
from aioquic.buffer import Buffer  # type: ignore[attr-defined]
from aioquic.quic.connection import QuicConnection, QuicConnectionId
from aioquic.quic.packet_builder import QuicPacketBuilder
from aioquic.quic.recovery import QuicPacketSpace
from aioquic.quic.stream import QuicStream

#: The smallest STREAM frame header aioquic writes: type (1 byte), stream id (at least 1), a
#: 2-byte length; the offset is left out at offset 0. A packet with less room left takes no
#: stream frame, not even a FIN alone.
SMALLEST_STREAM_FRAME_HEADER = 4


@dataclass(frozen=True)
class Shard:
    """Which connection ids reach this process: those whose first byte modulo `count` is
    `index` (one process: every id)."""

    index: int = 0
    count: int = 1

    def new_id(self, length: int) -> bytes:
        cid = bytearray(os.urandom(length))
        if self.count > 1:
            # the highest multiple of `count` below 256 keeps the byte's other bits uniform
            top = 256 - 256 % self.count
            cid[0] = (cid[0] % (top // self.count)) * self.count + self.index
        return bytes(cid)

    def owns(self, cid: bytes) -> bool:
        return self.count == 1 or (bool(cid) and cid[0] % self.count == self.index)


#: Picks the key for a server name (None: the client sent none): certificate, chain, key.
KeyChooser = Callable[[str | None], tuple[Any, list[Any], Any]]


class _NamedKeys(tls.Context):
    """aioquic's TLS server context, serving the key the client's server name asks for."""

    choose: KeyChooser
    #: The server name the client sent (None: none), for routing and events.
    requested: str | None = None

    def _server_handle_hello(self, input_buf: Buffer, initial_buf: Buffer,
                             handshake_buf: Buffer) -> None:
        start = input_buf.tell()
        hello = tls.pull_client_hello(input_buf)
        input_buf.seek(start)
        self.requested = hello.server_name.lower() if hello.server_name else None
        self.certificate, self.certificate_chain, self.certificate_private_key = \
            self.choose(self.requested)
        super()._server_handle_hello(input_buf, initial_buf, handshake_buf)


class SteeredConnection(QuicConnection):
    """A server-side `QuicConnection` with this process's connection ids and keys chosen by
    server name (module docstring)."""

    def __init__(self, *, shard: Shard, choose: KeyChooser, streams: int,
                 **kwargs: Any) -> None:
        self._shard = shard
        self._choose = choose
        super().__init__(**kwargs)
        first: QuicConnectionId = self._host_cids[0]
        first.cid = shard.new_id(len(first.cid))
        self.host_cid = first.cid
        self._local_initial_source_connection_id = first.cid
        # QUIC's stream credit: at most `streams` request streams open at once (aioquic hands
        # one more credit back as each closes)
        credit = self._local_max_streams_bidi
        credit.value = credit.sent = streams  # `sent`: what the handshake announces

    def _initialize(self, peer_cid: bytes) -> None:
        super()._initialize(peer_cid)
        context: Any = self.tls
        context.__class__ = _NamedKeys
        context.choose = self._choose

    @property
    def server_name(self) -> str | None:
        """The server name the client asked for (None before its hello, or without one)."""
        return getattr(getattr(self, "tls", None), "requested", None)

    def _replenish_connection_ids(self) -> None:
        """aioquic's, with ids of this process (module docstring)."""
        length = self._configuration.connection_id_length
        while len(self._host_cids) < min(8, self._remote_active_connection_id_limit):
            self._host_cids.append(QuicConnectionId(
                cid=self._shard.new_id(length), sequence_number=self._host_cid_seq,
                stateless_reset_token=os.urandom(16)))
            self._host_cid_seq += 1

    def _write_stream_frame(self, builder: QuicPacketBuilder, space: QuicPacketSpace,
                            stream: QuicStream, max_offset: int) -> int:
        """aioquic's, skipped when the packet has no room for a frame (module docstring)."""
        if builder.remaining_flight_space < SMALLEST_STREAM_FRAME_HEADER:
            return 0
        written: int = super()._write_stream_frame(builder, space, stream, max_offset)
        return written
