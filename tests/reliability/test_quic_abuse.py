"""Hostile QUIC clients against the real daemon: what each may cost, and that nobody else pays.

A quic binding takes packets from anyone who can reach its UDP port (docs/security.md, "QUIC").
Each test below is one kind of abuse, played by real UDP sockets against `twistd ssekd` with a
real broker, while (where it matters) an honest HTTP/3 client keeps streaming beside it:

* first packets that never come back with their Retry token: answered with one packet no larger
  than what came in, and no connection is kept;
* garbage, truncated and undersized packets: dropped unanswered, nothing raised, the honest
  stream goes on complete;
* more connections from one address than `connections-per-ip`: the extra one gets no handshake;
* more request streams than the connection's `limits.streams`: the client's stream credit holds
  them back until streams end;
* a client that stops acknowledging (its process frozen) while its streams have events to send:
  what the daemon holds for it stays within `h3-unsent-bytes`, its streams are cut at `max-lag`,
  its connection is dropped at the idle timeout, and the honest client beside it misses nothing;
* SIGTERM with `engine.drain`: the connection is told GOAWAY (a new request is refused, the open
  streams go on), then closed at once when the daemon stops, not left to its idle timeout.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from aioquic.h3.connection import ErrorCode as H3ErrorCode
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.connection import QuicConnection

from ssekd.dev.broker import Broker
from tests.support import zilla_config as zc
from tests.support.broker import Kafka
from tests.support.faults import tracebacks, usage
from tests.support.h3stack import H3Daemon, Producer, start_h3_daemon
from tests.support.pki import Pki
from tests.support.wait import wait_until

pytestmark = [pytest.mark.daemon, pytest.mark.broker]

#: QUIC's smallest first datagram (RFC 9000 §14.1).
SMALLEST_INITIAL = 1200
PER_IP = 4
STREAMS = 8
UNSENT = 1 << 20
MAX_LAG = 3
#: QUIC's idle timeout: a client that sends nothing that long is dropped (streams keep an honest
#: client's connection busy far more often).
IDLE = 8


@pytest.fixture(scope="module")
def h3d(kafka_broker: Broker, pki: Pki, tmp_path_factory: pytest.TempPathFactory
        ) -> Iterator[H3Daemon]:
    daemon = start_h3_daemon(
        tmp_path_factory.mktemp("quicabuse"), pki, kafka_broker.bootstrap,
        quic={"limits": {"connections-per-ip": PER_IP, "streams": STREAMS,
                         "handshake-timeout": 3, "idle-timeout": IDLE}},
        http=zc.http_server(limits={"h3-unsent-bytes": UNSENT}),
        sse=zc.sse_server(options={"limits": {"max-lag": MAX_LAG}}))
    yield daemon
    daemon.stop()


def _first_flight(port: int) -> bytes:
    """A real client's first datagram (an Initial with its ClientHello, padded to 1,200 bytes)."""
    quic = QuicConnection(configuration=QuicConfiguration(is_client=True, alpn_protocols=["h3"],
                                                          server_name="localhost"))
    quic.connect(("127.0.0.1", port), now=time.monotonic())
    return quic.datagrams_to_send(now=time.monotonic())[0][0]


def _answers(sock: socket.socket, wait: float) -> list[bytes]:
    got: list[bytes] = []
    deadline = time.monotonic() + wait
    sock.settimeout(0.05)
    while time.monotonic() < deadline:
        try:
            got.append(sock.recv(65536))
        except TimeoutError:
            continue
    return got


def _open_connections(h3d: H3Daemon) -> float:
    return h3d.metric("quic_connections")


def _clean(h3d: H3Daemon) -> None:
    assert tracebacks(h3d.daemon.output()) == []
    assert h3d.daemon.alive()


def test_first_packets_without_the_token_get_one_small_retry_and_no_state(h3d: H3Daemon) -> None:
    # the start's probe connection ends a few round trips after its close (QUIC's draining)
    wait_until(lambda: _open_connections(h3d) == 0, 10, what="the probe connection to end")
    rss_before = usage(h3d.daemon.process.pid).rss
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sent = 0
        answers: list[bytes] = []
        for _ in range(10):
            flights = [_first_flight(h3d.quic_port) for _ in range(30)]
            for flight in flights:
                sock.sendto(flight, ("127.0.0.1", h3d.quic_port))
                sent += len(flight)
            answers += _answers(sock, 0.3)
        answers += _answers(sock, 1.0)
    assert len(answers) == 300, "each first packet is answered once (a Retry), no more"
    assert all(a[0] & 0xF0 == 0xF0 for a in answers), "every answer is a Retry packet"
    assert sum(map(len, answers)) < sent / 3, "the answers are far smaller than what came"
    assert _open_connections(h3d) == 0, "no connection kept for a client not validated"
    assert usage(h3d.daemon.process.pid).rss - rss_before < 16 << 20
    _clean(h3d)


def test_garbage_short_and_cut_packets_are_dropped_while_a_stream_goes_on(
        h3d: H3Daemon, kafka: Kafka) -> None:
    topic = kafka.topic(1)
    rng = random.Random(7)
    real = _first_flight(h3d.quic_port)
    hostile = [os.urandom(rng.randrange(0, 1500)) for _ in range(300)]
    hostile += [real[:n] for n in (1, 5, 6, 20, 60, 600, SMALLEST_INITIAL - 1)]  # cut short
    hostile += [bytes([0x40 | rng.randrange(64)]) + os.urandom(40) for _ in range(200)]  # short
    with h3d.client() as client, socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        stream = client.open(f"/{topic}")
        assert client.wait(lambda: client.streams[stream].status == 200, 10)
        producer = Producer(kafka, topic).start()
        for packet in hostile:
            sock.sendto(packet, ("127.0.0.1", h3d.quic_port))
        unanswered = _answers(sock, 1.0)
        produced = producer.stop()
        assert client.wait(lambda: client.streams[stream].count >= len(produced), 20)
        assert client.streams[stream].data == produced, "the honest stream lost nothing"
        assert client.stats.handshakes == 1
    assert unanswered == [], "nothing is answered to packets of no connection"
    _clean(h3d)


def test_connections_from_one_address_stop_at_the_limit(h3d: H3Daemon) -> None:
    clients = [h3d.client() for _ in range(PER_IP)]
    try:
        with pytest.raises(ConnectionError):
            h3d.client(idle_timeout=5).connect(timeout=3)
        assert "BINDING_QUIC_CONNECTION_REFUSED" in h3d.daemon.output()
        clients.pop().close()
        # the count is given back as the connection closes: another may come
        wait_until(lambda: _open_connections(h3d) < PER_IP, 10, what="the connection to close")
        clients.append(h3d.client())
    finally:
        for c in clients:
            c.close()
    _clean(h3d)


def test_requests_past_the_stream_credit_wait_for_one_to_end(h3d: H3Daemon, kafka: Kafka) -> None:
    topic = kafka.topic(1)
    with h3d.client() as client:
        ids = client.open_many([f"/{topic}"] * (STREAMS + 3))
        first, waiting = ids[:STREAMS], ids[STREAMS:]
        assert client.wait(lambda: all(client.streams[i].status == 200 for i in first), 10)
        time.sleep(1.0)
        assert all(client.streams[i].status is None for i in waiting), \
            "the connection's stream credit holds the requests past it back"
        for i in first[:3]:
            client.cancel(i)
        assert client.wait(lambda: all(client.streams[i].status == 200 for i in waiting), 10), \
            "as streams end, the credit is handed back"
        producer = Producer(kafka, topic).start()
        time.sleep(0.5)
        produced = producer.stop()
        assert client.wait(lambda: all(client.streams[i].count >= len(produced)
                                       for i in first[3:] + waiting), 20)
        assert all(client.streams[i].data == produced for i in first[3:] + waiting)
    _clean(h3d)


def test_a_frozen_client_costs_a_bound_and_nobody_else_a_message(
        h3d: H3Daemon, kafka: Kafka) -> None:
    topic = kafka.topic(1)
    with h3d.client(keep_events=False) as honest, h3d.client() as frozen:
        honest_stream = honest.open(f"/{topic}")
        frozen_streams = frozen.open_many([f"/{topic}"] * STREAMS)
        assert frozen.wait(lambda: all(frozen.streams[s].status == 200
                                       for s in frozen_streams), 10)
        assert honest.wait(lambda: honest.streams[honest_stream].status == 200, 10)
        rss_before = usage(h3d.daemon.process.pid).rss
        frozen._lock.acquire()  # noqa: SLF001 - its I/O thread stops: no reads, no ACKs
        try:
            producer = Producer(kafka, topic, interval=0.002, size=2000).start()
            time.sleep(MAX_LAG + 4)
            produced = producer.stop()
            assert honest.wait(lambda: honest.streams[honest_stream].count >= len(produced), 30)
            assert honest.streams[honest_stream].count == len(produced)
            grown = usage(h3d.daemon.process.pid).rss - rss_before
            # a frozen client's connection holds at most h3-unsent-bytes (and one step per
            # stream); the producer wrote ~10 MB that each of its streams would have queued
            assert grown < 4 * UNSENT + (16 << 20), grown
            output = h3d.daemon.output()
            assert "why=max-lag" in output or "max-lag" in output, output[-3000:]
            # and the connection itself, silent, is dropped at the idle timeout: only the
            # honest client's is left
            wait_until(lambda: _open_connections(h3d) == 1, IDLE + 10,
                       what="the frozen client's connection to time out")
            assert honest.stats.handshakes == 1 and honest.terminated is None
        finally:
            frozen._lock.release()  # noqa: SLF001
    _clean(h3d)


def test_sigterm_tells_goaway_then_closes_at_once(kafka_broker: Broker, pki: Pki,
                                                  tmp_path: Path, kafka: Kafka) -> None:
    drain = 3.0
    h3d = start_h3_daemon(tmp_path, pki, kafka_broker.bootstrap, engine={"drain": drain})
    topic = kafka.topic(1)
    try:
        with h3d.client(idle_timeout=60) as client:
            stream = client.open(f"/{topic}")
            assert client.wait(lambda: client.streams[stream].status == 200, 10)
            producer = Producer(kafka, topic, interval=0.05).start()
            h3d.daemon.signal(signal.SIGTERM)
            signalled = time.monotonic()
            time.sleep(1.0)  # the drain watch looks every half second
            late = client.open(f"/{topic}")
            assert client.wait(lambda: client.streams[late].done, 5)
            assert client.streams[late].reset == H3ErrorCode.H3_REQUEST_REJECTED, \
                "after GOAWAY a new request is refused, to be sent elsewhere"
            during = client.streams[stream].count
            assert client.wait(lambda: client.streams[stream].count > during + 5, 5), \
                "the open stream goes on while the daemon drains"
            assert client.wait(lambda: client.terminated is not None, drain + 15), \
                "the daemon closes the connection as it stops"
            closed_after = time.monotonic() - signalled
            producer.stop()
            assert client.terminated is not None
            assert client.terminated.error_code == H3ErrorCode.H3_NO_ERROR
            assert closed_after < drain + 10, "closed when the daemon stopped, not idled out"
    finally:
        h3d.stop()
