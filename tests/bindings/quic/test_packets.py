"""The quic server's connection offers a full packet to no more streams
(`ssekd.bindings.quic.ids`, "A full packet"): the same packets as aioquic's own method makes,
every byte delivered.

A server connection and aioquic's client talk in memory, on a clock the test moves; the same
fan-out (a write to each of 100 streams, several rounds) goes through `SteeredConnection` and
through the same class with aioquic's own `_write_stream_frame`, and what each sends is
compared.
"""

from __future__ import annotations

import ssl
from typing import Any

from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.connection import QuicConnection
from aioquic.quic.events import StreamDataReceived

from ssekd.bindings.quic.ids import Shard, SteeredConnection
from tests.bindings.quic.wire import START, keys

CLIENT = ("127.0.0.1", 40000)
SERVER = ("127.0.0.1", 4433)
STREAMS = 100
ROUNDS = 5
#: aioquic's datagram size (QUIC's smallest maximum), which a full packet fills.
FULL = 1200
EVENT = b"id:x\ndata:" + b"y" * 140 + b"\n\n"


class Unskipped(SteeredConnection):
    """`SteeredConnection` with aioquic's `_write_stream_frame`: all else the same."""

    _write_stream_frame = QuicConnection._write_stream_frame


class Link:
    """A client and a server connection, and a clock: datagrams move when `settle` says."""

    def __init__(self, steered: bool) -> None:
        self.now = START
        client_config = QuicConfiguration(is_client=True, alpn_protocols=["h3"],
                                          server_name="localhost", max_data=1 << 30,
                                          max_stream_data=1 << 26)
        client_config.verify_mode = ssl.CERT_NONE
        self.client = QuicConnection(configuration=client_config)
        server_config = QuicConfiguration(is_client=False, alpn_protocols=["h3"])
        chosen = keys()
        server_config.certificate, _, server_config.private_key = chosen.choose(None)
        odcid = self.client.original_destination_connection_id
        self.server = (SteeredConnection if steered else Unskipped)(
            shard=Shard(), choose=chosen.choose,
            streams=STREAMS, configuration=server_config,
            original_destination_connection_id=odcid)
        self.received: dict[int, bytes] = {}
        #: The size of every datagram the server sent, in order.
        self.sent: list[int] = []
        self.client.connect(SERVER, now=self.now)
        self.settle()
        self.ids = []
        for _ in range(STREAMS):
            stream_id = self.client.get_next_available_stream_id()
            self.client.send_stream_data(stream_id, b"GET", end_stream=True)
            self.ids.append(stream_id)
        self.settle()

    def _timers(self) -> bool:
        fired = False
        for conn in (self.client, self.server):
            at = conn.get_timer()
            if at is not None and at <= self.now:
                conn.handle_timer(self.now)
                fired = True
        return fired

    def deliver(self, datagrams: list[tuple[bytes, Any]]) -> None:
        for data, _ in datagrams:
            self.sent.append(len(data))
            self.client.receive_datagram(data, SERVER, self.now)
        while (event := self.client.next_event()) is not None:
            if isinstance(event, StreamDataReceived):
                self.received[event.stream_id] = self.received.get(event.stream_id, b"") \
                    + event.data

    def settle(self) -> None:
        """Exchange datagrams, firing timers (ACK delays) as the clock moves, until quiet."""
        for _ in range(200):
            self.now += 0.001
            moved = self._timers()
            for data, _ in self.client.datagrams_to_send(self.now):
                self.server.receive_datagram(data, CLIENT, self.now)
                moved = True
            out = self.server.datagrams_to_send(self.now)
            self.deliver(out)
            while self.server.next_event() is not None:
                pass
            if not (moved or out):
                self.now += 0.03
                if not self._timers():
                    return
        raise AssertionError("the connections never went quiet")

    def fan_out(self) -> list[int]:
        """A write to every stream, sent (paced as aioquic paces it) and acknowledged: the
        sizes of the datagrams the server sent meanwhile."""
        start = len(self.sent)
        for stream_id in self.ids:
            self.server.send_stream_data(stream_id, EVENT)
        self.settle()
        return self.sent[start:]


def test_a_fan_out_batch_goes_in_the_same_packets_as_aioquic_puts_it() -> None:
    steered, plain = Link(steered=True), Link(steered=False)
    for _ in range(ROUNDS):
        sizes, plain_sizes = steered.fan_out(), plain.fan_out()
        # as many datagrams, each full but the batch's last (aioquic's own sizes vary by a
        # byte or two from run to run: its acknowledgements' encoding)
        assert len(sizes) == len(plain_sizes)
        assert sizes[:-1] == [FULL] * (len(sizes) - 1)
        assert plain_sizes[:-1] == [FULL] * (len(sizes) - 1)
        # a batch to 100 streams fills a dozen packets: the case the shortcut is for
        assert len(sizes) >= 10
    assert steered.received == plain.received
    assert steered.received == {i: EVENT * ROUNDS for i in steered.ids}


def test_the_shortcut_spares_the_offers_to_a_full_packet() -> None:
    """Most offers of a full packet to a stream end before aioquic's own method runs."""
    link = Link(steered=True)
    calls = {"offered": 0, "aioquic": 0}
    server: Any = link.server
    own = SteeredConnection._write_stream_frame
    base = QuicConnection._write_stream_frame

    def offered(**frame: Any) -> int:
        calls["offered"] += 1
        return own(server, **frame)

    def aioquic(self: Any, *args: Any, **frame: Any) -> int:
        calls["aioquic"] += 1
        return base(self, *args, **frame)

    server._write_stream_frame = offered
    QuicConnection._write_stream_frame = aioquic  # type: ignore[method-assign]
    try:
        link.fan_out()
    finally:
        QuicConnection._write_stream_frame = base  # type: ignore[method-assign]
    assert calls["aioquic"] < calls["offered"] / 2, calls
