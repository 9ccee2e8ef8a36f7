"""The SSE relay on real parts: a relay ssekd (sse server -> sse client) in front of an upstream
ssekd serving a Kafka topic from the session's broker.

- 500 streams on the relay each get every event exactly once, while the upstream serves ONE
  stream (its own metrics say so);
- the upstream killed (SIGKILL) and started again: the relay's streams lose nothing and repeat
  nothing, with the upstream's ids carried through (the relay asked it from its Last-Event-ID);
- a relay stream that reconnects with an id the ring holds resumes right after it; one whose id
  is older than the ring starts at the ring's start, told so by a comment.
"""

from __future__ import annotations

import resource
from collections.abc import Iterator
from pathlib import Path

import pytest

from ssekd.dev.broker import Broker, free_port
from tests.support.broker import Kafka
from tests.support.daemon import start_daemon
from tests.support.relay import ONE_PROCESS, Relay, Upstream, start_relay, write_upstream
from tests.support.sse import Event, SseClient
from tests.support.streamd import WWW
from tests.support.wait import wait_until

SHIPPED = Path(__file__).resolve().parents[3] / "etc" / "zilla-relay.yaml"

pytestmark = [pytest.mark.daemon, pytest.mark.broker]

CLIENTS = 500


@pytest.fixture
def upstream(tmp_path: Path, kafka_broker: Broker) -> Iterator[Upstream]:
    up = write_upstream(tmp_path, kafka_broker.bootstrap)
    up.start()
    yield up
    up.stop()


@pytest.fixture
def relay(tmp_path: Path, upstream: Upstream) -> Iterator[Relay]:
    r = start_relay(tmp_path, upstream.port, relay_options="{retry: 200, history: 20}")
    yield r
    r.daemon.stop()


def pairs(events: list[Event]) -> list[tuple[str | None, str | None]]:
    return [(e.id, e.data) for e in events]


def test_500_streams_get_every_event_once_over_one_upstream_stream(kafka: Kafka, relay: Relay,
                                                                   upstream: Upstream) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < CLIENTS + 100:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
    topic = kafka.topic(1)
    clients = [relay.open(f"/events/{topic}") for _ in range(CLIENTS)]
    try:
        assert {c.status for c in clients} == {200}
        assert {c.headers["Content-Type"] for c in clients} == {"text/event-stream"}
        # one upstream stream per process: each worker of a relay has its own (500 clients land
        # on every worker)
        processes = len(relay.daemon.worker_pids()) or 1
        wait_until(lambda: upstream.metric("stream_opens_sent_total") == processes, 10,
                   what=lambda: f"upstream streams: {upstream.metric('stream_opens_sent_total')}")
        kafka.send(topic, [b"event %d" % i for i in range(50)])
        markers = kafka.mark(topic)
        with SseClient(upstream.port, f"/events/{topic}") as direct:
            expected = pairs(direct.until(markers))
        assert [d for _, d in expected] == [f"event {i}" for i in range(50)]
        for c in clients:
            assert pairs(c.until(markers)) == expected
        # the relay's, and `direct`
        assert upstream.metric("stream_opens_sent_total") == processes + 1
        assert upstream.metric("stream_active_sent") == processes
        relay.daemon.wait_output("BINDING_SSE_UPSTREAM_CONNECTED", count=processes)
        assert relay.daemon.output().count("BINDING_SSE_UPSTREAM_CONNECTED") == processes
    finally:
        for c in clients:
            c.close()


def test_upstream_killed_and_restarted_loses_nothing_and_repeats_nothing(
        kafka: Kafka, relay: Relay, upstream: Upstream) -> None:
    topic = kafka.topic(1)  # one order, so a direct stream's ids are the ones the relay read
    clients = [relay.open(f"/events/{topic}") for _ in range(5)]
    try:
        kafka.send(topic, [b"before %d" % i for i in range(10)])
        got = [c.events(10) for c in clients]
        upstream.kill()
        relay.daemon.wait_output("BINDING_SSE_UPSTREAM_FAILED")
        kafka.send(topic, [b"while down %d" % i for i in range(10)])
        upstream.start()
        relay.daemon.wait_output("from Last-Event-ID", timeout=20)
        kafka.send(topic, [b"after %d" % i for i in range(10)])
        markers = kafka.mark(topic)
        for mine, c in zip(got, clients, strict=True):
            mine += c.until(markers, timeout=20)
        with SseClient(upstream.port, f"/events/{topic}") as direct:
            expected = pairs(direct.until(markers))
        assert len(expected) == 30
        for mine in got:
            # every event once, with the upstream's own ids, in the upstream's order
            assert pairs(mine) == expected
    finally:
        for c in clients:
            c.close()


def test_a_stream_reconnecting_with_an_id_resumes_from_the_ring(kafka: Kafka, tmp_path: Path,
                                                                 upstream: Upstream) -> None:
    # the ring of one relay process: with workers, the reconnect may reach another one's
    relay = start_relay(tmp_path, upstream.port, relay_options="{retry: 200, history: 20}",
                        extra_args=ONE_PROCESS)
    try:
        ring_resumes(kafka, relay, upstream)
    finally:
        relay.daemon.stop()


def ring_resumes(kafka: Kafka, relay: Relay, upstream: Upstream) -> None:
    topic = kafka.topic(1)
    with relay.open(f"/events/{topic}") as first:
        kafka.send(topic, [b"e%d" % i for i in range(10)])
        seen = first.events(10)
        # keeps the upstream connection (and the ring) while the other one is away
        kafka.send(topic, [b"e%d" % i for i in range(10, 15)])
        first.events(5)
        with relay.open(f"/events/{topic}", {"Last-Event-ID": str(seen[6].id)}) as back:
            assert [e.data for e in back.events(8)] == [f"e{i}" for i in range(7, 15)]
            assert back.comment_lines == []
        # 30 more: the ring (history 20) no longer holds seen[6]
        kafka.send(topic, [b"e%d" % i for i in range(15, 45)])
        first.events(30)
        with relay.open(f"/events/{topic}", {"Last-Event-ID": str(seen[6].id)}) as old:
            assert [e.data for e in old.events(20)] == [f"e{i}" for i in range(25, 45)]
            assert any("not among the 20 events this relay holds" in line
                       for line in old.comment_lines)
        with relay.open(f"/events/{topic}?lastEventId={seen[6].id}") as by_query:
            assert by_query.events(1)[0].data == "e25"
    assert upstream.metric("stream_opens_sent_total") == 1


def test_the_shipped_relay_config_relays_the_upstream(kafka: Kafka, upstream: Upstream,
                                                      tmp_path: Path) -> None:
    """etc/zilla-relay.yaml as shipped, only its ports and the demo page's folder moved here."""
    port = free_port()
    text = SHIPPED.read_text()
    for old, new in (("port: 7115", f"port: {port}"), ("port: 7114", f"port: {upstream.port}"),
                     ("location: ../www/", f"location: {WWW}/")):
        assert old in text
        text = text.replace(old, new)
    config = tmp_path / "zilla-relay.yaml"
    config.write_text(text)
    relay = start_daemon(config, wait_ports=[port])
    try:
        topic = kafka.topic(1)
        with SseClient(port, f"/events/{topic}") as client:
            kafka.send(topic, [b"shipped"])
            assert client.events(1)[0].data == "shipped"
        with SseClient(port, "/") as page:  # the demo page beside the relayed stream
            assert page.status == 200 and "text/html" in page.headers["Content-Type"]
    finally:
        relay.stop()
