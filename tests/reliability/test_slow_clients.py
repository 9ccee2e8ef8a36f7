"""Clients that read slowly or not at all cost a bounded amount, and cannot hold a stream for ever.

Unit tests of each piece on a `MemoryReactorClock` (catch-up steps and history reads bounded in
bytes, history reads bounded in number, `limits.streams`, `limits.max-lag`), then the real daemon
with a hundred clients that never read beside ten that read everything: the daemon's memory
stays under a stated bound and the readers lose nothing. `bench/slow_clients.py` is the
full-size measurement (1,000 never-reading clients, 100 readers).
"""

from __future__ import annotations

import http.client
import queue
import re
import socket
import threading
import time
from pathlib import Path
from typing import Any

import h2.config
import h2.connection
import h2.events
import h2.settings
import pytest
from twisted.internet.defer import Deferred
from twisted.internet.testing import MemoryReactorClock
from twisted.web.test.requesthelper import DummyRequest

from bench.common import PeakRss
from ssekd.bindings.http.roles import HttpContext
from ssekd.bindings.kafka.cache import CacheServer
from ssekd.bindings.kafka.client import KafkaClient
from ssekd.bindings.kafka.history import FetchResult, HistoryBusy, HistoryFetcher
from ssekd.bindings.kafka.message import OFFSET, SIZE, Message, new_message
from ssekd.bindings.kafka.settings import ClientSettings
from ssekd.bindings.kafka.start import Start
from ssekd.bindings.kafka.subscription import HISTORY_BUSY_RETRY
from ssekd.bindings.sse.roles import TryLater
from ssekd.bindings.sse.server import SseServer
from ssekd.bindings.sse_kafka.encoder import KafkaEventEncoder
from ssekd.dev.broker import Broker, free_port
from ssekd.telemetry.events import EventLog
from tests.support import zilla_config as zc
from tests.support.broker import Kafka
from tests.support.daemon import Daemon, start_daemon
from tests.support.silent_clients import silent_h1, silent_h2
from tests.support.sse import SseClient
from tests.support.wait import wait_until

#: A record of the history: 1,000 bytes of value, so 2,000 of them are ~2 MB.
VALUE = b"v" * 1000
STEP = 64 * 1024


# -- catch-up and history reads, bounded in bytes ----------------------------------------------

class NoClient:
    """A kafka client for a cache fed by hand: consumes nothing, reads no history."""

    def __init__(self) -> None:
        self.fetches: list[tuple[int, int, int, Deferred[FetchResult]]] = []
        self.dropped: list[str] = []

    def consume(self, *a: Any, **kw: Any) -> None:
        pass

    def unconsume(self, owner: str, topic: str) -> None:
        self.dropped.append(topic)

    def fetch(self, topic: str, partition: int, offset: int, limit: int,
              max_bytes: int) -> Deferred[FetchResult]:
        d: Deferred[FetchResult] = Deferred()
        self.fetches.append((partition, offset, max_bytes, d))
        return d


class PausingSink:
    """An sse stream whose transport is full after the first write, as with a client that
    reads nothing: it pauses the subscription from inside that write, as Twisted would."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.subscription: Any = None

    def write(self, data: bytes) -> None:
        self.writes.append(data)
        self.subscription.pause()

    def end(self) -> None:
        pass


def _history(n: int, partition: int = 0, first: int = 0) -> list[Message]:
    return [new_message(partition, first + i, None, VALUE) for i in range(n)]


def test_a_stream_that_reads_nothing_gets_one_catch_up_step_not_the_history() -> None:
    clock = MemoryReactorClock()
    server = CacheServer(clock, NoClient(), "cache", EventLog("t"))  # type: ignore[arg-type]
    cache = server.topic("t")
    cache.on_metadata(1, False)
    cache.on_records(_history(2000))  # ~2 MB
    cache.on_end(0, 2000)
    sinks = []
    for _ in range(10):
        sink = PausingSink()
        sink.subscription = cache.subscribe(KafkaEventEncoder("t"), sink, Start())
        sinks.append(sink)
    for _ in range(5):
        clock.advance(0)
    for sink in sinks:
        written = sum(map(len, sink.writes))
        assert len(sink.writes) == 1 and written <= STEP + 1100, \
            f"{written} bytes written to a stream that reads nothing"


def test_catch_up_delivers_everything_in_steps_of_catch_up_bytes() -> None:
    clock = MemoryReactorClock()
    server = CacheServer(clock, NoClient(), "cache", EventLog("t"),  # type: ignore[arg-type]
                         catch_up_bytes=10_000)
    cache = server.topic("t")
    cache.on_metadata(1, False)
    cache.on_records(_history(100))
    cache.on_end(0, 100)
    writes: list[bytes] = []
    sink: Any = type("Sink", (), {"write": lambda self, d: writes.append(d),
                                  "end": lambda self: None})()
    s = cache.subscribe(KafkaEventEncoder("t"), sink, Start())
    for _ in range(20):
        clock.advance(0)
    assert s.at_tail
    assert sum(w.count(b"id:") for w in writes) == 100
    assert max(len(w) for w in writes) <= 10_000 + 1100 and len(writes) >= 9


def test_a_history_read_is_asked_for_at_most_catch_up_bytes() -> None:
    clock = MemoryReactorClock()
    client = NoClient()
    server = CacheServer(clock, client, "cache", EventLog("t"))  # type: ignore[arg-type]
    cache = server.topic("t")
    cache.on_metadata(1, False)
    cache.on_records(_history(10, first=5000))  # the cache starts at 5000: 0..4999 from Kafka
    cache.on_end(0, 5010)
    sink = PausingSink()
    sink.subscription = cache.subscribe(KafkaEventEncoder("t"), sink, Start(resume={0: 0}))
    clock.advance(0)
    ((p, offset, max_bytes, _),) = client.fetches
    assert (p, offset, max_bytes) == (0, 0, STEP)


class FakeRecord:
    """What librdkafka hands over for one record (or an end of partition)."""

    def __init__(self, offset: int, eof: bool = False) -> None:
        self._offset = offset
        self._eof = eof

    def error(self) -> Any:
        if not self._eof:
            return None
        from confluent_kafka import KafkaError
        return KafkaError(KafkaError._PARTITION_EOF)

    def topic(self) -> str:
        return "t"

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return self._offset

    def key(self) -> None:
        return None

    def value(self) -> bytes:
        return VALUE

    def headers(self) -> None:
        return None

    def timestamp(self) -> tuple[int, int]:
        return (1, 0)


class FakeConsumer:
    """A partition of `end` records that librdkafka hands over `batch` at a time."""

    def __init__(self, end: int, batch: int = 2000) -> None:
        self.end = end
        self.batch = batch
        self.position = 0
        self.assigns: list[int] = []

    def assign(self, tps: list[Any]) -> None:
        self.position = tps[0].offset
        self.assigns.append(self.position)

    def poll(self, timeout: float) -> FakeRecord | None:
        got = self.consume(1, 0)
        return got[0] if got else None

    def consume(self, n: int, timeout: float) -> list[FakeRecord]:
        out = []
        while len(out) < n and self.position <= self.end:
            out.append(FakeRecord(self.position, eof=self.position == self.end))
            self.position += 1
        return out


def test_history_reads_stop_at_their_byte_budget_and_continue_exactly_where_they_stopped() -> None:
    fetcher = HistoryFetcher(KafkaClient(MemoryReactorClock(), ClientSettings(("x:1",)), "k",
                                         lambda *a: None))
    consumer = FakeConsumer(end=3000)
    current = None
    offsets: list[int] = []
    end = None
    while end is None:
        req: Any = type("Req", (), {"topic": "t", "partition": 0, "limit": 2000,
                                     "offset": offsets[-1] + 1 if offsets else 0,
                                     "max_bytes": STEP})()
        result, current = fetcher._serve(consumer, req, current)
        assert sum(m[SIZE] for m in result.records) <= STEP + 1200
        offsets += [m[OFFSET] for m in result.records]
        end = result.end
    assert offsets == list(range(3000)) and end == 3000
    assert consumer.assigns == [0], "a read that continues the last one does not seek"


def test_history_reads_waiting_are_bounded_and_a_stream_waits_its_turn() -> None:
    clock = MemoryReactorClock()
    client = KafkaClient(clock, ClientSettings(("x:1",), max_history_reads=2), "k",
                         lambda *a: None)
    client.history.start = lambda: None  # type: ignore[method-assign] - no thread, no broker
    first, second = (client.fetch("t", 0, 0, 10, STEP) for _ in range(2))
    failures: list[Any] = []
    client.fetch("t", 0, 0, 10, STEP).addErrback(failures.append)
    assert len(failures) == 1 and failures[0].check(HistoryBusy)
    assert client.history.requests.qsize() == 2, "the refused read was not queued"
    first.callback(FetchResult([], 0))
    third = client.fetch("t", 0, 0, 10, STEP)
    assert isinstance(third, Deferred) and client.history.requests.qsize() == 3
    # a subscription told "busy" asks again after HISTORY_BUSY_RETRY, without an event
    server = CacheServer(clock, client, "cache", EventLog("t"))
    cache = server.topic("u")
    cache.on_metadata(1, False)
    cache.on_records(_history(1, first=10))
    cache.on_end(0, 11)
    sink = PausingSink()
    sink.subscription = cache.subscribe(KafkaEventEncoder("u"), sink, Start(resume={0: 0}))
    clock.advance(0)
    assert client.history.requests.qsize() == 3 and not server.events.recent
    second.callback(FetchResult([], 0))
    clock.advance(HISTORY_BUSY_RETRY)
    clock.advance(0)
    assert client.history.requests.qsize() == 4


# -- limits.streams and limits.max-lag ----------------------------------------------------------

class Handle:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def pause(self) -> None:
        self.calls.append("pause")

    def resume(self) -> None:
        self.calls.append("resume")

    def close(self) -> None:
        self.calls.append("close")


class Source:
    def __init__(self, answer: Any = None) -> None:
        self.answer = answer
        self.opened = 0
        self.handles: list[Handle] = []

    def open(self, request: Any, sink: Any) -> Any:
        self.opened += 1
        self.handles.append(Handle())
        return self.answer if self.answer is not None else self.handles[-1]


class Transport:
    aborted = False

    def write(self, data: bytes) -> None:
        pass

    def abortConnection(self) -> None:
        self.aborted = True


class StreamingRequest(DummyRequest):  # type: ignore[misc]
    producer: Any = None

    def registerProducer(self, producer: Any, streaming: bool) -> None:
        self.producer = producer

    def unregisterProducer(self) -> None:
        self.producer = None


def _request() -> Any:
    req = StreamingRequest([b"events"])
    req.method, req.path, req.uri = b"GET", b"/events", b"/events"
    req.channel = type("Channel", (), {"transport": Transport()})()
    return req


def test_streams_beyond_the_limit_get_a_200_with_retry_that_ends() -> None:
    clock = MemoryReactorClock()
    source = Source()
    server = SseServer("sse", source, clock, EventLog("t"), max_streams=2)  # type: ignore[arg-type]
    for _ in range(2):
        server.render(_request(), HttpContext("http"))
    req = _request()
    body = server.render(req, HttpContext("http"))
    assert source.opened == 2, "the third stream was not opened"
    assert req.responseCode == 200 and req.responseHeaders.getRawHeaders(b"content-type") == \
        [b"text/event-stream"]
    assert isinstance(body, bytes) and body.startswith(b"retry:5000\n\n: try later: ")
    assert b"limits.streams" in body and body.endswith(b"\n\n")
    assert any("BINDING_SSE_TRY_LATER" in line for line in server.events.recent)
    # a stream that ends makes room
    server.streams.popitem()
    server.render(_request(), HttpContext("http"))
    assert source.opened == 3


def test_a_source_that_says_try_later_is_a_200_with_retry_that_ends() -> None:
    server = SseServer("sse", Source(TryLater("max-topics")), MemoryReactorClock(),
                       EventLog("t"), retry=1500)  # type: ignore[arg-type]
    req = _request()
    body = server.render(req, HttpContext("http"))
    assert req.responseCode == 200 and body == b"retry:1500\n\n: try later: max-topics\n\n"
    assert not server.streams


def test_a_stream_paused_for_max_lag_is_reset_and_one_that_resumes_is_not() -> None:
    clock = MemoryReactorClock()
    source = Source()
    server = SseServer("sse", source, clock, EventLog("t"), max_lag=60.0)  # type: ignore[arg-type]
    slow, reading = _request(), _request()
    server.render(slow, HttpContext("http"))
    server.render(reading, HttpContext("http"))
    slow.producer.pauseProducing()
    reading.producer.pauseProducing()
    clock.advance(59)
    reading.producer.resumeProducing()  # it read: the clock starts again at its next pause
    reading.producer.pauseProducing()
    clock.advance(1)
    assert slow.channel.transport.aborted and source.handles[0].calls == ["pause", "close"]
    assert list(server.streams) == [reading.producer]
    assert not reading.channel.transport.aborted
    assert any("BINDING_SSE_STREAM_STALLED" in line for line in server.events.recent)
    clock.advance(59)
    assert reading.channel.transport.aborted and not server.streams


# -- the real daemon: clients that never read beside clients that read everything --------------

def daemon_config(port: int, bootstrap: str, sse: zc.Node | None = None) -> zc.Node:
    """Streams at /events/{topic}; `sse` the sse server's options."""
    return zc.sse_stack(port, bootstrap, name="slow",
                        routes=[zc.sse_route("/events/{topic}", None)],
                        sse=zc.sse_server(options=sse))

#: Clients that never read, and clients that read everything, in the functional version.
SILENT_H1 = 50
SILENT_H2 = 50  # streams on one HTTP/2 connection that announced a zero window
READERS = 10
HISTORY = 2000
LIVE = 300
#: Daemon growth allowed while it all runs: ~0.5 MB per silent stream. Before steps were bounded
#: in bytes each silent stream held the whole ~2 MB history (~250 MB for these hundred).
RSS_BOUND = 50 * 1024 * 1024


def closed(sock: socket.socket) -> bool:
    """Read until the server closes or resets the connection (True) or 5 s pass (False)."""
    sock.settimeout(5)
    try:
        while sock.recv(65536):
            pass
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False
    return True


def read_all(port: int, path: str, n: int, out: queue.Queue[Any]) -> None:
    """Read `n` events and report their ids (or the failure)."""
    try:
        with SseClient(port, path, timeout=60) as client:
            out.put([e.id for e in client.events(n, timeout=120)])
    except Exception as e:  # noqa: BLE001 - reported to the test thread
        out.put(e)


@pytest.mark.broker
def test_clients_that_never_read_cost_bounded_memory_and_readers_lose_nothing(
        kafka_broker: Broker, tmp_path: Path) -> None:
    kafka = Kafka(kafka_broker.bootstrap)
    topic = kafka.topic(partitions=1)
    for i in range(HISTORY):
        kafka.produce(topic, VALUE + b"%d" % i)
    kafka.flush()
    port = free_port()
    config = tmp_path / "zilla.yaml"
    zc.write(config, daemon_config(port, kafka_broker.bootstrap))
    daemon: Daemon = start_daemon(config, wait_ports=[port])
    path = f"/events/{topic}"
    try:
        with SseClient(port, path, timeout=30) as warm:  # the cache holds the history
            warm.events(HISTORY, timeout=60)
        with PeakRss(daemon.process.pid) as rss:
            silent = [silent_h1(port, path) for _ in range(SILENT_H1)]
            silent.append(silent_h2(port, path, SILENT_H2)[0])
            results: queue.Queue[Any] = queue.Queue()
            readers = [threading.Thread(target=read_all, args=(port, path, HISTORY + LIVE,
                                                               results))
                       for _ in range(READERS)]
            for t in readers:
                t.start()
            for i in range(LIVE):
                kafka.produce(topic, b"live %d" % i)
                if i % 50 == 0:
                    kafka.flush()
                    time.sleep(0.05)
            kafka.flush()
            for t in readers:
                t.join(150)
        # The event log prints 100 lines of one event a second, then counts the rest in an
        # `EVENTS_SUPPRESSED` line once the second is over.
        def accepted() -> int:
            out = daemon.output()
            return out.count("] BINDING_HTTP_REQUEST_ACCEPTED ") + sum(
                int(m) for m in re.findall(
                    r"EVENTS_SUPPRESSED (\d+) more BINDING_HTTP_REQUEST_ACCEPTED", out))

        wait_until(lambda: accepted() == 1 + SILENT_H1 + SILENT_H2 + READERS, 5,
                   what=lambda: f"{accepted()} requests: the silent streams were not all opened")
        got = [results.get_nowait() for _ in range(READERS)]
        for ids in got:
            assert not isinstance(ids, Exception), ids
            assert len(ids) == HISTORY + LIVE and len(set(ids)) == len(ids)
        print(f"RSS growth {rss.growth / 2**20:.1f} MiB")
        assert rss.growth < RSS_BOUND, \
            f"daemon grew {rss.growth / 2**20:.0f} MiB with {SILENT_H1 + SILENT_H2} silent streams"
        assert daemon.alive()
        for s in silent:
            s.close()
    finally:
        daemon.stop()


#: The sse server's options of the test below: four streams, resets after one event of lag.
LIMITED = {"retry": 900, "limits": {"streams": 4, "max-lag": 1}}


@pytest.mark.broker
def test_on_the_wire_streams_beyond_the_limit_retry_and_silent_streams_are_reset(
        kafka_broker: Broker, tmp_path: Path) -> None:
    kafka = Kafka(kafka_broker.bootstrap)
    topic = kafka.topic(partitions=1)
    for i in range(HISTORY):  # more than the kernel's socket buffers take
        kafka.produce(topic, VALUE + b"%d" % i)
    kafka.flush()
    port = free_port()
    config = tmp_path / "zilla.yaml"
    zc.write(config, daemon_config(port, kafka_broker.bootstrap, LIMITED))
    # limits.streams is counted per process (docs/operations.md, Workers)
    daemon: Daemon = start_daemon(config, wait_ports=[port], extra_args=["--workers", "1"])
    path = f"/events/{topic}"
    try:
        h1_sock = silent_h1(port, path)
        h2_sock, h2_state = silent_h2(port, path, 3)
        daemon.wait_output("BINDING_HTTP_REQUEST_ACCEPTED", timeout=10)
        deadline = time.monotonic() + 10
        while daemon.output().count("BINDING_HTTP_REQUEST_ACCEPTED") < 4:
            assert time.monotonic() < deadline, daemon.output()
            time.sleep(0.05)
        # four streams open: a fifth is told to come back, with a 200 that ends
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("GET", path)
        r = conn.getresponse()
        assert (r.status, r.getheader("Content-Type")) == (200, "text/event-stream")
        assert r.read() == b"retry:900\n\n: try later: 4 streams open (limits.streams)\n\n"
        conn.close()
        # the silent ones are reset after max-lag: the HTTP/1.1 connection, each HTTP/2 stream
        deadline = time.monotonic() + 10
        while daemon.output().count("BINDING_SSE_STREAM_STALLED") < 4:
            assert time.monotonic() < deadline, daemon.output()
            time.sleep(0.05)
        assert closed(h1_sock), "the silent HTTP/1.1 connection is still open"
        h2_sock.settimeout(5)
        resets: set[int] = set()
        while len(resets) < 3:
            data = h2_sock.recv(65536)
            assert data, f"connection closed with resets {resets}"
            for event in h2_state.receive_data(data):
                if isinstance(event, h2.events.StreamReset):
                    resets.add(event.stream_id)
        # room again: a new stream is served
        with SseClient(port, path, timeout=10) as client:
            assert client.status == 200 and len(client.events(HISTORY, timeout=30)) == HISTORY
        out = daemon.output()
        assert "Traceback" not in out and "Unhandled" not in out, out
        h1_sock.close()
        h2_sock.close()
    finally:
        daemon.stop()

