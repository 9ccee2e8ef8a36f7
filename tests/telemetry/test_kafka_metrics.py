"""The kafka figures: consumer lag per partition, cache size per topic, subscribers, resumes,
filtered records, all read from the daemon's metrics page."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ssekd.dev.broker import Broker
from tests.support.broker import Kafka
from tests.support.telemetry import Telemetryd, run_telemetryd

#: A consumer that takes about 1 KiB per fetch: a burst is consumed over seconds, not at once.
THROTTLED = {"fetch.wait.max.ms": 10, "fetch.message.max.bytes": 1024, "fetch.max.bytes": 1024,
             "message.max.bytes": 1000, "queued.min.messages": 1, "fetch.queue.backoff.ms": 200}


@pytest.fixture(scope="module")
def slowd(kafka_broker: Broker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Telemetryd]:
    t = run_telemetryd(tmp_path_factory.mktemp("slowd"), kafka_broker.bootstrap,
                       properties=THROTTLED)
    yield t
    t.daemon.stop()


def wait_value(t: Telemetryd, pattern: str, ok: object, timeout: float = 30.0) -> float:
    """Poll the page until the sample matching `pattern` (a regex over the line's name and
    labels) has a value `ok` accepts."""
    deadline = time.monotonic() + timeout
    seen: list[float] = []
    rx = re.compile(pattern)
    while time.monotonic() < deadline:
        for line in t.scrape().splitlines():
            name, _, value = line.rpartition(" ")
            if rx.fullmatch(name):
                seen.append(float(value))
                if ok(float(value)):  # type: ignore[operator]
                    return float(value)
        time.sleep(0.1)
    raise AssertionError(f"{pattern}: seen {seen[-10:]}")


@pytest.mark.broker
def test_consumer_lag_rises_while_behind_then_returns_to_zero(kafka: Kafka,
                                                               slowd: Telemetryd) -> None:
    topic = kafka.topic(1)
    lag = rf'kafka_consumer_lag\{{binding="cache_server",namespace="test",partition="0",topic="{topic}"\}}'
    with slowd.open(f"/events/{topic}") as client:
        kafka.produce(topic, b"first")
        kafka.flush()
        assert client.events(1)[0].data == "first"
        assert wait_value(slowd, lag, lambda v: v == 0) == 0
        for i in range(20_000):
            kafka.produce(topic, b"%05d " % i + b"x" * 200)
        kafka.flush()
        assert wait_value(slowd, lag, lambda v: v > 0) > 0
        assert wait_value(slowd, lag, lambda v: v == 0, timeout=120) == 0


@pytest.mark.broker
@pytest.mark.daemon
def test_cache_size_subscribers_and_filtered_per_topic(kafka: Kafka,
                                                        telemetryd: Telemetryd) -> None:
    topic = kafka.topic(2)
    labels = f'binding="cache_server",namespace="test",topic="{topic}"'
    for i in range(10):
        kafka.produce(topic, b"v%d" % i, key=b"a" if i % 2 else b"b", partition=i % 2)
    kafka.flush()
    with telemetryd.open(f"/events/{topic}") as c, telemetryd.open(f"/bykey/{topic}/a") as k:
        assert len(c.events(10)) == 10 and len(k.events(5)) == 5
        # each process holding a stream of the topic caches it (each worker has its cache),
        # and the page is their sum
        processes = len(telemetryd.daemon.worker_pids()) or 1
        assert telemetryd.value(f"kafka_cache_messages{{{labels}}}") in \
            {10 * k for k in range(1, processes + 1)}
        assert telemetryd.value(f"kafka_cache_size_bytes{{{labels}}}") > 10 * 2
        assert 0 <= telemetryd.value(f"kafka_cache_oldest_age_seconds{{{labels}}}") < 60
        assert telemetryd.value(f"kafka_cache_subscribers{{{labels}}}") == 2
        route = 'binding="sse_kafka",namespace="test",route="/events/{topic}"'
        assert telemetryd.value(f"sse_kafka_subscribers{{{route}}}") >= 1
        # catching up, the key stream read only the records keyed a (the cache's index): the
        # filter held nothing back yet
        filtered = (f'sse_kafka_filtered_total{{binding="sse_kafka",namespace="test",'
                    f'topic="{topic}"}}')
        assert telemetryd.value(filtered) == 0
        # at the tail, the key filter holds back the five records keyed b, once for its group
        for i in range(10, 20):
            kafka.produce(topic, b"v%d" % i, key=b"a" if i % 2 else b"b", partition=i % 2)
        kafka.flush()
        assert len(c.events(10)) == 10 and len(k.events(5)) == 5
        assert telemetryd.value(filtered) == 5
    wait_value(telemetryd, rf"kafka_cache_subscribers\{{{re.escape(labels)}\}}", lambda v: v == 0)


def resumes(t: Telemetryd, outcome: str) -> float:
    return t.value(f'sse_kafka_resumes_total{{binding="sse_kafka",namespace="test",'
                   f'outcome="{outcome}"}}')


@pytest.mark.broker
@pytest.mark.daemon
def test_resumes_by_outcome(kafka: Kafka, telemetryd: Telemetryd) -> None:
    topic = kafka.topic(1)
    kafka.produce(topic, b"first")
    kafka.flush()
    with telemetryd.open(f"/tiny/{topic}") as c:
        first = c.events(1)[0]
    for i in range(20):  # the tiny cache keeps 5: `first` is now only in Kafka
        kafka.produce(topic, b"later %d" % i)
    kafka.flush()
    # every worker's cache must have read past `first` (each has its own, and the kernel picks
    # the worker of a connection: 16 streams reach both of two but for a chance of 2 in 2**16)
    for _ in range(1 if not telemetryd.daemon.worker_pids() else 16):
        with telemetryd.open(f"/tiny/{topic}") as c:
            last = c.events(1)[0]
            while last.data != "later 19":
                last = c.events(1)[0]
    before = {o: resumes(telemetryd, o) for o in ("cache", "kafka", "undecodable")}
    with telemetryd.open(f"/tiny/{topic}", {"Last-Event-ID": last.id or ""}) as c:
        assert c.until(kafka.mark(topic)) == []  # resumed at the end: nothing before the mark
    with telemetryd.open(f"/tiny/{topic}", {"Last-Event-ID": first.id or ""}) as c:
        assert c.events(1)[0].data == "later 0"
    with telemetryd.open(f"/tiny/{topic}", {"Last-Event-ID": "not-an-id"}) as c:
        assert c.events(1)
    after = {o: resumes(telemetryd, o) for o in ("cache", "kafka", "undecodable")}
    assert {o: after[o] - before[o] for o in after} == {"cache": 1, "kafka": 1,
                                                          "undecodable": 1}


@pytest.mark.broker
def test_bootstrap_topics_are_cached_before_any_stream(kafka: Kafka, kafka_broker: Broker,
                                                       tmp_path: Path) -> None:
    topic = kafka.topic(1)
    for i in range(3):
        kafka.produce(topic, b"early %d" % i)
    kafka.flush()
    cache = "    kind: cache_server\n    options:\n      cache:"
    t = run_telemetryd(tmp_path, kafka_broker.bootstrap,
                       replace=(cache, f"    kind: cache_server\n    options:\n"
                                       f"      bootstrap: [{topic}]\n      cache:"))
    try:
        messages = rf'kafka_cache_messages\{{binding="cache_server",namespace="test",' \
                   rf'topic="{topic}"\}}'
        every = 3 * (len(t.daemon.worker_pids()) or 1)  # in the cache of every worker
        assert wait_value(t, messages, lambda v: v == every) == every
        # no stream was ever opened: the cache consumed the topic from start-up
        assert t.value('stream_opens_received_total{binding="sse",namespace="test"}') == 0
    finally:
        t.daemon.stop()
