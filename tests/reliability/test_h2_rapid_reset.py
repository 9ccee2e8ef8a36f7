"""HTTP/2 rapid reset (the CVE-2023-44487 pattern): a client that opens and resets streams as
fast as it can must be sent away, without tracebacks and without disturbing other clients."""

from __future__ import annotations

import uuid
from typing import Any

import h2.errors
import h2.events
import h2.settings
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from twisted.internet.interfaces import IPushProducer
from twisted.internet.testing import MemoryReactorClock
from twisted.web.server import NOT_DONE_YET
from zope.interface import implementer

from ssekd.bindings.http.channel import Limits
from ssekd.bindings.http.roles import HttpContext
from ssekd.dev.broker import Broker
from tests.support.daemon import Daemon
from tests.support.h2client import H2SseClient
from tests.support.http_fakes import GetOnly, H2Peer, http_site
from tests.support.reliability import RawH2, tracebacks

PAIRS = 1000


def _topic(bootstrap: str) -> str:
    name = f"reset-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})  # alive until the topic exists
    for future in admin.create_topics([NewTopic(name, 1, 1)]).values():
        future.result(10)
    return name


def _produce(bootstrap: str, topic: str, value: bytes) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1})
    producer.produce(topic, value=value)
    assert producer.flush(10) == 0


@pytest.mark.daemon
@pytest.mark.broker
def test_a_thousand_headers_and_resets_get_goaway_and_others_keep_streaming(
        served: tuple[Daemon, int], kafka_broker: Broker) -> None:
    daemon, port = served
    topic = _topic(kafka_broker.bootstrap)
    with H2SseClient(port) as watcher:
        stream = watcher.open(f"/{topic}")
        assert watcher.wait(lambda: bool(watcher.streams[stream].headers))
        _produce(kafka_broker.bootstrap, topic, b"before")
        assert watcher.wait(lambda: watcher.streams[stream].data == ["before"])

        attacker = RawH2(port)
        try:
            for n in range(PAIRS):
                if attacker.of(h2.events.ConnectionTerminated):
                    break  # sent away already
                stream_id = attacker.request("GET", f"/{topic}")
                attacker.conn.reset_stream(stream_id, h2.errors.ErrorCodes.CANCEL)
                if n % 50 == 49:
                    try:
                        attacker.flush()
                    except OSError:
                        break  # sent away already
                    attacker.pump(0)
            try:
                attacker.flush()
            except OSError:
                pass
            attacker.wait(lambda: bool(attacker.of(h2.events.ConnectionTerminated)))
            goaway = attacker.of(h2.events.ConnectionTerminated)
        finally:
            attacker.close()
        assert goaway and goaway[0].error_code == h2.errors.ErrorCodes.ENHANCE_YOUR_CALM, \
            attacker.events[-5:]

        _produce(kafka_broker.bootstrap, topic, b"after")
        assert watcher.wait(lambda: watcher.streams[stream].data == ["before", "after"])
        assert watcher.terminated is None and not watcher.streams[stream].reset
    assert tracebacks(daemon) == [], daemon.output()[-3000:]


# -- on a clock ----------------------------------------------------------------------------------


def _peer(h2_resets: int = 100) -> tuple[H2Peer, GetOnly]:
    events = GetOnly()
    return H2Peer(http_site(MemoryReactorClock(), events, Limits(h2_resets=h2_resets))), events


def _open_and_reset(peer: H2Peer) -> int:
    stream_id = peer.request("GET", "/")
    peer.client.reset_stream(stream_id, h2.errors.ErrorCodes.CANCEL)
    return stream_id


def test_more_resets_than_the_limit_in_ten_seconds_get_goaway() -> None:
    peer, _ = _peer(h2_resets=100)
    for _ in range(100):
        _open_and_reset(peer)
        peer.send()
        peer.clock.advance(0.05)
    peer.read()
    assert peer.goaway() is None and not peer.transport.disconnecting
    _open_and_reset(peer)
    peer.send()
    peer.read()
    goaway = peer.goaway()
    assert goaway is not None and goaway.error_code == h2.errors.ErrorCodes.ENHANCE_YOUR_CALM
    assert peer.transport.disconnecting


def test_resets_spread_over_time_are_fine() -> None:
    peer, _ = _peer(h2_resets=100)
    for _ in range(600):  # 9 a second for over a minute
        _open_and_reset(peer)
        peer.send()
        peer.clock.advance(1 / 9)
    peer.read()
    assert peer.goaway() is None and not peer.transport.disconnecting


def test_a_stream_reset_in_the_same_read_is_never_rendered() -> None:
    peer, events = _peer()
    for _ in range(20):
        _open_and_reset(peer)
    peer.send()  # all forty frames in one read
    peer.read()
    assert events.rendered == []
    assert peer.server.streams == {}
    assert peer.goaway() is None
    stream_id = peer.request("GET", "/")  # the connection goes on
    peer.send()
    peer.read()
    assert peer.status(stream_id) == "200"


@implementer(IPushProducer)
class Pushing:
    """An exit whose responses are pushed by a producer, as the sse binding's streams are: it
    writes as soon as it is resumed."""

    max_idle: float | None = None
    takes_body = False

    def __init__(self) -> None:
        self.requests: list[Any] = []
        self.resumed = 0

    def render(self, request: Any, ctx: HttpContext) -> int:
        self.requests.append(request)
        request.registerProducer(self, True)
        request.write(b"x" * 16)
        return NOT_DONE_YET

    def pauseProducing(self) -> None:
        pass

    def resumeProducing(self) -> None:
        self.resumed += 1
        for request in self.requests:
            request.write(b"more")

    def stopProducing(self) -> None:
        pass


def test_a_window_update_and_a_reset_in_one_read_do_not_raise() -> None:
    """The stream's producer, paused by flow control, is woken by a WINDOW_UPDATE that arrives
    together with the stream's reset and a new stream: by the time Twisted handles the update,
    `h2` has closed the stream and forgotten it (a new stream makes it prune closed ones)."""
    exit = Pushing()
    peer = H2Peer(http_site(MemoryReactorClock(), exit))
    peer.client.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 16})
    peer.send()
    peer.read()
    stream_id = peer.request("GET", "/")
    peer.send()
    peer.read()
    assert len(exit.requests) == 1 and peer.status(stream_id) == "200"
    peer.client.increment_flow_control_window(100, stream_id)
    peer.client.reset_stream(stream_id, h2.errors.ErrorCodes.CANCEL)
    following = peer.request("GET", "/")
    peer.send()
    peer.read()
    assert list(peer.server.streams) == [following]
    assert peer.status(following) == "200"
    assert peer.goaway() is None and not peer.transport.disconnecting


def test_a_flood_of_priority_frames_for_idle_streams_does_not_raise() -> None:
    """PRIORITY may name streams that were never opened; Twisted put each into its priority
    tree, which refuses its 1001st stream with an exception that dropped the connection."""
    peer, _ = _peer()
    for stream_id in range(1, 4001, 2):
        peer.client.prioritize(stream_id, weight=16)
    peer.send()
    peer.read()
    assert peer.goaway() is None and not peer.transport.disconnecting
    stream_id = peer.request("GET", "/")  # the next stream id after the ones named
    peer.send()
    peer.read()
    assert peer.status(stream_id) == "200"
