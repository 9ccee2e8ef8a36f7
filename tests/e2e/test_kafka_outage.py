"""A Kafka outage behind the shipped balancer: HAProxy (deploy/haproxy/haproxy.cfg) in front of
three daemons, browsers as EventSource clients (any answer but `200 text/event-stream` ends one
for good), and the broker unreachable for 20 s.

Every daemon sees the outage at the same moment. Were readiness to fail for it, HAProxy would
take all three out together and answer the browsers that reconnect meanwhile with its own
`503`, which ends their EventSource. Here the daemons stay in the balancer: open streams stay
open, a daemon killed during the outage sends its browsers through HAProxy to the others, which
resume them from their caches, and browsers that arrive during the outage get `200` with
`retry:`. When the broker is back every browser gets every event exactly once.
"""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from ssekd.dev.broker import free_port
from tests.support.daemon import Daemon, start_daemon
from tests.support.eventsource import EventSourceClient
from tests.support.haproxy import TRUST_BALANCER, Haproxy, start_haproxy
from tests.support.outage import SwitchedBroker, start_switched_broker
from tests.support.streamd import write_config
from tests.support.wait import wait_until

pytestmark = [pytest.mark.daemon, pytest.mark.broker, pytest.mark.timeout(300)]

OUTAGE = 20.0
CLIENTS = 60
#: Browsers that first connect while the broker is away (of CLIENTS).
LATE = 10
RETRY_MS = 500


def ready(port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health/ready", timeout=5) as r:
            json.loads(r.read())
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


def test_a_20_s_broker_outage_behind_haproxy_loses_no_browser_and_no_event(
        tmp_path: Path) -> None:
    broker: SwitchedBroker | None = None
    daemons: list[Daemon] = []
    proxy: Haproxy | None = None
    clients: list[EventSourceClient] = []
    try:
        broker = start_switched_broker(tmp_path)
        topic = "outage"
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(10)
        # it holds what it is given during the outage, and says nothing of it (log_level 0)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 1,
                             "message.timeout.ms": 120000, "log_level": 0})
        sent: list[str] = []

        def produce(tag: str, n: int) -> None:
            for i in range(n):
                value = f"{tag}-{i}"
                producer.produce(topic, value.encode(), key=value.encode(), partition=i % 2)
                sent.append(value)

        produce("before", 20)
        assert producer.flush(10) == 0
        ports = []
        for i in range(3):
            port = free_port()
            folder = tmp_path / f"d{i}"
            folder.mkdir()
            config = write_config(folder, broker.bootstrap, port, health=True, retry=RETRY_MS,
                                  bootstrap_topics=(topic,), tcp_options=TRUST_BALANCER)
            daemons.append(start_daemon(config, wait_ports=[port]))
            ports.append(port)
        proxy = start_haproxy(tmp_path, free_port(), ports)
        wait_until(lambda: all(r["status"] == "UP" for r in proxy.show_stat().values()), 30,
                   what=lambda: f"not all UP: {proxy.show_stat()}")
        path = f"/events/{topic}"
        clients = [EventSourceClient(proxy.port, path) for _ in range(CLIENTS - LATE)]
        for c in clients:
            c.read_until(["before-18", "before-19"])

        # the broker goes away for every daemon at once
        broker.switch.down()
        down_at = time.monotonic()
        for d in daemons:
            d.wait_output("BINDING_KAFKA_BROKER_UNAVAILABLE", timeout=15)
        produce("during", 20)  # the producer holds them until the broker is back
        # longer than HAProxy needs to take a failing daemon out (fall 2 x inter 1 s)
        time.sleep(4)
        assert [ready(p) for p in ports] == [200, 200, 200]
        assert all(r["status"] == "UP" for r in proxy.show_stat().values()), proxy.show_stat()
        # a daemon dies during the outage: its browsers come back through HAProxy to the
        # others, which resume them from their caches
        moved = [c for c in clients if c.stream is not None]
        os.kill(daemons[0].process.pid, signal.SIGKILL)
        # browsers that arrive now get 200, the sse binding's retry:, and what the caches hold
        late = [EventSourceClient(proxy.port, path) for _ in range(LATE)]
        clients += late
        for c in late:
            c.read_until(["before-18", "before-19"])
            assert c.failed is None and c.retries[:1] == [RETRY_MS], (c.failed, c.retries)
        min_up = 3
        while time.monotonic() - down_at < OUTAGE:
            up = sum(r["status"] == "UP" for r in proxy.show_stat().values())
            min_up = min(min_up, up)
            time.sleep(0.5)
        broker.switch.up()

        produce("after", 20)
        assert producer.flush(60) == 0
        markers = ["after-18", "after-19"]
        for c in clients:
            c.read_until(markers, timeout=90)
        lost = [c.failed for c in clients if c.failed is not None]
        assert not lost, f"{len(lost)} browsers gave up for good: {Counter(lost)}"
        wrong = [c for c in clients if Counter(c.data) != Counter(sent)]
        assert not wrong, [(len(c.data), len(sent)) for c in wrong[:5]]
        # the two living daemons stayed in the balancer for the whole outage
        assert min_up >= 2, min_up
        reconnected = sum(1 for c in moved if c.opens > 1)
        assert reconnected >= (CLIENTS - LATE) // 3 - 5, reconnected
        print(f"\n{OUTAGE:.0f} s broker outage behind HAProxy, 3 daemons (one killed during "
              f"it), {len(clients)} browsers: 0 lost, {len(sent)} events each, none missed "
              f"or twice; {reconnected} moved to another daemon meanwhile")
    finally:
        for c in clients:
            c.close()
        if proxy is not None:
            proxy.stop()
        for d in daemons:
            d.stop()
        if broker is not None:
            broker.stop()
