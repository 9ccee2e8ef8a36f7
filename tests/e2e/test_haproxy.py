"""Many daemons behind a real load balancer: HAProxy (deploy/haproxy/haproxy.cfg) in front of
three ssekd daemons on loopback, 300 clients streaming through it. One daemon is killed, then
another drained with SIGTERM; every client ends with every event exactly once (checked by id and
data), and HAProxy's health checks took the dead daemon out."""

from __future__ import annotations

import os
import resource
import signal
from collections import Counter
from pathlib import Path

import pytest

from ssekd.dev.broker import free_port
from tests.support.broker import Kafka
from tests.support.daemon import Daemon, start_daemon
from tests.support.haproxy import TRUST_BALANCER, Haproxy, start_haproxy
from tests.support.resume import ResumingClient
from tests.support.streamd import write_config
from tests.support.wait import wait_until

pytestmark = [pytest.mark.daemon, pytest.mark.broker]

CLIENTS = 300
DRAIN = 3.0


def test_three_daemons_behind_haproxy_lose_no_event_when_one_dies_and_one_drains(
        kafka: Kafka, tmp_path: Path) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 4096)), hard))
    topic = kafka.topic(2)
    daemons: list[Daemon] = []
    proxy: Haproxy | None = None
    clients: list[ResumingClient] = []
    try:
        ports = []
        for i in range(3):
            port = free_port()
            folder = tmp_path / f"d{i}"
            folder.mkdir()
            config = write_config(folder, kafka.bootstrap, port, health=True,
                                  engine=f"{{drain: {DRAIN:g}}}", tcp_options=TRUST_BALANCER)
            daemons.append(start_daemon(config, wait_ports=[port]))
            ports.append(port)
        proxy = start_haproxy(tmp_path, free_port(), ports)
        wait_until(lambda: all(r["status"] == "UP" for r in proxy.show_stat().values()), 20,
                   what=lambda: f"not all UP: {proxy.show_stat()}")
        sent: list[str] = []
        ids: dict[str, str] = {}

        def produce(tag: str, n: int) -> list[str]:
            values = [f"{tag}-{i}" for i in range(n)]
            for v in values:
                kafka.produce(topic, v.encode(), key=v.encode())
            markers = kafka.mark(topic, (0, 1))
            sent.extend(values + markers)
            return markers

        def everyone_reads(markers: list[str]) -> None:
            for c in clients:
                c.read_until(markers, timeout=60)

        clients = [ResumingClient(proxy.port, f"/events/{topic}") for _ in range(CLIENTS)]
        everyone_reads(produce("start", 20))
        # leastconn spread the streams over the three daemons
        open_streams = {n: int(r["scur"]) for n, r in proxy.show_stat().items()}
        assert sum(open_streams.values()) == CLIENTS
        assert all(n >= CLIENTS // 3 - 5 for n in open_streams.values()), open_streams

        # one daemon dies: its clients come back through HAProxy to the two others
        os.kill(daemons[0].process.pid, signal.SIGKILL)
        everyone_reads(produce("killed", 20))
        wait_until(lambda: proxy.status("ssekd1") == "DOWN", 10,
                   what=lambda: f"ssekd1 not taken out: {proxy.show_stat()['ssekd1']}")

        # another drains: out of the balancer first, its streams end DRAIN seconds later
        daemons[1].signal(signal.SIGTERM)
        daemons[1].wait_output("ENGINE_DRAINING")
        wait_until(lambda: proxy.status("ssekd2") == "DOWN", 10,
                   what=lambda: f"ssekd2 not taken out: {proxy.show_stat()['ssekd2']}")
        assert daemons[1].alive()  # still serving its streams while the balancer moved on
        everyone_reads(produce("draining", 20))
        assert daemons[1].process.wait(DRAIN + 10) == 0
        everyone_reads(produce("end", 20))

        stats = proxy.show_stat()
        assert (stats["ssekd1"]["status"], stats["ssekd2"]["status"],
                stats["ssekd3"]["status"]) == ("DOWN", "DOWN", "UP")
        assert int(stats["ssekd3"]["scur"]) == CLIENTS
        for c in clients:
            assert Counter(c.data) == Counter(sent), (c.last_id, c.reconnects)
            ids[c.last_id or ""] = c.last_id or ""
        # every client resumed to the same position, whichever daemons served it
        assert len(ids) == 1
        moved = sum(1 for c in clients if c.reconnects)
        assert moved >= CLIENTS * 2 // 3 - 10, moved
    finally:
        for c in clients:
            c.close()
        if proxy is not None:
            proxy.stop()
        for d in daemons:
            d.stop()
