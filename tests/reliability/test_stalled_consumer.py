"""A consumer that stays connected but stops receiving records is replaced (the kafka client's
`stall-timeout`, `ssekd.bindings.kafka.stall`).

The real daemon reads the real broker through a proxy that, once told, drops the Fetch responses
of every connection open at that moment and passes everything else (`tests.support.kafka_proxy`):
metadata and offsets are answered, nothing fails, no record comes. librdkafka gives up on such a
request only after its `socket.timeout.ms` (60 s); with `stall-timeout: 2` the daemon notices the
partitions that did not move while the broker holds newer records, says so, and a new consumer
carries on from where the old one stood: the stream gets what was written meanwhile within
seconds, each record once.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ssekd.dev.broker import free_port
from tests.support import zilla_config as zc
from tests.support.broker import Kafka
from tests.support.daemon import start_daemon
from tests.support.kafka_proxy import ProxiedBroker, WedgedFetches, start_proxied_broker
from tests.support.sse import SseClient

pytestmark = [pytest.mark.daemon, pytest.mark.timeout(120)]


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[ProxiedBroker[WedgedFetches]]:
    b = start_proxied_broker(tmp_path, WedgedFetches)
    yield b
    b.stop()


def test_a_consumer_whose_fetches_stopped_is_replaced_and_nothing_is_lost(
        broker: ProxiedBroker[WedgedFetches], tmp_path: Path) -> None:
    kafka = Kafka(broker.bootstrap)
    topic = kafka.topic(2)
    for i in range(4):
        kafka.produce(topic, f"before-{i}".encode(), partition=i % 2)
    kafka.flush()
    port = free_port()
    config = zc.sse_stack(port, broker.bootstrap)
    config["bindings"]["kafka_client"]["options"]["stall-timeout"] = 2
    path = tmp_path / "zilla.yaml"
    path.write_text(zc.dump(config))
    daemon = start_daemon(path, wait_ports=[port])
    try:
        with SseClient(port, f"/{topic}", timeout=30) as c:
            before = c.events(4, timeout=30)
            broker.proxy.wedge()
            for i in range(6):
                kafka.produce(topic, f"after-{i}".encode(), partition=i % 2)
            kafka.flush()
            started = time.monotonic()
            after = c.events(6, timeout=45)
            took = time.monotonic() - started
            kafka.produce(topic, b"last", partition=0)
            kafka.flush()
            last = c.events(1, timeout=30)
        assert sorted(e.data or "" for e in before) == [f"before-{i}" for i in range(4)]
        assert sorted(e.data or "" for e in after) == [f"after-{i}" for i in range(6)], \
            "each record written while the old consumer was wedged, once"
        assert [e.data for e in last] == ["last"], "the new consumer follows the tail"
        assert broker.proxy.dropped > 0, "the old consumer's fetches were wedged"
        assert took < 20, f"{took:.1f} s: the daemon waited for librdkafka's 60 s timeout"
        daemon.wait_output("BINDING_KAFKA_CONSUMER_STALLED")
        stalled = [line for line in daemon.output().splitlines()
                   if "BINDING_KAFKA_CONSUMER_STALLED" in line]
        assert f"{topic} partition" in stalled[0] and "a new consumer takes over" in stalled[0]
        assert "Traceback" not in daemon.output()
    finally:
        daemon.stop()
