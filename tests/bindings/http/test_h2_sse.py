"""SSE over HTTP/2 (TLS with ALPN, and cleartext h2c) and HTTP/1.1 over TLS, end to end.

The real daemon reads a real broker (tansu) and real clients read the streams: curl for the
command lines a user types, an `h2`-package client for 100 streams on one connection.
"""

from __future__ import annotations

import select
import subprocess
import time
from collections.abc import Iterator

import pytest

from ssekd.dev.broker import Broker
from tests.support.broker import Kafka
from tests.support.daemon import Daemon, start_daemon
from tests.support.h2client import H2SseClient
from tests.support.pki import ENV, Pki, sse_config
from tests.support.wait import wait_until

pytestmark = [pytest.mark.daemon, pytest.mark.broker]

IDLE_TIMEOUT = 3.0  # the http binding's idle timeout (HTTP/2: GOAWAY after this long idle)
KEEPALIVE = 1.0  # the sse binding's max-idle-time, below it
CONNECTION_HEADERS = {"connection", "keep-alive", "transfer-encoding", "upgrade",
                      "proxy-connection"}


@pytest.fixture(scope="module")
def sse(kafka_broker: Broker, pki: Pki, tmp_path_factory: pytest.TempPathFactory
        ) -> Iterator[tuple[Daemon, int, int]]:
    config, tls_port, clear_port = sse_config(tmp_path_factory.mktemp("h2sse"), pki.keys,
                                              kafka_broker.bootstrap, idle_timeout=IDLE_TIMEOUT,
                                              keepalive=KEEPALIVE)
    daemon = start_daemon(config, ENV, wait_ports=[tls_port, clear_port])
    yield daemon, tls_port, clear_port
    daemon.stop()


def _read_until(proc: subprocess.Popen[bytes], buffer: bytearray, marker: bytes,
                timeout: float = 15) -> None:
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    while marker not in buffer:
        left = deadline - time.monotonic()
        assert left > 0, f"{marker!r} not seen in {bytes(buffer)!r}"
        if select.select([proc.stdout], [], [], left)[0]:
            chunk = proc.stdout.read1(65536)  # type: ignore[attr-defined]
            assert chunk, f"curl ended: {bytes(buffer)!r}"
            buffer += chunk


@pytest.mark.parametrize("mode", ["--http2", "--http1.1", "--http2-prior-knowledge"])
def test_curl_streams_live(sse: tuple[Daemon, int, int], kafka: Kafka, pki: Pki,
                           mode: str) -> None:
    _, tls_port, clear_port = sse
    topic = kafka.topic(1)
    if mode == "--http2-prior-knowledge":
        url, extra = f"http://localhost:{clear_port}/{topic}", []
    else:
        url = f"https://localhost:{tls_port}/{topic}"
        extra = ["--cacert", str(pki.ca_pem)]
    proc = subprocess.Popen(["curl", "-sS", "-N", "-i", mode, *extra, url],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        out = bytearray()
        _read_until(proc, out, b"\r\n\r\n")
        head = out.decode().lower()
        assert head.startswith("http/2 200" if "2" in mode else "http/1.1 200"), head
        assert "content-type: text/event-stream" in head
        if "2" in mode:
            assert not any(f"\n{h}:" in head for h in CONNECTION_HEADERS), head
        kafka.send(topic, [b"one", b"two\nlines"])  # produced after the stream opened
        _read_until(proc, out, b"data:two\ndata:lines\n\n")
        body = bytes(out).split(b"\r\n\r\n", 1)[1]
        assert b"data:one\n\n" in body
    finally:
        proc.terminate()
        proc.wait(5)


@pytest.mark.parametrize("together", [False, True], ids=["a-write-each", "one-write"])
@pytest.mark.parametrize("secure", [True, False], ids=["h2-tls", "h2c"])
def test_hundred_streams_on_one_connection_all_get_every_event(
        sse: tuple[Daemon, int, int], kafka: Kafka, pki: Pki, secure: bool,
        together: bool) -> None:
    """Also with all hundred HEADERS in one write, which the daemon hands on a few per reactor
    turn, reading paused in between (over TLS, the TLS layer may deliver more meanwhile)."""
    _, tls_port, clear_port = sse
    topic = kafka.topic(3)
    port, ca = (tls_port, pki.ca_pem) if secure else (clear_port, None)
    with H2SseClient(port, ca=ca) as client:
        ids = [client.open(f"/{topic}", flush=not together) for _ in range(100)]
        client.flush()  # all hundred in one write (together), or nothing left
        assert client.wait(lambda: all(client.streams[i].headers for i in ids))
        for i in ids:
            headers = client.streams[i].headers
            assert headers[":status"] == "200"
            assert headers["content-type"] == "text/event-stream"
            assert not CONNECTION_HEADERS & set(headers), headers
        values = [f"event {n}".encode() for n in range(50)]
        kafka.send(topic, values)
        assert client.wait(lambda: all(len(client.streams[i].data) >= 50 for i in ids), 30), \
            sorted({len(client.streams[i].data) for i in ids})
        first = client.streams[ids[0]]
        assert sorted(first.data) == sorted(v.decode() for v in values)
        for i in ids:
            assert client.streams[i].ids == first.ids  # the same events, the same ids, in order
            assert not client.streams[i].reset and not client.streams[i].ended
        assert client.terminated is None


def test_keepalive_holds_an_http2_stream_past_the_idle_timeout(
        sse: tuple[Daemon, int, int], kafka: Kafka, pki: Pki) -> None:
    _, tls_port, _ = sse
    topic = kafka.topic(1)
    with H2SseClient(tls_port, ca=pki.ca_pem) as idle, \
            H2SseClient(tls_port, ca=pki.ca_pem) as streaming:
        stream = streaming.open(f"/{topic}")

        def idle_told_to_go() -> bool:
            idle.pump(0.05)
            streaming.pump(0.05)
            return idle.terminated is not None

        def kept_past_the_timeout() -> bool:  # one keepalive a second
            idle.pump(0.05)
            streaming.pump(0.05)
            return streaming.streams[stream].comments >= IDLE_TIMEOUT + 1

        # the idle timeout is real: a connection without streams is sent GOAWAY ...
        wait_until(idle_told_to_go, IDLE_TIMEOUT * 3, interval=0)
        # ... while the SSE stream's keepalives keep its connection open well past it
        wait_until(kept_past_the_timeout, IDLE_TIMEOUT * 3, interval=0)
        assert streaming.terminated is None and not streaming.streams[stream].ended
        kafka.send(topic, [b"still here"])
        assert streaming.wait(lambda: streaming.streams[stream].data == ["still here"])


def test_h2c_and_http11_share_the_cleartext_port(sse: tuple[Daemon, int, int], kafka: Kafka,
                                                 ) -> None:
    _, _, clear_port = sse
    topic = kafka.topic(1)
    kafka.send(topic, [b"history"])
    out = subprocess.run(["curl", "-sS", "-N", "--max-time", "3", "--http1.1",
                          f"http://localhost:{clear_port}/{topic}"],
                         capture_output=True, check=False).stdout
    assert b"data:history\n\n" in out
    with H2SseClient(clear_port) as client:
        s = client.open(f"/{topic}")
        assert client.wait(lambda: client.streams[s].data == ["history"])

