"""What a stream reports when it ends, and what it delivered, on a MemoryReactorClock: the
stream-end event says who, what, how long, how much and why (client, drain, expired, limit,
error, upstream); events are counted per stream and per route; records delivered at the tail
are timed from their Kafka timestamp to the write."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.error import ConnectionDone
from twisted.internet.testing import MemoryReactorClock
from twisted.python.failure import Failure

from ssekd.bindings.http.roles import HttpContext
from ssekd.bindings.sse.roles import StreamRequest
from ssekd.bindings.sse.server import SseServer
from ssekd.bindings.sse.stream import SseStream
from ssekd.spi.stream import event_block
from ssekd.telemetry.delivery import Deliveries
from ssekd.telemetry.events import EventLog
from ssekd.telemetry.metrics import LATENCY_BUCKETS, Counter, Metrics


class _Peer:
    host = "192.0.2.7"
    port = 50123


class _Transport:
    def __init__(self) -> None:
        self.aborted = False

    def abortConnection(self) -> None:  # noqa: N802 - Twisted's name
        self.aborted = True


class _Request:
    """What SseServer and SseStream use of a Twisted request."""

    method = b"GET"
    path = b"/events/orders"
    uri = b"/events/orders?access_token=secret"
    sentLength = 0

    def __init__(self) -> None:
        self.finished: Deferred[None] = Deferred()
        self.transport = _Transport()
        self.channel: Any = None

    def getHeader(self, name: bytes) -> bytes | None:
        return None

    def getClientAddress(self) -> _Peer:  # noqa: N802 - Twisted's name
        return _Peer()

    def setHeader(self, name: bytes, value: bytes) -> None: ...

    def setResponseCode(self, code: int) -> None: ...

    def registerProducer(self, producer: object, streaming: bool) -> None: ...

    def notifyFinish(self) -> Deferred[None]:  # noqa: N802 - Twisted's name
        return self.finished

    def write(self, data: bytes) -> None: ...

    def unregisterProducer(self) -> None: ...

    def finish(self) -> None:
        self.finished.callback(None)


class _Handle:
    """A source's handle as sse-kafka gives it: its route, and where deliveries are counted."""

    def __init__(self, delivered: Counter) -> None:
        self.route = "/events/{topic}"
        self.delivered = delivered

    def pause(self) -> None: ...

    def resume(self) -> None: ...

    def close(self) -> None: ...


class _Source:
    def __init__(self, delivered: Counter) -> None:
        self.delivered = delivered

    def open(self, request: StreamRequest, sink: Any) -> Any:
        return _Handle(self.delivered)


class _Lease:
    def __init__(self, expires_at: float) -> None:
        self.expires_at = expires_at
        self.challenge = 0.0

    def hold(self, renewed: Callable[[], None]) -> None: ...

    def release(self) -> None: ...


def server() -> tuple[SseServer, MemoryReactorClock, Metrics, io.StringIO]:
    clock = MemoryReactorClock()
    metrics = Metrics("ns")
    metrics.configure("ns", None, {}, {}, ["sse", "sk"])
    out = io.StringIO()
    events = EventLog("ns", clock=clock.seconds, stdout=out)
    events.format = "json"
    delivered = metrics.counter("sse.kafka.delivered", "sk", route="/events/{topic}")
    sse = SseServer("sse", _Source(delivered), clock, events, max_lag=30.0, metrics=metrics)
    return sse, clock, metrics, out


def open_stream(sse: SseServer, lease: Any = None) -> tuple[SseStream, _Request]:
    req = _Request()
    ctx = HttpContext("http")
    if lease is not None:
        ctx.lease = lease
    sse.render(req, ctx)  # type: ignore[arg-type]
    return list(sse.streams)[-1], req


def ended(out: io.StringIO, events: EventLog) -> list[dict[str, Any]]:
    assert events.flush()
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    return [e for e in lines if e["event"] == "BINDING_SSE_STREAM_ENDED"]


TWO_EVENTS = b"id:AQIAAg==\ndata:a\n\nid:AQIABA==\ndata:b\n\n"


def test_every_end_says_why_and_what_the_stream_delivered() -> None:
    sse, clock, metrics, out = server()
    by_client, _ = open_stream(sse)
    by_client.write(TWO_EVENTS)
    by_client.write(b":\n\n")  # a keepalive is no event
    clock.advance(12.5)
    by_client.stopProducing()  # the connection went away
    upstream, _ = open_stream(sse)
    upstream.end()  # its source ended it (a topic gone)
    lost, req = open_stream(sse)
    req.finished.errback(Failure(ConnectionDone()))
    broken, req = open_stream(sse)
    req.finished.errback(Failure(ValueError("a TLS error, say")))
    stalled, _ = open_stream(sse)
    stalled.pauseProducing()
    clock.advance(30.0)  # limits.max-lag
    expiring, _ = open_stream(sse, _Lease(clock.seconds() + 5.0))
    clock.advance(5.0)
    draining, _ = open_stream(sse)
    draining.write(TWO_EVENTS)
    sse.stopService()
    found = ended(out, sse.events)
    assert [e["why"] for e in found] == ["client", "upstream", "client", "error", "limit",
                                         "expired", "drain"]
    first = found[0]
    assert first == {"time": first["time"], "severity": "INFO", "namespace": "ns",
                     "binding": "sse", "event": "BINDING_SSE_STREAM_ENDED",
                     "detail": "peer=192.0.2.7:50123 method=GET path=/events/orders "
                               "route=/events/{topic} status=200 duration_s=12.5 bytes=43 "
                               "events=2 why=client",
                     "peer": "192.0.2.7:50123", "method": "GET", "path": "/events/orders",
                     "route": "/events/{topic}", "status": 200, "duration_s": 12.5,
                     "bytes": 43, "events": 2, "why": "client"}
    assert "secret" not in out.getvalue()  # the query (and a token in it) is never written
    assert metrics.counter("sse.kafka.delivered", "sk", route="/events/{topic}").value == 4


def test_without_a_stdout_exporter_no_line_is_made() -> None:
    sse, _, _, out = server()
    sse.events.stdout = None
    stream, _ = open_stream(sse)
    stream.end()
    assert out.getvalue() == ""


def test_live_deliveries_are_timed_from_the_record_to_the_write() -> None:
    """Per record and per stream reached; a batch written whole is timed per record, one a
    filter cut from its oldest record; writes outside a batch (history) are not timed."""
    sse, clock, metrics, _ = server()
    now = [1_795_341_662.0]
    deliveries = Deliveries(clock=lambda: now[0])
    sse.deliveries = deliveries
    streams = [open_stream(sse)[0] for _ in range(3)]
    latency = metrics.histogram("sse.delivery.latency", "sse")

    base = int(now[0] * 1000.0)
    deliveries.begin([base - 20, base - 3])  # the batch's records' timestamps
    for s in streams[:2]:
        s.write(TWO_EVENTS)  # both records, to two streams
    streams[2].write(b"id:AQIABA==\ndata:b\n\n")  # a filter let one through
    now[0] += 0.002  # the batch's writes ended 2 ms later
    deliveries.end()
    bounds = (*LATENCY_BUCKETS, float("inf"))
    observed = {bounds[i]: n for i, n in enumerate(latency.counts) if n}
    # 2 streams x (22 ms, 5 ms), 1 stream x 22 ms (its write timed from the oldest record)
    assert observed == {0.005: 2, 0.025: 3}
    assert abs(latency.sum - (2 * 0.022 + 2 * 0.005 + 0.022)) < 1e-9
    streams[0].write(TWO_EVENTS)  # history, outside a batch: counted, not timed
    assert sum(latency.counts) == 5
    assert [s.events for s in streams] == [4, 2, 1]


def test_a_block_that_says_its_events_is_not_counted_again() -> None:
    """A catch-up step's `EventBlock` says how many events it holds and the stream takes that;
    bytes that do not say are counted (blank lines less comments), and the two agree."""
    sse, _, metrics, _ = server()
    stream, _ = open_stream(sse)
    stream.write(event_block(TWO_EVENTS * 3, 6))
    stream.write(TWO_EVENTS)
    assert stream.events == 8
    assert metrics.counter("sse.kafka.delivered", "sk", route="/events/{topic}").value == 8
    told, _ = open_stream(sse)
    told.write(event_block(TWO_EVENTS, 5))  # the maker's count is what the stream reports
    assert told.events == 5
