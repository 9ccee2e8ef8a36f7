"""The http client as a reverse proxy, piece by piece: what goes upstream (headers, `Host`), the
HTTP/2 connection against the `h2` package's server side in memory (flow control held while the
relay is paused, a cancel is a `RST_STREAM`), the relay's answers to upstream trouble (`504`
after the timeout, `502`, a cut-off answer) and the response check hook. The whole path, with
real nginx, is tests/e2e/zilla_examples/test_http_proxy.py."""

from __future__ import annotations

from io import BytesIO
from typing import Any

import h2.config
import h2.connection
import h2.events
from twisted.internet.defer import Deferred
from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.web.test.requesthelper import DummyRequest

from ssekd.bindings.http import client as client_module
from ssekd.bindings.http.client import HttpClient
from ssekd.bindings.http.exchange import UpstreamRequest, end_to_end
from ssekd.bindings.http.proxying import Relay
from ssekd.bindings.http.response_check import Abort, UpstreamAnswer
from ssekd.bindings.http.roles import HttpBinding, HttpClientBinding, HttpContext
from ssekd.bindings.http.upstream_h2 import INITIAL_WINDOW, H2Upstream
from ssekd.telemetry.events import EventLog


class Request(DummyRequest):  # type: ignore[misc]
    """A DummyRequest with a push producer, a body and a transport whose answer can be cut
    (`aborted`): an HTTP/1.1 connection is cut by closing it once the head has gone."""

    producer: Any = None

    def __init__(self, path: bytes = b"/demo.html", method: bytes = b"GET",
                 body: bytes = b"", headers: dict[bytes, bytes] | None = None) -> None:
        super().__init__(path.split(b"?")[0].strip(b"/").split(b"/"))
        self.method = method
        self.uri = path
        self.path = path.split(b"?")[0]
        self.content = BytesIO(body)
        for k, v in (headers or {}).items():
            self.requestHeaders.setRawHeaders(k, [v])
        self.transport = StringTransport()
        self.aborted = False
        self.transport.loseConnection = self._abort

    def _abort(self) -> None:
        self.aborted = True

    def registerProducer(self, producer: Any, streaming: bool) -> None:
        assert streaming
        self.producer = producer

    def unregisterProducer(self) -> None:
        self.producer = None


class NeverConnects:
    """A tcp client whose connections never complete (an upstream that does not answer)."""

    address = ("upstream.test", 8080)
    secure = False

    def __init__(self) -> None:
        self.attempts: list[Deferred[Any]] = []
        self.cancelled = 0

    def endpoint(self) -> Any:
        outer = self

        class Endpoint:
            def connect(self, factory: Any) -> Deferred[Any]:
                d: Deferred[Any] = Deferred(lambda _: outer._cancel())
                outer.attempts.append(d)
                return d

        return Endpoint()

    def _cancel(self) -> None:
        self.cancelled += 1


def _client(versions: tuple[str, ...] = ("http/1.1",),
            overrides: dict[str, str] | None = None) -> tuple[HttpClient, MemoryReactorClock,
                                                              NeverConnects, EventLog]:
    clock = MemoryReactorClock()
    connector = NeverConnects()
    events = EventLog("test", clock=clock.seconds)
    return (HttpClient("south_http_client", clock, connector, overrides or {}, versions, events),
            clock, connector, events)


# -- what goes upstream ------------------------------------------------------------------


def test_the_http_client_is_an_exit_of_an_http_server() -> None:
    client, *_ = _client()
    assert isinstance(client, HttpBinding) and isinstance(client, HttpClientBinding)
    assert client.takes_body and client.max_idle is None


def test_hop_by_hop_headers_stay_behind_and_the_host_is_the_clients() -> None:
    client, *_ = _client(overrides={"x-added": "yes", "user-agent": "ssekd"})
    request = Request(b"/a?b=1", b"POST", b"body", {
        b"Host": b"localhost:7143", b"Connection": b"keep-alive, x-hop",
        b"X-Hop": b"1", b"Keep-Alive": b"timeout=5", b"TE": b"trailers",
        b"Transfer-Encoding": b"chunked", b"Upgrade": b"h2c", b"Content-Length": b"4",
        b"Expect": b"100-continue",
        b"Accept": b"text/html", b"User-Agent": b"curl"})
    up = client.upstream_request(request)
    assert (up.method, up.path, up.authority, up.body) == (b"POST", b"/a?b=1",
                                                          b"localhost:7143", b"body")
    assert dict(up.headers) == {b"accept": b"text/html", b"user-agent": b"ssekd",
                                b"x-added": b"yes"}


def test_an_authority_override_replaces_the_clients_host() -> None:
    client, *_ = _client(overrides={":authority": "nginx"})
    up = client.upstream_request(Request(headers={b"Host": b"localhost:7143"}))
    assert up.authority == b"nginx"


def test_end_to_end_drops_what_the_connection_header_lists() -> None:
    headers = [(b"Connection", b"close, X-Private"), (b"x-private", b"1"), (b"etag", b"e")]
    assert end_to_end(headers) == [(b"etag", b"e")]


# -- HTTP/2 upstream against an in-memory h2 server --------------------------------------


class Sink:
    def __init__(self) -> None:
        self.calls: list[Any] = []

    def head(self, status: int, headers: list[tuple[bytes, bytes]]) -> None:
        self.calls.append(("head", status, dict(headers)))

    def data(self, chunk: bytes) -> None:
        self.calls.append(("data", chunk))

    def end(self) -> None:
        self.calls.append(("end",))

    def failed(self, why: str) -> None:
        self.calls.append(("failed", why))


def _h2_pair() -> tuple[H2Upstream, StringTransport, h2.connection.H2Connection]:
    upstream = H2Upstream(b"https", True, lambda _: None)
    transport = StringTransport()
    upstream.makeConnection(transport)
    server = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False,
                                                                  header_encoding=None))
    server.initiate_connection()
    return upstream, transport, server


def _exchange(upstream: H2Upstream, transport: StringTransport,
              server: h2.connection.H2Connection, data: bytes = b"") -> list[Any]:
    """Bytes the client wrote go to the server, the server's answer to the client."""
    events = server.receive_data(transport.value())
    transport.clear()
    upstream.dataReceived(server.data_to_send() + data)
    return events


def test_an_h2_request_carries_method_path_authority_headers_and_body() -> None:
    upstream, transport, server = _h2_pair()
    sink = Sink()
    upstream.start(UpstreamRequest(b"PUT", b"/up?x=1", b"localhost:7143",
                                   ((b"accept", b"*/*"),), b"payload"), sink)
    events = _exchange(upstream, transport, server)
    received = next(e for e in events if isinstance(e, h2.events.RequestReceived))
    headers = dict(received.headers)
    assert headers[b":method"] == b"PUT" and headers[b":path"] == b"/up?x=1"
    assert headers[b":authority"] == b"localhost:7143" and headers[b":scheme"] == b"https"
    assert headers[b"accept"] == b"*/*" and headers[b"content-length"] == b"7"
    body = b"".join(e.data for e in events if isinstance(e, h2.events.DataReceived))
    assert body == b"payload"
    assert any(isinstance(e, h2.events.StreamEnded) for e in events)
    server.send_headers(1, [(b":status", b"201"), (b"etag", b"x")])
    server.send_data(1, b"made", end_stream=True)
    _exchange(upstream, transport, server)
    assert sink.calls == [("head", 201, {b"etag": b"x"}), ("data", b"made"), ("end",)]


def test_a_paused_h2_response_holds_its_window_and_acknowledges_on_resume() -> None:
    """While the relay is paused, received data is not acknowledged: the server's window runs
    out and it must wait; resuming delivers what was held and opens the window again."""
    upstream, transport, server = _h2_pair()
    sink = Sink()
    call = upstream.start(UpstreamRequest(b"GET", b"/large", b"a", (), b""), sink)
    _exchange(upstream, transport, server)
    server.send_headers(1, [(b":status", b"200")])
    call.pause()
    chunk = b"x" * 16384
    while server.local_flow_control_window(1) >= len(chunk):
        server.send_data(1, chunk)
    events = _exchange(upstream, transport, server)
    assert sum(len(c[1]) for c in sink.calls if c[0] == "data") == 0
    assert not [e for e in events if isinstance(e, h2.events.WindowUpdated)]
    assert server.local_flow_control_window(1) < len(chunk)
    assert sum(len(c) for c, _ in call.held) <= INITIAL_WINDOW
    call.resume()
    events = _exchange(upstream, transport, server)
    delivered = sum(len(c[1]) for c in sink.calls if c[0] == "data")
    assert delivered >= INITIAL_WINDOW - len(chunk)
    assert server.local_flow_control_window(1) >= INITIAL_WINDOW - len(chunk)


def test_a_paused_h2_stream_does_not_hold_back_the_others() -> None:
    """One stream's client stalls with its window full; another stream of the same connection
    still gets its whole answer (the connection's window is wider than a stream's)."""
    upstream, transport, server = _h2_pair()
    slow, fast = Sink(), Sink()
    paused = upstream.start(UpstreamRequest(b"GET", b"/slow", b"a", (), b""), slow)
    upstream.start(UpstreamRequest(b"GET", b"/fast", b"a", (), b""), fast)
    _exchange(upstream, transport, server)
    paused.pause()
    server.send_headers(1, [(b":status", b"200")])
    server.send_headers(3, [(b":status", b"200")])
    while server.local_flow_control_window(1) > 0:
        server.send_data(1, b"s" * min(16384, server.local_flow_control_window(1)))
    _exchange(upstream, transport, server)
    for _ in range(4):  # more than a stream's window, acknowledged as it is taken
        server.send_data(3, b"f" * 16384)
        _exchange(upstream, transport, server)
    server.send_data(3, b"", end_stream=True)
    _exchange(upstream, transport, server)
    assert sum(len(c[1]) for c in fast.calls if c[0] == "data") == 4 * 16384
    assert fast.calls[-1] == ("end",) and not [c for c in slow.calls if c[0] == "data"]


def test_cancelling_an_h2_call_resets_its_stream_only() -> None:
    upstream, transport, server = _h2_pair()
    first, second = Sink(), Sink()
    cancelled = upstream.start(UpstreamRequest(b"GET", b"/1", b"a", (), b""), first)
    upstream.start(UpstreamRequest(b"GET", b"/2", b"a", (), b""), second)
    _exchange(upstream, transport, server)
    cancelled.cancel()
    events = server.receive_data(transport.value())
    reset = [e for e in events if isinstance(e, h2.events.StreamReset)]
    assert [(e.stream_id, e.error_code) for e in reset] == [(1, 8)]  # CANCEL
    assert upstream.has_room() and list(upstream.calls) == [3]


def test_a_lost_h2_connection_fails_its_open_calls() -> None:
    upstream, transport, server = _h2_pair()
    sink = Sink()
    upstream.start(UpstreamRequest(b"GET", b"/", b"a", (), b""), sink)
    upstream.connectionLost()
    assert sink.calls == [("failed", "reset")]
    assert not upstream.has_room()


# -- the relay: upstream trouble and the response check ----------------------------------


def test_no_answer_within_the_timeout_is_504_and_the_attempt_is_cancelled() -> None:
    client, clock, connector, events = _client()
    request = Request()
    client.render(request, HttpContext("north_http_server"))
    clock.advance(client_module.ANSWER_TIMEOUT - 1)
    assert request.finished == 0
    clock.advance(1)
    assert request.responseCode == 504 and request.finished == 1
    assert connector.cancelled == 1
    assert "BINDING_HTTP_UPSTREAM_FAILED" in events.recent[-1]
    assert "timeout; answered 504" in events.recent[-1]


def test_a_client_gone_before_the_answer_cancels_the_upstream_attempt() -> None:
    client, clock, connector, _ = _client(versions=("h2",))
    request = Request()
    client.render(request, HttpContext("north_http_server"))
    assert len(connector.attempts) == 1
    request.processingFailed(Exception("client went away"))
    assert connector.cancelled == 1


def _relay(check: Any = None) -> tuple[Relay, Request, EventLog, list[str]]:
    request = Request()
    events = EventLog("test")
    relay = Relay("south_http_client", request, "GET", "/valid.json", events, check,
                  "GET http://upstream/valid.json")
    calls: list[str] = []

    class Call:
        def pause(self) -> None:
            calls.append("pause")

        def resume(self) -> None:
            calls.append("resume")

        def cancel(self) -> None:
            calls.append("cancel")

    relay.attach(Call())
    return relay, request, events, calls


def test_failure_before_the_head_is_502_and_after_it_cuts_the_answer_off() -> None:
    relay, request, events, _ = _relay()
    relay.failed("refused")
    assert request.responseCode == 502 and request.finished == 1
    assert "refused; answered 502" in events.recent[-1]
    relay, request, events, calls = _relay()
    relay.head(200, [(b"content-length", b"10")])
    relay.data(b"12345")
    relay.failed("reset")
    assert request.aborted and request.finished == 0
    assert "answer cut off" in events.recent[-1]


def test_the_relay_pauses_the_upstream_when_the_client_is_full() -> None:
    relay, request, _, calls = _relay()
    relay.head(200, [(b"connection", b"close"), (b"x-up", b"1")])
    assert request.producer is relay
    assert request.responseHeaders.getRawHeaders(b"x-up") == [b"1"]
    assert not request.responseHeaders.hasHeader(b"connection")
    request.producer.pauseProducing()
    request.producer.resumeProducing()
    relay.data(b"abc")
    relay.end()
    assert calls == ["pause", "resume"]
    assert request.written == [b"abc"] and request.finished == 1


class Check:
    """A response check that wants 200s and refuses bodies that are not `{}`."""

    max_body = 8

    def __init__(self) -> None:
        self.seen: list[UpstreamAnswer] = []

    def wants(self, method: str, path: str, status: int,
              headers: tuple[tuple[str, str], ...]) -> bool:
        return status == 200

    def check(self, answer: UpstreamAnswer) -> Abort | None:
        self.seen.append(answer)
        return None if answer.body == b"{}" else Abort("not the model")


def test_a_checked_response_is_held_whole_then_relayed() -> None:
    check = Check()
    relay, request, _, _ = _relay(check)
    relay.head(200, [(b"content-type", b"application/json")])
    relay.data(b"{")
    assert request.written == [] and request.producer is None
    relay.data(b"}")
    relay.end()
    assert request.written == [b"{}"] and request.finished == 1
    [answer] = check.seen
    assert (answer.method, answer.path, answer.status) == ("GET", "/valid.json", 200)
    assert answer.header("content-type") == "application/json"


def test_a_response_the_check_refuses_is_aborted_with_an_event() -> None:
    relay, request, events, calls = _relay(Check())
    relay.head(200, [(b"content-type", b"application/json")])
    relay.data(b"[1]")
    relay.end()
    assert request.responseCode == 200 and request.aborted and request.finished == 0
    assert b"[1]" not in b"".join(request.written)
    assert "BINDING_HTTP_RESPONSE_ABORTED" in events.recent[-1]
    assert "200 aborted: not the model" in events.recent[-1]


def test_a_checked_body_over_its_bound_is_aborted_without_holding_more() -> None:
    check = Check()
    relay, request, events, calls = _relay(check)
    relay.head(200, [])
    relay.data(b"123456789")
    assert request.aborted and "cancel" in calls and check.seen == []
    assert "body over 8 bytes" in events.recent[-1]


def test_responses_the_check_declines_stream_through() -> None:
    relay, request, _, _ = _relay(Check())
    relay.head(404, [])
    relay.data(b"nope")
    assert request.written == [b"nope"]


# -- cleartext upgrade (h2c) -------------------------------------------------------------


def _attempt(method: bytes = b"GET") -> tuple[Any, StringTransport, Sink, list[str]]:
    from ssekd.bindings.http.upstream_h2c import H2cAttempt
    sink = Sink()
    notes: list[str] = []
    attempt = H2cAttempt(UpstreamRequest(method, b"/a", b"up:80", ((b"accept", b"*/*"),), b""),
                         sink, lambda _: notes.append("upgraded"),
                         lambda: notes.append("declined"), lambda _: notes.append("lost"),
                         lambda: notes.append("gone"))
    transport = StringTransport()
    attempt.makeConnection(transport)
    return attempt, transport, sink, notes


def test_the_first_cleartext_request_offers_the_upgrade() -> None:
    _, transport, _, _ = _attempt()
    head = transport.value().split(b"\r\n\r\n")[0].split(b"\r\n")
    assert head[0] == b"GET /a HTTP/1.1"
    assert b"host: up:80" in head and b"upgrade: h2c" in head
    assert b"connection: Upgrade, HTTP2-Settings" in head
    assert any(line.startswith(b"http2-settings: ") for line in head)


def test_a_declined_upgrade_is_read_as_http11_in_any_framing() -> None:
    """Chunks split anywhere, a length, or the end of the connection frame the answer; the
    connection closes after it and the client is told to keep to HTTP/1.1."""
    attempt, transport, sink, notes = _attempt()
    answer = (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-Up: 1\r\n\r\n"
              b"5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\n\r\n")
    for i in range(0, len(answer), 3):
        attempt.dataReceived(answer[i:i + 3])
    assert sink.calls[0][:2] == ("head", 200) and sink.calls[0][2][b"x-up"] == b"1"
    assert b"".join(c[1] for c in sink.calls if c[0] == "data") == b"hello world"
    assert sink.calls[-1] == ("end",) and notes == ["declined"]
    assert transport.disconnecting

    attempt, _, sink, _ = _attempt()
    attempt.dataReceived(b"HTTP/1.1 404 Not Found\r\nContent-Length: 4\r\n\r\nnopeEXTRA")
    assert [c for c in sink.calls if c[0] != "head"] == [("data", b"nope"), ("end",)]

    attempt, _, sink, _ = _attempt()
    attempt.dataReceived(b"HTTP/1.1 200 OK\r\n\r\nuntil the end")
    attempt.connectionLost()
    assert [c for c in sink.calls if c[0] != "head"] == [("data", b"until the end"), ("end",)]

    attempt, _, sink, _ = _attempt()
    attempt.dataReceived(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort")
    attempt.connectionLost()
    assert sink.calls[-1] == ("failed", "reset")

    attempt, _, sink, _ = _attempt(b"HEAD")
    attempt.dataReceived(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n")
    assert [c[0] for c in sink.calls] == ["head", "end"]


def test_an_answer_that_is_not_http_fails_the_attempt() -> None:
    attempt, transport, sink, _ = _attempt()
    attempt.dataReceived(b"\x00\x00\x12\x04\x00\x00\x00\x00\x00 binary\r\n\r\n")
    assert sink.calls == [("failed", "reset")]


def test_an_accepted_upgrade_answers_on_stream_1() -> None:
    attempt, transport, sink, notes = _attempt()
    request = transport.value().split(b"\r\n\r\n")[0].split(b"\r\n")
    settings = next(line for line in request if line.startswith(b"http2-settings: "))
    transport.clear()
    server = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False,
                                                                  header_encoding=None))
    server.initiate_upgrade_connection(settings.split(b": ", 1)[1])
    server.send_headers(1, [(b":status", b"200")])
    server.send_data(1, b"over h2", end_stream=True)
    attempt.dataReceived(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\n\r\n"
                         + server.data_to_send())
    assert notes == ["upgraded"]
    assert sink.calls == [("head", 200, {}), ("data", b"over h2"), ("end",)]
    assert transport.value().startswith(b"PRI * HTTP/2.0")  # the client's preface follows
