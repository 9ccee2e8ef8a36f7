"""Topics named by the request: internal ones refused, idle ones dropped, missing ones given up,
and a full `max-topics` answered so that browsers come back (a 200 that ends), not with `503`.

Unit tests of the cache and the proxy on a `MemoryReactorClock`, the back-off on plain times,
then the real daemon and broker for what goes over the wire (statuses, a dropped topic followed
again from the start, a missing topic's streams ending by themselves).
"""

from __future__ import annotations

import http.client
import time
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.exposition import generate_latest
from twisted.internet.testing import MemoryReactorClock

from ssekd.bindings.kafka.cache import CacheServer
from ssekd.bindings.kafka.missing_topics import MissingTopics
from ssekd.bindings.kafka.topic_names import InternalTopics
from ssekd.bindings.sse.roles import StreamRequest, TryLater
from ssekd.bindings.sse_kafka.proxy import RouteSubscription, SseKafkaProxy, SseKafkaRoute
from ssekd.dev.broker import Broker, free_port
from ssekd.patterns import Pattern
from ssekd.telemetry.events import EventLog
from ssekd.telemetry.metrics import Metrics
from tests.support import zilla_config as zc
from tests.support.broker import Kafka
from tests.support.daemon import Daemon, start_daemon
from tests.support.sse import SseClient


class Client:
    """A kafka client that records what the cache asks of it."""

    def __init__(self) -> None:
        self.consumed: list[tuple[str, int | None]] = []
        self.dropped: list[str] = []
        self.tails: dict[str, Any] = {}  # no tail consumer: no lag to report

    def consume(self, owner: str, topic: str, sink: Any, from_end: bool = False,
                give_up_after: int | None = None) -> None:
        self.consumed.append((topic, give_up_after))

    def unconsume(self, owner: str, topic: str) -> None:
        self.dropped.append(topic)


class Sink:
    ended = False

    def write(self, data: bytes) -> None:
        pass

    def end(self) -> None:
        self.ended = True


def _server(clock: MemoryReactorClock, **kw: Any) -> tuple[CacheServer, Client]:
    client = Client()
    server = CacheServer(clock, client, "cache", EventLog("t"), **kw)  # type: ignore[arg-type]
    server.startService()
    return server, client


def _proxy(server: CacheServer, internal: tuple[str, ...] = ()) -> SseKafkaProxy:
    routes = (
        SseKafkaRoute((Pattern.compile("/offsets"),), "cache", {"topic": "__consumer_offsets"}),
        SseKafkaRoute((Pattern.compile("/events/{topic}"),), "cache", None),
    )
    return SseKafkaProxy("sse_kafka", routes, {"cache": server}, EventLog("t"),  # type: ignore[dict-item]
                         internal_topics=InternalTopics.of(internal))


def _open(proxy: SseKafkaProxy, path: str, sink: Any = None) -> Any:
    return proxy.open(StreamRequest(path, None, describe=f"GET {path}"), sink or Sink())


# -- internal topics ------------------------------------------------------------------------------

@pytest.mark.parametrize("topic", ["__consumer_offsets", "_schemas", "__transaction_state",
                                   "connect-configs", "connect-offsets", "connect-status",
                                   "audit-log", "orders-changelog"])
def test_internal_topics_from_the_path_are_404(topic: str) -> None:
    server, client = _server(MemoryReactorClock())
    proxy = _proxy(server, internal=("audit-log", "*-changelog"))
    assert _open(proxy, f"/events/{topic}") == 404
    assert client.consumed == [], "nothing was consumed for it"
    assert any(f"{topic} is an internal topic" in line for line in proxy.events.recent)


def test_a_route_that_names_an_internal_topic_literally_serves_it() -> None:
    server, client = _server(MemoryReactorClock())
    proxy = _proxy(server)
    assert isinstance(_open(proxy, "/offsets"), RouteSubscription)
    assert isinstance(_open(proxy, "/events/orders_v2"), RouteSubscription)
    assert [t for t, _ in client.consumed] == ["__consumer_offsets", "orders_v2"]


# -- idle topics ----------------------------------------------------------------------------------

def test_a_topic_without_streams_for_idle_timeout_is_dropped_and_unassigned() -> None:
    clock = MemoryReactorClock()
    server, client = _server(clock, idle_timeout=300.0, bootstrap=["boot"])
    proxy = _proxy(server)
    a = _open(proxy, "/events/a")
    b = _open(proxy, "/events/a")
    a.close()
    clock.advance(1000)
    assert "a" in server.topics, "one stream still reads it"
    b.close()
    clock.advance(299)
    c = _open(proxy, "/events/a")  # back within the timeout: kept
    clock.advance(1)
    c.close()
    clock.advance(299)
    assert "a" in server.topics and client.dropped == []
    clock.advance(1)
    assert "a" not in server.topics and client.dropped == ["a"]
    assert any("BINDING_KAFKA_TOPIC_DROPPED a: no stream for 300 s" in line
               for line in server.events.recent)
    # asked for again: followed afresh
    _open(proxy, "/events/a")
    assert [t for t, _ in client.consumed].count("a") == 2
    # bootstrap topics stay, with or without streams
    _open(proxy, "/events/boot").close()
    clock.advance(10_000)
    assert "boot" in server.topics and "boot" not in client.dropped


def test_a_topic_asked_for_but_never_subscribed_is_dropped_too() -> None:
    clock = MemoryReactorClock()
    server, client = _server(clock, idle_timeout=5.0)
    server.topic("looked-up")  # e.g. a resume whose id was read, then the stream went away
    clock.advance(5)
    assert client.dropped == ["looked-up"]


def test_junk_names_cannot_hold_max_topics_and_a_full_cache_says_try_later() -> None:
    clock = MemoryReactorClock()
    server, _ = _server(clock, max_topics=3, idle_timeout=60.0)
    proxy = _proxy(server)
    for i in range(3):
        _open(proxy, f"/events/junk-{i}").close()
    answer = _open(proxy, "/events/orders")
    assert isinstance(answer, TryLater), f"{answer!r}: a 503 would make the browser give up"
    assert "max-topics" in answer.reason
    clock.advance(60)
    assert isinstance(_open(proxy, "/events/orders"), RouteSubscription)


def test_topics_refused_for_max_topics_leave_no_metric_series() -> None:
    """300 requests for made-up names against `max-topics: 2` used to leave 301
    `sse_kafka_filtered` series (names up to 249 characters), one per name, for ever: the
    counter was made before the cache refused the topic, and only a topic the cache followed
    is forgotten when it goes. A topic that is not followed has no series."""
    clock = MemoryReactorClock()
    metrics = Metrics()  # the cache and the proxy share them, as in the daemon
    server, _ = _server(clock, max_topics=2, idle_timeout=60.0, metrics=metrics)
    routes = (SseKafkaRoute((Pattern.compile("/events/{topic}"),), "cache", None),)
    proxy = SseKafkaProxy("sse_kafka", routes, {"cache": server}, EventLog("t"),  # type: ignore[dict-item]
                          metrics=metrics)
    held = [_open(proxy, "/events/orders"), _open(proxy, "/events/prices")]
    for i in range(300):
        answer = _open(proxy, f"/events/junk-{i}-" + "x" * 230)
        assert isinstance(answer, TryLater)

    def series() -> list[str]:
        text = generate_latest(metrics.registry).decode()
        return [line for line in text.splitlines()
                if line.startswith("sse_kafka_filtered") and "topic=" in line]

    assert sorted(line.split('topic="')[1].split('"')[0] for line in series()) == \
        ["orders", "prices"]
    for handle in held:
        handle.close()
    clock.advance(60)  # both idle: dropped, and their series with them
    assert series() == []


# -- missing topics ---------------------------------------------------------------------------------

def test_a_missing_topic_is_looked_for_less_and_less_often_then_given_up() -> None:
    missing = MissingTopics()
    looks = []
    now = 0.0
    while not missing.missing("ghost", now, give_up_after=12):
        looks.append(now)
        due = missing.next_due()
        assert due is not None
        assert not missing.missing("ghost", (now + due) / 2, 12), "an early read is not a look"
        now = due
    gaps = [b - a for a, b in zip(looks, looks[1:], strict=False)]
    assert gaps == [0.5, 1, 2, 4, 8, 16, 32, 60, 60, 60]
    assert "ghost" not in missing and missing.next_due() is None
    # bootstrap topics (no give_up_after) are looked for without end, at most a minute apart
    for _ in range(50):
        assert not missing.missing("boot", now, None)
        now = missing.next_due() or 0.0
    assert missing.next_due() == now and "boot" in missing


def test_a_topic_given_up_ends_its_streams_and_is_no_longer_followed() -> None:
    clock = MemoryReactorClock()
    server, client = _server(clock, missing_topic_retries=4, bootstrap=["boot"])
    proxy = _proxy(server)
    sinks = [Sink(), Sink()]
    subs = [_open(proxy, "/events/ghost", s) for s in sinks]
    _open(proxy, "/events/boot")
    assert ("ghost", 4) in client.consumed and ("boot", None) in client.consumed
    for s, sink in zip(subs, sinks, strict=True):
        sink.end = s.close  # type: ignore[method-assign] - as the sse stream does
    server.topics["ghost"].on_missing()
    assert all(s.closed for s in subs)
    assert "ghost" not in server.topics and client.dropped == ["ghost"]
    assert any("BINDING_KAFKA_TOPIC_DROPPED ghost: not in the cluster after 4 looks" in line
               for line in server.events.recent)


# -- the wire -------------------------------------------------------------------------------------

def daemon_config(port: int, bootstrap: str) -> zc.Node:
    """Streams at /events/{topic}, `audit` internal, a cache of two topics at most that drops an
    idle one after a second and gives up on a missing one after three tries."""
    return zc.sse_stack(port, bootstrap, name="topics", sse=zc.sse_server(retry=700),
                        sse_kafka_binding=zc.sse_kafka([zc.sse_route("/events/{topic}", None)],
                                                       internal_topics=["audit"]),
                        cache={"max-topics": 2, "idle-timeout": 1, "missing-topic-retries": 3})


def _get(port: int, path: str) -> tuple[int, str, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", path)
    r = conn.getresponse()
    out = (r.status, r.getheader("Content-Type", ""), r.read())
    conn.close()
    return out


@pytest.fixture
def topics_daemon(kafka_broker: Broker, tmp_path: Path) -> Any:
    port = free_port()
    config = tmp_path / "zilla.yaml"
    zc.write(config, daemon_config(port, kafka_broker.bootstrap))
    # the topics one cache follows (max-topics, idle drops) are one process's: with workers each
    # has its own cache, and the kernel picks the worker a connection reaches
    daemon: Daemon = start_daemon(config, wait_ports=[port], extra_args=["--workers", "1"])
    yield daemon, port
    daemon.stop()


@pytest.mark.broker
def test_on_the_wire_internal_refused_missing_given_up_full_cache_retried_idle_followed_again(
        topics_daemon: Any, kafka_broker: Broker) -> None:
    daemon, port = topics_daemon
    kafka = Kafka(kafka_broker.bootstrap)
    for path in ("/events/__consumer_offsets", "/events/_schemas", "/events/connect-status",
                 "/events/audit"):
        assert _get(port, path)[0] == 404, path

    # a topic the cluster lacks: looked for 3 times (0, 0.5, 1.5 s), then its stream ends
    started = time.monotonic()
    with SseClient(port, "/events/no-such-topic", timeout=10) as ghost:
        assert ghost.status == 200
        assert ghost.next_event(timeout=10) is None and ghost.ended
    assert time.monotonic() - started < 8
    daemon.wait_output("BINDING_KAFKA_TOPIC_DROPPED no-such-topic: not in the cluster after 3")

    # two topics fill max-topics: a third stream gets a 200 with retry: that ends at once
    orders, other = kafka.topic(partitions=2), kafka.topic(partitions=1)
    for i in range(5):
        kafka.produce(orders, b"o%d" % i)
    kafka.flush()
    first = SseClient(port, f"/events/{orders}")
    assert sorted(e.data or "" for e in first.events(5)) == [f"o{i}" for i in range(5)]
    held = SseClient(port, "/events/junk-name")
    status, ctype, body = _get(port, f"/events/{other}")
    assert (status, ctype) == (200, "text/event-stream")
    assert body.startswith(b"retry:700\n\n: try later: ") and b"max-topics" in body
    held.close()  # the junk name has no stream left: dropped after idle-timeout
    daemon.wait_output("BINDING_KAFKA_TOPIC_DROPPED junk-name: no stream for 1 s")
    with SseClient(port, f"/events/{other}") as late:
        assert late.status == 200 and late.next_event(timeout=1) is None and not late.ended

    # a topic dropped for idleness is followed again from its start when asked for again
    first.close()
    daemon.wait_output(f"BINDING_KAFKA_TOPIC_DROPPED {orders}: no stream for 1 s")
    for i in range(5, 8):
        kafka.produce(orders, b"o%d" % i)
    kafka.flush()
    with SseClient(port, f"/events/{orders}") as again:
        assert sorted(e.data or "" for e in again.events(8)) == [f"o{i}" for i in range(8)]
        assert again.until(kafka.mark(orders)) == []  # and nothing else
    assert daemon.alive()


# -- the tail consumer's side, without a broker -----------------------------------------------------

class Now:
    """A reactor whose calls from the consumer thread run at once (the test is that thread)."""

    def callFromThread(self, f: Any, *a: Any) -> None:
        f(*a)


class Meta:
    """What `list_topics` answers: `topics` maps a name to its partition count."""

    def __init__(self, topics: dict[str, int]) -> None:
        self.topics = {name: type("T", (), {"error": None, "partitions": dict.fromkeys(range(n))})
                       for name, n in topics.items()}


class Consumer:
    def __init__(self) -> None:
        self.topics: dict[str, int] = {}
        self.unassigned: list[tuple[str, int]] = []

    def list_topics(self, timeout: float) -> Meta:
        return Meta(self.topics)

    def incremental_assign(self, tps: list[Any]) -> None:
        pass

    def incremental_unassign(self, tps: list[Any]) -> None:
        self.unassigned += [(tp.topic, tp.partition) for tp in tps]


class TopicSink:
    missing = False

    def on_metadata(self, partitions: int, compacted: bool | None) -> None:
        pass

    def on_missing(self) -> None:
        self.missing = True

    def on_end(self, partition: int) -> None:  # the inbox tells ends from other calls by it
        pass

    def on_rewind(self, partition: int) -> None:
        pass


def test_the_tail_consumer_backs_off_for_missing_topics_gives_up_and_unassigns_dropped_ones() -> None:
    from ssekd.bindings.kafka.client import KafkaClient
    from ssekd.bindings.kafka.settings import ClientSettings
    from ssekd.bindings.kafka.tail_consumer import TailConsumer

    client = KafkaClient(Now(), ClientSettings(("x:1",)), "k", lambda *a: None)
    consumer = Consumer()
    ghost, later, kept = TopicSink(), TopicSink(), TopicSink()
    client.consume("cs", "ghost", ghost, give_up_after=1)
    client.consume("cs", "later", later, give_up_after=5)
    client.consume("cs", "kept", kept, give_up_after=5)
    tail: TailConsumer = client.tails["cs"]  # not started: this test runs its steps
    tail._compacted = lambda topic: False  # type: ignore[method-assign]
    assert tail._apply_changes(consumer)
    consumer.topics = {"kept": 2}
    tail._refresh(consumer)
    assert ghost.missing and "ghost" not in tail._follows, "given up after its one look"
    assert not later.missing and tail._unknown.next_due() is not None
    consumer.topics = {"kept": 2, "later": 1}  # created: found, not due for a look any more
    tail._refresh(consumer)
    assert tail._unknown.next_due() is None and tail._assigned == {"kept": 2, "later": 1}
    tail._refresh(consumer)  # nothing changed: still nothing due
    assert tail._unknown.next_due() is None
    consumer.topics = {"later": 1}  # e.g. a broker that restarted empty
    tail._refresh(consumer)
    assert "kept" in tail._unknown and not kept.missing
    consumer.topics = {"kept": 2, "later": 1}  # back, as it was: no look due any more
    tail._refresh(consumer)
    assert tail._unknown.next_due() is None, "a found topic would be looked for in a busy loop"
    client.unconsume("cs", "kept")
    tail._apply_changes(consumer)
    assert consumer.unassigned == [("kept", 0), ("kept", 1)] and "kept" not in tail._assigned


def test_a_dropped_topic_leaves_no_metric_series_behind() -> None:
    """Junk topic names come and go: their series must go with them, or the metrics (and every
    scrape) grow with each name a client ever tried."""
    clock = MemoryReactorClock()
    metrics = Metrics()
    server, _ = _server(clock, idle_timeout=1.0, metrics=metrics)
    proxy = SseKafkaProxy("sse_kafka", _proxy(server).routes, {"cache": server}, EventLog("t"),
                          metrics=metrics)  # type: ignore[dict-item]
    _open(proxy, "/events/junk-1").close()
    _open(proxy, "/events/keep").close()
    assert any(("topic", "junk-1") in key[2] for key in metrics._instruments)
    metrics.counter("sse.kafka.filtered", "sse_kafka", topic="keep").value += 1
    clock.advance(0.5)
    _open(proxy, "/events/keep")  # read again: not idle
    clock.advance(0.6)
    assert "junk-1" not in server.topics and "keep" in server.topics
    assert not any(("topic", "junk-1") in key[2] for key in metrics._instruments)
    assert metrics.counter("sse.kafka.filtered", "sse_kafka", topic="keep").value == 1
