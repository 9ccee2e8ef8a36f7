"""What a client that does not read may make the daemon hold (`ssekd.bindings.http.unsent`), on a
clock: an HTTP/2 connection's bound (`limits.h2-unsent-bytes`), the process's
(`limits.process-unsent-bytes`, HTTP/2 and HTTP/1.1), and the close of an HTTP/2 connection that
sends nothing while data waits, however much its client pings.

The HTTP/2 client is an `h2` connection fed straight into the http binding's own connection
(`H2Peer`); its window is shut by SETTINGS_INITIAL_WINDOW_SIZE 0, as the audit's client did.
"""

from __future__ import annotations

from typing import Any

import h2.errors
import h2.events
import h2.settings
from twisted.internet.address import IPv4Address
from twisted.internet.interfaces import IPushProducer
from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.web.server import NOT_DONE_YET, Request
from zope.interface import implementer

from ssekd.bindings.http.channel import Limits
from ssekd.bindings.http.roles import HttpContext
from ssekd.bindings.http.unsent import RETRY_AFTER, UnsentBytes
from tests.support.http_fakes import H2Peer, http_site

#: The size of the audit's answer (a `fetch` with `merge` of about a megabyte of values).
ANSWER = 900_000


class Whole:
    """An exit that answers every GET with `size` bytes written whole, as `Exchange.answer`
    does; `parts` > 1: in that many writes without a `Content-Length`."""

    max_idle: float | None = None
    takes_body = False

    def __init__(self, size: int = ANSWER, parts: int = 1) -> None:
        self.size = size
        self.parts = parts
        self.requests: list[Any] = []

    def render(self, request: Request, ctx: HttpContext) -> Any:
        self.requests.append(request)
        if self.parts == 1:
            return b"a" * self.size  # Twisted announces its length
        req: Any = request
        for _ in range(self.parts):
            req.write(b"p" * (self.size // self.parts))
        req.finish()
        return NOT_DONE_YET


@implementer(IPushProducer)
class Producer:
    """A streaming response's producer (as `SseStream` is)."""

    def __init__(self) -> None:
        self.paused = False
        self.resumes = 0

    def pauseProducing(self) -> None:
        self.paused = True

    def resumeProducing(self) -> None:
        self.paused = False
        self.resumes += 1

    def stopProducing(self) -> None:
        pass


class Streaming:
    """An exit that keeps each GET open with a producer and hands it to the test."""

    max_idle: float | None = None
    takes_body = False

    def __init__(self) -> None:
        self.held: list[tuple[Any, Producer]] = []

    def render(self, request: Request, ctx: HttpContext) -> Any:
        req: Any = request
        producer = Producer()
        req.registerProducer(producer, True)
        req.setHeader(b"content-type", b"text/event-stream")
        self.held.append((req, producer))
        return NOT_DONE_YET


def zero_window_peer(exit: Any, count: UnsentBytes, **limits: Any) -> H2Peer:
    """An HTTP/2 client that never opens its streams' windows, on a connection counting the
    process's bytes in `count` (the test's own, not the process's)."""
    peer = H2Peer(http_site(MemoryReactorClock(), exit, Limits(**limits)))
    peer.server.whole = count
    peer.client.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 0})
    peer.send()
    peer.read()
    return peer


def get(peer: H2Peer, n: int = 1) -> list[int]:
    ids = [peer.request("GET", "/") for _ in range(n)]
    peer.send()
    peer.read()
    return ids


def headers(peer: H2Peer, stream_id: int) -> dict[str, str]:
    for event in peer.of(h2.events.ResponseReceived, stream_id):
        return {str(k): str(v) for k, v in event.headers}
    return {}


def ended(peer: H2Peer, stream_id: int) -> bool:
    return bool(peer.of(h2.events.StreamEnded, stream_id))


# -- one HTTP/2 connection ---------------------------------------------------------------------


def test_answers_written_whole_past_the_connection_bound_are_503_before_they_start() -> None:
    """The audit's client: many GETs whose answers it never takes. Two answers fit in the
    connection's 2 MB; the others are refused with a `503` that ends at once (no body, so no
    window needed) and costs nothing; the bytes held stay within the bound."""
    count = UnsentBytes()
    peer = zero_window_peer(Whole(), count, h2_unsent_bytes=2_000_000)
    ids = get(peer, 10)
    statuses = [peer.status(i) for i in ids]
    assert statuses == ["200"] * 2 + ["503"] * 8
    refused = headers(peer, ids[-1])
    assert refused["retry-after"] == RETRY_AFTER.decode() and refused["content-length"] == "0"
    assert all(ended(peer, i) for i in ids[2:]) and not ended(peer, ids[0])
    assert peer.server._unsent == 2 * ANSWER <= 2_000_000
    assert count.held == 2 * ANSWER  # the two queued answers count for the process too
    peer.client.close_connection()
    peer.send()
    assert count.held == 0  # given back with the connection


def test_an_answer_bigger_than_the_bound_is_served_when_it_is_all_the_connection_holds() -> None:
    """One response at a time, whatever its size (as on HTTP/1.1): a bound smaller than an
    answer must not make that answer impossible."""
    peer = zero_window_peer(Whole(), UnsentBytes(), h2_unsent_bytes=100_000)
    first, second = get(peer, 2)
    assert (peer.status(first), peer.status(second)) == ("200", "503")
    # the client takes the first answer: the next one is served
    peer.client.increment_flow_control_window(ANSWER, stream_id=first)
    peer.client.increment_flow_control_window(ANSWER)
    peer.send()
    peer.read()
    assert ended(peer, first) and peer.server._unsent == 0
    (third,) = get(peer)
    assert peer.status(third) == "200"


def test_a_refused_answer_is_a_503_for_the_request_too() -> None:
    """What the request says went out (what the access event logs) is the `503`, on both
    protocols, not the status its writer set."""
    exit = Whole()
    peer = zero_window_peer(exit, UnsentBytes(), h2_unsent_bytes=100_000)
    get(peer, 2)
    assert [(r.code, r.code_message) for r in exit.requests] == \
        [(200, b"OK"), (503, b"Service Unavailable")]
    count = UnsentBytes()
    count.held = 10**9  # the process's bound is reached
    http11_client(http_site(MemoryReactorClock(), exit, Limits()), count)
    assert (exit.requests[-1].code, exit.requests[-1].code_message) == \
        (503, b"Service Unavailable")


def test_a_head_request_is_never_refused() -> None:
    peer = zero_window_peer(Whole(), UnsentBytes(), h2_unsent_bytes=100_000)
    get(peer)
    head = peer.request("HEAD", "/")
    peer.send()
    peer.read()
    assert peer.status(head) == "200" and headers(peer, head)["content-length"] == str(ANSWER)


def test_an_answer_that_announced_no_length_is_reset_when_it_passes_the_bound() -> None:
    """Written whole in parts, without `Content-Length`: its headers are out when a write would
    pass the bound, so the stream is cut (RST_STREAM ENHANCE_YOUR_CALM), its queue given back."""
    count = UnsentBytes()
    peer = zero_window_peer(Whole(size=1_200_000, parts=3), count, h2_unsent_bytes=1_000_000)
    (stream,) = get(peer)
    assert peer.status(stream) == "200"
    (reset,) = peer.of(h2.events.StreamReset, stream)
    assert reset.error_code == h2.errors.ErrorCodes.ENHANCE_YOUR_CALM
    assert peer.server._unsent == 0 and count.held == 0 and stream not in peer.server.streams


def test_producers_are_paused_at_the_connection_bound_and_resumed_at_half() -> None:
    """Streaming responses (SSE) of a client that reads nothing (its socket full, windows
    open): each stream's 64 KiB would add up over many streams; the connection's bound pauses
    them all, and they go on once the connection has drained to half of it."""
    exit = Streaming()
    peer = H2Peer(http_site(MemoryReactorClock(), exit, Limits(h2_unsent_bytes=100_000)))
    peer.client.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 1 << 30})
    peer.client.increment_flow_control_window(1 << 30)
    peer.send()
    get(peer, 4)
    for request, _ in exit.held:
        request.write(b"")  # the headers
    peer.read()
    peer.server.pauseProducing()  # the socket is full
    for request, _ in exit.held:
        request.write(b"e" * 30_000)  # within a stream's 64 KiB; 120,000 for the connection
    producers = [p for _, p in exit.held]
    assert [p.paused for p in producers] == [False, False, False, True]
    exit.held[0][0].write(b"e")
    assert producers[0].paused  # the connection is over its bound: no stream may add more
    peer.server.resumeProducing()
    peer.read()
    assert peer.server._unsent == 0
    assert not any(p.paused for p in producers) and producers[0].resumes == 1


# -- the process -------------------------------------------------------------------------------


def test_answers_past_the_process_bound_are_503_on_any_connection() -> None:
    """Two connections each within their own bound: the second answer would take the process
    past its bound, so it is refused on a connection that holds nothing; once the first
    connection has gone, answers are served again."""
    count = UnsentBytes()
    limits = {"h2_unsent_bytes": 4_000_000, "process_unsent_bytes": 1_500_000}
    first, second = (zero_window_peer(Whole(), count, **limits) for _ in range(2))
    (a,) = get(first)
    (b,) = get(second)
    assert (first.status(a), second.status(b)) == ("200", "503")
    assert count.held == ANSWER
    first.client.close_connection()
    first.send()
    assert count.held == 0
    (c,) = get(second)
    assert second.status(c) == "200"


def test_small_answers_are_served_when_the_process_bound_is_reached() -> None:
    """Clients that do not read may hold the process's bound full; everybody's small answers
    (a `401`, one item) still go out: only the connection's own bound refuses those."""
    count = UnsentBytes()
    count.held = 10**9
    peer = zero_window_peer(Whole(size=60_000), count, h2_unsent_bytes=100_000,
                            process_unsent_bytes=1_000_000)
    first, second = get(peer, 2)
    assert (peer.status(first), peer.status(second)) == ("200", "503")  # the connection's


class FullSocket(StringTransport):
    """A TCP transport that pauses its producer (the HTTP/1.1 channel) when it holds more than
    64 KiB, and resumes it when `drain` empties it, as Twisted's socket buffer does."""

    def write(self, data: bytes) -> None:
        super().write(data)
        producer: Any = self.producer
        if producer is not None and len(self.value()) > 65536 and not self.paused:
            self.paused = True
            producer.pauseProducing()

    def drain(self) -> bytes:
        data = self.value()
        self.clear()
        if self.paused:
            self.paused = False
            producer: Any = self.producer
            producer.resumeProducing()
        return data

    paused = False


def http11_client(site: Any, count: UnsentBytes) -> FullSocket:
    proto: Any = site.buildProtocol(IPv4Address("TCP", "127.0.0.1", 40000))
    proto._channel.whole = count
    transport = FullSocket(hostAddress=IPv4Address("TCP", "127.0.0.1", 8080),
                           peerAddress=IPv4Address("TCP", "127.0.0.1", 40000))
    proto.makeConnection(transport)
    proto.dataReceived(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
    return transport


def test_http11_answers_waiting_for_full_sockets_count_for_the_process() -> None:
    """HTTP/1.1 holds one answer per connection, but as many as there are connections: what an
    answer written whole leaves in a full socket's buffer counts for the process until the
    socket has taken it, and an answer that would pass the process's bound is `503`."""
    count = UnsentBytes()
    site = http_site(MemoryReactorClock(), Whole(), Limits(process_unsent_bytes=1_500_000))
    first = http11_client(site, count)
    assert first.value().startswith(b"HTTP/1.1 200 ") and count.held == ANSWER
    second = http11_client(site, count)
    head = second.value()
    assert head.startswith(b"HTTP/1.1 503 ") and b"Retry-After: 1\r\n" in head
    assert b"Content-Length: 0\r\n" in head and len(head) < 1000  # no body
    assert count.held == ANSWER
    first.drain()  # the first client read its answer
    assert count.held == 0
    third = http11_client(site, count)
    assert third.value().startswith(b"HTTP/1.1 200 ")


def test_http11_small_answers_are_never_refused() -> None:
    count = UnsentBytes()
    count.held = 10**9  # whatever the process holds
    site = http_site(MemoryReactorClock(), Whole(size=60_000), Limits())
    assert http11_client(site, count).value().startswith(b"HTTP/1.1 200 ")


def test_http11_a_request_waits_while_an_answer_waits_for_the_socket() -> None:
    """Twisted answers a connection's requests one after another whether or not its client
    reads: requests pipelined in one send, or sent one by one while an answer fills the socket,
    each had an answer written whole into Twisted's buffer, and one connection could hold the
    whole `process-unsent-bytes`. The next request is now neither parsed nor read until the
    socket has taken the answer before it; then it is answered."""
    count = UnsentBytes()
    site = http_site(MemoryReactorClock(), Whole(), Limits())
    proto: Any = site.buildProtocol(IPv4Address("TCP", "127.0.0.1", 40000))
    proto._channel.whole = count
    socket = FullSocket()
    proto.makeConnection(socket)
    proto.dataReceived(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n" * 2)
    proto.dataReceived(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
    assert socket.value().count(b"HTTP/1.1 200 ") == 1 and count.held == ANSWER
    assert socket.producerState == "paused"  # nothing more is read from the client either
    for _ in range(3):
        answer = socket.drain()  # the client takes one answer: the next request is answered
        assert answer.count(b"HTTP/1.1 200 ") == 1 and len(answer) > ANSWER
    assert socket.value() == b"" and count.held == 0
    assert socket.producerState == "producing"


# -- the stall: data waits and nothing leaves ---------------------------------------------------


def ping_for(peer: H2Peer, seconds: float, every: float = 5.0) -> None:
    """The client pings every `every` seconds for `seconds`, reading the acknowledgements."""
    end = peer.clock.seconds() + seconds
    while peer.clock.seconds() < end and not peer.transport.disconnecting:
        peer.clock.advance(every)
        peer.client.ping(b"12345678")
        peer.send()
        peer.read()


def test_a_connection_whose_window_stays_shut_is_closed_at_the_idle_timeout_despite_pings() -> None:
    peer = zero_window_peer(Whole(size=100_000), UnsentBytes(), idle_timeout=30.0)
    (stream,) = get(peer)
    assert peer.status(stream) == "200"
    ping_for(peer, 25)
    assert not peer.transport.disconnecting
    ping_for(peer, 10)
    assert peer.transport.disconnecting
    assert peer.goaway() is not None
    assert peer.clock.seconds() <= 35  # the idle timeout after the answer was queued, not later


def test_a_connection_whose_socket_stays_full_is_closed_at_the_idle_timeout_despite_pings() -> None:
    """Nothing queued, but the transport paused (the client does not read its socket): the
    bytes in Twisted's buffer wait all the same."""
    peer = zero_window_peer(Whole(size=10), UnsentBytes(), idle_timeout=30.0)
    peer.server.pauseProducing()
    ping_for(peer, 25)
    assert not peer.transport.disconnecting
    ping_for(peer, 10)
    assert peer.transport.disconnecting


def test_pings_still_keep_a_connection_with_nothing_waiting_open() -> None:
    peer = zero_window_peer(Whole(size=10), UnsentBytes(), idle_timeout=30.0)
    ping_for(peer, 100)
    assert not peer.transport.disconnecting


def test_a_window_opened_a_little_at_a_time_is_progress() -> None:
    """A slow reader is not idle: each WINDOW_UPDATE lets bytes leave, and the watch counts
    from then."""
    peer = zero_window_peer(Whole(size=100_000), UnsentBytes(), idle_timeout=30.0)
    (stream,) = get(peer)
    for _ in range(10):  # 200 s in all
        peer.clock.advance(20)
        peer.client.increment_flow_control_window(1000, stream_id=stream)
        peer.send()
        peer.read()
    assert not peer.transport.disconnecting
    assert sum(len(e.data) for e in peer.of(h2.events.DataReceived, stream)) == 10_000
