"""gzip on event streams against the real daemon and broker, read by real clients (an ssekd
addition, the sse server's `compression`): a raw HTTP/1.1 reader decoding as bytes arrive gets
each live event while the stream is open (so every batch was flushed), curl `--compressed`
over HTTP/1.1 and HTTP/2, headless Chromium's EventSource, the trailer at a drain, and plain
bytes for a client that does not ask or a route that says `compress: false`; with `context:
event`, each event on the wire decodes with no history at all (no length oracle across events)."""

from __future__ import annotations

import json
import subprocess
import urllib.request
import zlib
from pathlib import Path

import pytest

from ssekd.dev.broker import Broker, free_port
from tests.support.broker import Kafka
from tests.support.browser import Browser
from tests.support.daemon import start_daemon
from tests.support.sse import Event, SseClient
from tests.support.streamd import write_config
from tests.support.wait import wait_until

pytestmark = [pytest.mark.daemon, pytest.mark.broker]

GZIP = {"Accept-Encoding": "gzip, deflate, br"}


def _records(n: int, start: int = 0) -> list[bytes]:
    """JSON values of the same shape, as a topic of one kind of thing holds."""
    return [json.dumps({"id": f"order-{i}", "customer": f"customer-{i % 7}", "status": "open",
                        "total": {"amount": 100 + i, "currency": "EUR"}}).encode()
            for i in range(start, start + n)]


def _gzip_input(metrics_port: int) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as r:
        text = r.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("sse_gzip_input_bytes_total"))


def _curl(url: str, *args: str) -> tuple[dict[str, str], bytes]:
    """curl on a stream for 3 s (it never ends by itself): the headers and the decoded body."""
    result = subprocess.run(["curl", "-sN", "-m", "3", "-D", "-", *args, url],
                            capture_output=True, timeout=15)
    assert result.returncode == 28, result.stderr  # stopped by -m, not by an error
    head, _, body = result.stdout.partition(b"\r\n\r\n")
    headers = {}
    for line in head.decode("latin-1").split("\r\n")[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return headers, body


@pytest.mark.timeout(120)
def test_gzip_where_asked_flushed_per_batch(kafka: Kafka, kafka_broker: Broker,
                                            tmp_path: Path) -> None:
    topic = kafka.topic(1)
    port, metrics_port = free_port(), free_port()
    config = write_config(tmp_path, kafka_broker.bootstrap, port, compression="{}",
                          prometheus_port=metrics_port)
    first = _records(200)
    kafka.send(topic, first)
    daemon = start_daemon(config, wait_ports=[port, metrics_port])
    try:
        with SseClient(port, f"/events/{topic}", GZIP) as c:
            assert c.gzip and c.headers.get("Vary") == "Accept-Encoding"
            got = c.events(len(first))
            assert [e.data for e in got] == [v.decode() for v in first]
            plain = sum(len(f"id:{e.id}\ndata:{e.data}\n\n") for e in got)
            assert c.body_bytes < plain / 3, (c.body_bytes, plain)
            # live records, one batch each: each decodes while the stream is open
            for value in _records(3, start=200):
                kafka.send(topic, [value])
                [event] = c.events(1)
                assert event.data == value.decode()
        with SseClient(port, f"/events/{topic}") as c:  # no Accept-Encoding: plain
            assert not c.gzip and c.headers.get("Vary") == "Accept-Encoding"
            assert c.events(1)[0].data == first[0].decode()
        with SseClient(port, f"/packed/{topic}", GZIP) as c:  # compress: false
            assert not c.gzip
            assert c.events(1)[0].data == first[0].decode()
        for http in ((), ("--http2-prior-knowledge",)):
            headers, body = _curl(f"http://127.0.0.1:{port}/events/{topic}", "--compressed",
                                  *http)
            assert headers.get("content-encoding") == "gzip", (http, headers)
            data = [line[5:] for line in body.decode().split("\n") if line.startswith("data:")]
            assert data == [v.decode() for v in first + _records(3, start=200)], http
        assert _gzip_input(metrics_port) > 0
        # a drain ends the stream with a finished response: the gzip member is whole
        c = SseClient(port, f"/events/{topic}", GZIP)
        c.events(len(first) + 3)
        daemon.stop()
        assert c.next_event(timeout=10) is None and c.ended
        assert c._gunzip is not None and c._gunzip.eof, "the trailer arrived"
        c.close()
    finally:
        daemon.stop()


@pytest.mark.browser
@pytest.mark.timeout(120)
def test_a_browser_reads_a_gzip_stream_as_it_comes(kafka: Kafka, kafka_broker: Broker,
                                                   tmp_path: Path) -> None:
    """Chromium asks for gzip on its own; the demo page's EventSource shows every record, the
    live ones too (each came in a flushed batch)."""
    topic = kafka.topic(2)
    port, metrics_port = free_port(), free_port()
    config = write_config(tmp_path, kafka_broker.bootstrap, port, compression="{level: 1}",
                          prometheus_port=metrics_port)
    kafka.send(topic, _records(10))
    daemon = start_daemon(config, wait_ports=[port, metrics_port])
    browser = Browser(f"http://127.0.0.1:{port}/www/index.html?stream=/events/{topic}")
    try:
        expr = "window.ssekd && window.ssekd.received.length"
        wait_until(lambda: browser.evaluate(expr) == 10, 30, interval=0.1,
                   what=lambda: f"{browser.evaluate(expr)} events")
        before = _gzip_input(metrics_port)
        assert before > 0, "the browser's stream is the only one, and it is gzip"
        for value in _records(5, start=10):
            kafka.send(topic, [value])
            want = int(json.loads(value)["id"].split("-")[1]) + 1
            wait_until(lambda n=want: browser.evaluate(expr) == n, 20, interval=0.05,  # type: ignore[misc]
                       what=lambda: f"{browser.evaluate(expr)} events")
        assert _gzip_input(metrics_port) > before
        received = json.loads(browser.evaluate("JSON.stringify(window.ssekd.received)"))
        assert sorted(json.loads(r["data"])["id"] for r in received) == \
            sorted(f"order-{i}" for i in range(15))
    finally:
        browser.close()
        daemon.stop()


class WireClient(SseClient):
    """`SseClient` that also keeps the body as it came off the wire (gzip, de-chunked)."""

    def _take(self, body: bytes) -> None:
        self.wire = getattr(self, "wire", b"") + body
        super()._take(body)


def _flushed_pieces(body: bytes) -> list[bytes]:
    """A gzip body cut after each flush marker (the empty stored block a flush ends with,
    `00 00 ff ff`), its 10-byte header left off: each piece is what one flush sent."""
    assert body[:3] == b"\x1f\x8b\x08" and body[3] == 0, "zlib's gzip header, no name"
    pieces = body[10:].split(b"\x00\x00\xff\xff")
    assert pieces[-1] == b"", "the stream is open: its last bytes are a flush"
    return [p + b"\x00\x00\xff\xff" for p in pieces[:-1]]


def _wire_text(events: list[Event]) -> bytes:
    return b"".join(f"id:{e.id}\ndata:{e.data}\n\n".encode() for e in events)


@pytest.mark.timeout(120)
def test_context_event_sends_each_event_alone_and_decodes_to_exactly_the_events(
        kafka: Kafka, kafka_broker: Broker, tmp_path: Path) -> None:
    """`compression: {context: event}` on a real daemon: a stream caught up in one batch (a
    secret, then a writer's records that repeat it or not) and live records one at a time decode
    to exactly the events, with curl `--compressed` (HTTP/1.1 and HTTP/2) and with Python's gzip
    on the raw bytes; and each event's bytes on the wire inflate with a fresh decoder, knowing
    nothing sent before them, so no event's size can depend on another's content."""
    topic = kafka.topic(1)
    port = free_port()
    config = write_config(tmp_path, kafka_broker.bootstrap, port,
                          compression="{context: event}")
    secret = b'{"user":"alice","session":"tok_Q7xK2mZ9vR4p"}'
    guesses = [b'{"user":"mallory","session":"tok_%s"}' % g
               for g in (b"Q7xK2mZ9vR4p", b"p4Rv9Zm2Kx7Q", b"Q7xK2mZ9vR4x")]
    first = [secret, *guesses, *_records(40)]
    kafka.send(topic, first)
    daemon = start_daemon(config, wait_ports=[port])
    try:
        with WireClient(port, f"/events/{topic}", GZIP) as c:
            assert c.gzip
            got = c.events(len(first))
            live = _records(3, start=40)
            for value in live:  # one batch each, each decoded while the stream is open
                kafka.send(topic, [value])
                got += c.events(1)
            assert [e.data for e in got] == [v.decode() for v in first + live]
            wire = c.wire
        assert zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(wire) == _wire_text(got)
        pieces = _flushed_pieces(wire)
        alone = [zlib.decompressobj(-zlib.MAX_WBITS).decompress(p) for p in pieces]
        assert alone[0] == b"", "the first flush: the header only (no retry on this route)"
        assert alone[1:] == [_wire_text([e]) for e in got], "one event to a flush, each whole"
        for http in ((), ("--http2-prior-knowledge",)):
            headers, body = _curl(f"http://127.0.0.1:{port}/events/{topic}", "--compressed",
                                  *http)
            assert headers.get("content-encoding") == "gzip", (http, headers)
            assert body == _wire_text(got), http
    finally:
        daemon.stop()
