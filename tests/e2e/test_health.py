"""The http binding's health endpoints, as a load balancer sees them: readiness is 503 until the
bootstrap topics are loaded once, then 200, even when the broker goes away later; on SIGTERM
with `engine.drain`, readiness turns 503 at once, streams go on for the drain time, then end,
and the daemon exits 0."""

from __future__ import annotations

import json
import signal
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka.admin import NewTopic

from ssekd.dev.broker import Broker, free_port, start_broker
from tests.support.broker import Kafka
from tests.support.daemon import start_daemon
from tests.support.sse import SseClient
from tests.support.streamd import write_config
from tests.support.wait import wait_until

pytestmark = [pytest.mark.daemon, pytest.mark.broker]


def probe(port: int, path: str) -> tuple[int, dict[str, object]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_readiness_is_503_until_bootstrap_is_loaded_once_and_stays_200_without_the_broker(
        tmp_path: Path) -> None:
    kafka_port, port = free_port(), free_port()
    config = write_config(tmp_path, f"127.0.0.1:{kafka_port}", port, health=True,
                          bootstrap_topics=("boot",))
    daemon = start_daemon(config, wait_ports=[port])
    broker: Broker | None = None
    try:
        assert probe(port, "/health/live")[0] == 200
        daemon.wait_output("BINDING_KAFKA_BROKER_UNAVAILABLE")
        waiting = {"status": "not ready",
                   "waiting": {"cache_server/boot": "loading (no Kafka broker reachable)"}}
        # (with workers, each says so once its own consumer found no broker)
        wait_until(lambda: all(probe(port, "/health/ready") == (503, waiting)
                               for _ in range(4)), 15,
                   what=lambda: f"{probe(port, '/health/ready')}")
        broker = start_broker(kafka_port)
        kafka = Kafka(broker.bootstrap)
        kafka.admin.create_topics([NewTopic("boot", 2, 1)])["boot"].result(10)
        for i in range(500):
            kafka.produce("boot", b"%d" % i, key=b"%d" % i)
        kafka.flush()
        # (with workers each answers for itself: every probe, wherever it lands)
        wait_until(lambda: all(probe(port, "/health/ready")[0] == 200 for _ in range(6)), 60,
                   what=lambda: f"still {probe(port, '/health/ready')}")
        assert probe(port, "/health/ready")[1] == {"status": "ready"}
        # ready means loaded: a new client gets the whole topic from the cache at once
        with SseClient(port, "/events/boot") as stream:
            assert sorted(int(e.data or -1) for e in stream.events(500)) == list(range(500))
        assert probe(port, "/health/live")[1]["status"] == "live"
        # the broker goes away after the first load: every daemon sees that alike, so this one
        # stays in the balancer, and a new client is still answered 200 from the cache
        broker.process.kill()
        broker.stop()

        def broker_lost() -> bool:  # the last word on the broker is that it is gone
            text = daemon.output()
            return text.rfind("BINDING_KAFKA_BROKER_UNAVAILABLE") > \
                text.rfind("BINDING_KAFKA_BROKER_CONNECTED")
        wait_until(broker_lost, 30, what=daemon.output)
        assert probe(port, "/health/ready") == (200, {"status": "ready"})
        with SseClient(port, "/events/boot") as stream:
            assert stream.status == 200
            assert len(stream.events(500)) == 500
    finally:
        assert daemon.stop() == 0
        if broker is not None:
            broker.stop()


@pytest.mark.parametrize("workers", [1, 2])
def test_sigterm_drains_readiness_first_then_ends_the_streams(
        workers: int, kafka: Kafka, tmp_path: Path) -> None:
    drain = 3.0
    topic = kafka.topic(1)
    kafka.send(topic, [b"first"])
    port = free_port()
    config = write_config(tmp_path, kafka.bootstrap, port, health=True,
                          engine=f"{{drain: {drain:g}}}")
    daemon = start_daemon(config, wait_ports=[port], extra_args=["--workers", str(workers)])
    try:
        daemon.wait_output("ENGINE_STARTED", count=workers + (workers > 1))
        assert probe(port, "/health/ready")[0] == 200
        with SseClient(port, f"/events/{topic}") as stream:
            (first,) = stream.events(1)
            assert first.data == "first"
            started = time.monotonic()
            daemon.signal(signal.SIGTERM)
            daemon.wait_output("ENGINE_DRAINING", count=workers)
            for _ in range(5):  # every worker answers 503 (new connections reach any of them)
                status, body = probe(port, "/health/ready")
                assert (status, body) == (503, {"status": "draining"})
            assert probe(port, "/health/live")[0] == 200
            kafka.send(topic, [b"while draining"])
            (second,) = stream.events(1)
            assert second.data == "while draining"
            assert stream.next_event(drain + 5) is None and stream.ended
            ended = time.monotonic() - started
        assert daemon.process.wait(10) == 0
        assert drain - 0.5 <= ended < drain + 5, ended
    finally:
        daemon.stop()
