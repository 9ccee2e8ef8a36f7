"""The HTTP/2 send loop (`ssekd.bindings.http.h2_sending`) on a clock: batching, flow control, backpressure.

A real `h2` client connection talks to `BatchingH2Connection` over a `StringTransport`; nothing
is sent until the clock turns, as in the reactor, so each test sees exactly what one turn writes.
"""

from __future__ import annotations

from typing import Any

import h2.config
import h2.connection
import h2.events
import h2.settings
from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET, Request, Site

from ssekd.bindings.http.channel import Limits
from ssekd.bindings.http.cors import AccessControl
from ssekd.bindings.http.h2_sending import BatchingH2Connection
from ssekd.bindings.http.h2c import PREFACE, h2_connection
from ssekd.bindings.http.server import HttpRoot, HttpSite
from ssekd.telemetry.events import EventLog
from tests.support.http_fakes import CountingProducer


class CountingTransport(StringTransport):
    """Counts `write` calls: the point of the send loop is one write per turn."""

    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def write(self, data: bytes) -> None:
        self.writes += 1
        super().write(data)


class Held(Resource):
    """Keeps every request open and hands it to the test, which writes to it."""

    isLeaf = True

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[Request] = []

    def render_GET(self, request: Request) -> Any:
        self.requests.append(request)
        return NOT_DONE_YET


class Peer:
    """The client side: an `h2` connection whose bytes go straight into the server."""

    def __init__(self, initial_window: int | None = None, *, streams: int = 2) -> None:
        self.clock = MemoryReactorClock()
        self.resource = Held()
        self.site = Site(self.resource, reactor=self.clock)
        self.server: BatchingH2Connection = h2_connection(self.site)
        self.transport = CountingTransport()
        self.server.makeConnection(self.transport)
        self.client = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
        self.client.initiate_connection()
        if initial_window is not None:
            self.client.update_settings(
                {h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: initial_window})
        self.ids: list[int] = []
        self.turn_writes = 0
        for _ in range(streams):
            stream_id = self.client.get_next_available_stream_id()
            self.client.send_headers(stream_id, [(":method", "GET"), (":scheme", "https"),
                                                 (":authority", "localhost"), (":path", "/")],
                                     end_stream=True)
            self.ids.append(stream_id)
        self.send()
        self.read()  # the server's SETTINGS and its ack
        self.send()  # our ack of its SETTINGS
        # Twisted's first scheduled send and the response headers are not what we test
        self.clock.advance(0)
        self.writes_before = self.transport.writes
        self.transport.clear()
        assert len(self.requests) == streams

    @property
    def requests(self) -> list[Request]:
        return self.resource.requests

    def due_now(self) -> list[Any]:
        """Calls scheduled for this instant (a send turn), not the timeouts further away."""
        return [c for c in self.clock.getDelayedCalls() if c.getTime() <= self.clock.seconds()]

    def send(self) -> None:
        data = self.client.data_to_send()
        if data:
            self.server.dataReceived(data)

    def read(self) -> list[h2.events.Event]:
        """Feed what the server wrote to the client; return its events."""
        data = self.transport.value()
        self.transport.clear()
        return list(self.client.receive_data(data)) if data else []

    def turn(self) -> list[h2.events.DataReceived]:
        """One reactor turn; the DATA the client then receives, in order.

        Like the reactor (and unlike `Clock.advance`), a call scheduled during the turn waits
        for the next one: that is how the send loop yields when its budget is spent.
        """
        self.transport.writes = 0
        for call in self.due_now():
            if call.active():
                self.clock.calls.remove(call)
                call.called = 1
                call.func(*call.args, **call.kw)
        self.turn_writes = self.transport.writes
        return [e for e in self.read() if isinstance(e, h2.events.DataReceived)]

    def start_responses(self) -> None:
        """Make every request send its headers now, so only DATA is left to look at."""
        for request in self.requests:
            request.setHeader(b"content-type", b"text/event-stream")
            request.write(b"")
        self.read()


def received(events: list[h2.events.DataReceived]) -> dict[int, bytes]:
    out: dict[int, bytes] = {}
    for e in events:
        out[e.stream_id] = out.get(e.stream_id, b"") + (e.data or b"")
    return out


def test_all_streams_written_in_one_turn_go_out_in_one_write() -> None:
    peer = Peer(streams=50)
    peer.start_responses()
    for n, request in enumerate(peer.requests):
        request.write(b"data: %d\n\n" % n)
    assert peer.transport.value() == b""  # nothing before the turn ends
    events = peer.turn()
    assert peer.turn_writes == 1
    assert received(events) == {sid: b"data: %d\n\n" % n for n, sid in enumerate(peer.ids)}


def test_one_write_per_turn() -> None:
    peer = Peer(streams=20)
    peer.start_responses()
    for request in peer.requests:
        request.write(b"a")
        request.write(b"b")  # two writes to one stream: one frame
    peer.transport.writes = 0
    peer.clock.advance(0)
    assert peer.transport.writes == 1
    events = [e for e in peer.read() if isinstance(e, h2.events.DataReceived)]
    assert len(events) == 20 and all(e.data == b"ab" for e in events)
    assert not peer.due_now()  # nothing left: no further turn scheduled


def test_budget_spreads_a_burst_over_turns_fairly() -> None:
    peer = Peer(initial_window=1 << 20, streams=4)
    peer.client.increment_flow_control_window(1 << 20)
    peer.send()
    peer.start_responses()
    peer.server.send_budget = 20000
    for request in peer.requests:
        request.write(b"x" * 20000)  # a full 16 KiB frame, then 3616 bytes
    a, b, c, d = peer.ids
    first = peer.turn()
    assert peer.turn_writes == 1
    assert [(e.stream_id, len(e.data)) for e in first] == [(a, 16384), (b, 16384)]
    second = peer.turn()  # the budget was spent: the rest waited for this turn
    assert [(e.stream_id, len(e.data)) for e in second] == [(c, 16384), (d, 16384)]
    third = peer.turn()  # round-robin: everyone's second frame, in the same order
    assert [(e.stream_id, len(e.data)) for e in third] == [(s, 3616) for s in (a, b, c, d)]
    assert peer.turn() == [] and not peer.due_now()


def test_a_large_response_does_not_hold_up_a_small_one() -> None:
    peer = Peer(initial_window=1 << 20, streams=2)
    peer.client.increment_flow_control_window(1 << 20)
    peer.send()
    peer.start_responses()
    big, small = peer.requests
    big.write(b"b" * 60000)  # four frames of at most 16 KiB
    small.write(b"s" * 10)
    order = [e.stream_id for e in peer.turn()]
    assert order[:2] == peer.ids  # the small stream's frame is second, not fifth
    assert order.count(peer.ids[0]) == 4


def test_exhausted_stream_window_waits_while_others_proceed() -> None:
    peer = Peer(initial_window=100, streams=2)
    peer.start_responses()
    slow, other = peer.requests
    producer = CountingProducer()
    slow.registerProducer(producer, True)
    slow.write(b"s" * 300)
    assert producer.paused  # what is queued exceeds the window
    other.write(b"o" * 50)
    got = received(peer.turn())
    assert got == {peer.ids[0]: b"s" * 100, peer.ids[1]: b"o" * 50}
    other.write(b"p" * 50)
    got = received(peer.turn())
    assert got == {peer.ids[1]: b"p" * 50}  # the blocked stream is not in the way
    assert peer.server.remainingOutboundWindow(peer.ids[0]) < 0
    # the client reads and opens the slow stream's window
    peer.client.increment_flow_control_window(400, stream_id=peer.ids[0])
    peer.send()
    got = received(peer.turn())
    assert got == {peer.ids[0]: b"s" * 200}
    assert not producer.paused and producer.resumes == 1


def test_exhausted_connection_window_stops_all_until_window_update() -> None:
    peer = Peer(initial_window=1 << 20, streams=2)  # big stream windows, 65535 for the conn
    peer.start_responses()
    for request in peer.requests:
        request.write(b"z" * 40000)
    first = received(peer.turn())
    assert sum(len(v) for v in first.values()) == 65535
    assert peer.turn() == []  # nothing more, and no busy loop
    assert not peer.due_now()
    peer.client.increment_flow_control_window(1 << 20)
    peer.send()
    second = received(peer.turn())
    assert sum(len(v) for v in second.values()) == 80000 - 65535


def test_settings_opening_the_window_unblocks_streams() -> None:
    peer = Peer(initial_window=10, streams=1)
    peer.start_responses()
    peer.requests[0].write(b"q" * 30)
    assert received(peer.turn()) == {peer.ids[0]: b"q" * 10}
    peer.client.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 1000})
    peer.send()
    assert received(peer.turn()) == {peer.ids[0]: b"q" * 20}


def test_paused_transport_stops_sending_until_resumed() -> None:
    peer = Peer(streams=3)
    peer.start_responses()
    peer.server.pauseProducing()  # the transport's buffer is full
    for request in peer.requests:
        request.write(b"held")
    assert peer.turn() == [] and peer.turn_writes == 0
    peer.server.resumeProducing()
    assert received(peer.turn()) == dict.fromkeys(peer.ids, b"held")


def test_stream_producer_paused_by_its_buffer_and_resumed_when_drained() -> None:
    """A client with huge windows that does not read: the transport pauses, the queue fills to
    the buffer limit and the stream's producer stops, so memory stays bounded."""
    peer = Peer(initial_window=1 << 30, streams=2)
    peer.start_responses()
    peer.server.stream_buffer_limit = 1000
    producers = [CountingProducer(), CountingProducer()]
    for request, producer in zip(peer.requests, producers, strict=True):
        request.registerProducer(producer, True)
    peer.server.pauseProducing()
    peer.requests[0].write(b"e" * 600)
    assert not producers[0].paused
    peer.requests[0].write(b"e" * 600)
    assert producers[0].paused and not producers[1].paused
    peer.server.resumeProducing()
    got = received(peer.turn())
    assert got == {peer.ids[0]: b"e" * 1200}
    assert not producers[0].paused and producers[0].resumes == 1


def test_finish_ends_the_stream_with_its_last_frame_and_forgets_it() -> None:
    peer = Peer(streams=2)
    peer.start_responses()
    peer.requests[0].write(b"last")
    peer.requests[0].finish()
    peer.transport.writes = 0
    peer.clock.advance(0)
    events = peer.read()
    data = [e for e in events if isinstance(e, h2.events.DataReceived)]
    assert [e.data for e in data] == [b"last"]
    assert any(isinstance(e, h2.events.StreamEnded) and e.stream_id == peer.ids[0]
               for e in events)
    assert peer.ids[0] not in peer.server.streams
    assert peer.ids[0] not in peer.server._queued


def test_reset_stream_drops_its_queue_and_others_go_on() -> None:
    peer = Peer(streams=2)
    peer.start_responses()
    gone, kept = peer.requests
    lost: list[Any] = []
    gone.notifyFinish().addErrback(lost.append)
    gone.write(b"never")
    kept.write(b"kept")
    peer.client.reset_stream(peer.ids[0])
    peer.send()
    assert lost and peer.ids[0] not in peer.server.streams
    assert received(peer.turn()) == {peer.ids[1]: b"kept"}


def test_client_goaway_closes_and_stops_the_loop() -> None:
    peer = Peer(streams=1)
    peer.start_responses()
    peer.requests[0].write(b"pending")
    peer.client.close_connection()
    peer.send()
    assert peer.transport.disconnecting
    peer.clock.advance(0)
    assert peer.server.streams == {}
    assert not peer.due_now()


def test_sending_counts_as_activity_for_the_idle_timeout() -> None:
    peer = Peer(streams=1)
    peer.start_responses()
    timeout = peer.site.timeOut
    assert timeout
    for _ in range(3):
        peer.clock.advance(timeout * 0.6)
        peer.requests[0].write(b":\n\n")
        peer.turn()
    assert not peer.transport.disconnecting
    peer.clock.advance(timeout)
    assert peer.transport.disconnecting  # idle: GOAWAY and close


class AlpnTransport(StringTransport):
    """A TLS transport after the handshake, as far as the channel can tell."""

    negotiatedProtocol = b"h2"


def test_the_http_binding_site_switches_to_batching_h2_after_alpn() -> None:
    clock = MemoryReactorClock()
    site = HttpSite(HttpRoot("http0", [], None, AccessControl(), EventLog("test")), Limits(),
                    clock)
    proto: Any = site.buildProtocol(None)
    transport = AlpnTransport()
    proto.makeConnection(transport)
    proto.dataReceived(PREFACE + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00")  # empty SETTINGS
    h2conn = proto._channel
    assert isinstance(h2conn, BatchingH2Connection)
    assert h2conn._reactor is clock and h2conn.timeOut == Limits().idle_timeout
    assert transport.producer is h2conn  # the transport's backpressure reaches HTTP/2
    assert transport.value()[3:4] == b"\x04"  # our SETTINGS went out
