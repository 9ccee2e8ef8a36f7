"""A stuck worker is found: the parent checks each worker's heartbeat and replaces one that
misses `engine.heartbeat-timeout` (here a worker stopped by SIGSTOP, as a blocked reactor would
look); its clients resume on the others and on its replacement, and the restart is counted. A
parent that is stuck in turn makes its workers' liveness fail."""

from __future__ import annotations

import json
import os
import re
import signal
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from ssekd.dev.broker import free_port
from tests.support.broker import Kafka
from tests.support.daemon import Daemon, start_daemon
from tests.support.notify import NotifySocket
from tests.support.resume import ResumingClient
from tests.support.streamd import write_config
from tests.support.wait import wait_until

pytestmark = [pytest.mark.daemon, pytest.mark.broker]

TIMEOUT = 2.0


def liveness(port: int) -> tuple[int, dict[str, object]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health/live", timeout=3) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        return str(r.read().decode())


def two_workers(kafka: Kafka, tmp_path: Path) -> tuple[Daemon, int, int]:
    """A daemon with two workers, once its parent has heard each worker's heartbeat (it then
    tells systemd READY=1; before that a worker is starting, with the start-up grace)."""
    port, metrics_port = free_port(), free_port()
    config = write_config(tmp_path, kafka.bootstrap, port, health=True,
                          prometheus_port=metrics_port,
                          engine=f"{{heartbeat-timeout: {TIMEOUT:g}}}")
    notify = NotifySocket(tmp_path / "notify.sock")
    try:
        daemon = start_daemon(config, env={"NOTIFY_SOCKET": str(notify.path)},
                              wait_ports=[port, metrics_port], extra_args=["--workers", "2"])
        notify.wait_for("READY")
    finally:
        notify.close()
    return daemon, port, metrics_port


def test_a_worker_stopped_by_sigstop_is_found_killed_and_replaced(kafka: Kafka,
                                                                 tmp_path: Path) -> None:
    topic = kafka.topic(2)
    daemon, port, metrics_port = two_workers(kafka, tmp_path)
    clients: list[ResumingClient] = []
    try:
        clients = [ResumingClient(port, f"/events/{topic}") for _ in range(20)]
        first = kafka.mark(topic, (0, 1))
        for c in clients:
            c.read_until(first)
        stuck_pid = daemon.worker_pids()[1]
        os.kill(stuck_pid, signal.SIGSTOP)
        stopped_at = time.monotonic()
        daemon.wait_output("ENGINE_WORKER_STUCK worker 1", timeout=TIMEOUT + 5)
        found_after = time.monotonic() - stopped_at
        daemon.wait_output("ENGINE_WORKER_DIED worker 1", timeout=5)
        wait_until(lambda: daemon.worker_pids().get(1) not in (None, stuck_pid), 10,
                   what=lambda: f"worker 1 not started again:\n{daemon.output()}")
        wait_until(lambda: daemon.output().count("ENGINE_STARTED") >= 4, 20,
                   what=lambda: f"the new worker 1 did not start:\n{daemon.output()}")
        text = daemon.output()
        assert re.search(rf"ENGINE_WORKER_STUCK worker 1 pid {stuck_pid}: no heartbeat for "
                         rf"[\d.]+ s \(engine.heartbeat-timeout 2 s\); killing it", text), text
        assert f"ENGINE_WORKER_DIED worker 1 pid {stuck_pid} killed by SIGKILL" in text
        # every client goes on, those of the stuck worker on the others or its replacement
        later = kafka.mark(topic, (0, 1))
        for c in clients:
            c.read_until(later, timeout=30)
        assert any(c.reconnects for c in clients)
        # liveness, wherever a probe lands, answers again
        assert all(liveness(port)[0] == 200 for _ in range(20))
        wait_until(lambda: "ssekd_worker_restarts_total" in scrape(metrics_port), 10)
        restarts = [line for line in scrape(metrics_port).splitlines()
                    if line.startswith("ssekd_worker_restarts_total")]
        assert restarts and restarts[0].endswith(" 1.0"), restarts
        assert found_after <= TIMEOUT + 3, found_after
        print(f"\nworker stopped by SIGSTOP: found stuck and killed after {found_after:.1f} s "
              f"(heartbeat-timeout {TIMEOUT:g} s)")
    finally:
        for c in clients:
            c.close()
        for pid in daemon.worker_pids().values():
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        daemon.stop()


def test_a_stuck_parent_makes_its_workers_liveness_fail(kafka: Kafka, tmp_path: Path) -> None:
    daemon, port, _ = two_workers(kafka, tmp_path)
    try:
        wait_until(lambda: all(liveness(port)[0] == 200 for _ in range(6)), 10)
        daemon.signal(signal.SIGSTOP)  # the parent only: its workers go on serving
        try:
            wait_until(lambda: all(liveness(port)[0] == 503 for _ in range(6)), TIMEOUT + 5,
                       what=lambda: [liveness(port) for _ in range(4)])
            status, body = liveness(port)
            assert status == 503 and body["status"] == "unsupervised", body
        finally:
            daemon.signal(signal.SIGCONT)
        wait_until(lambda: all(liveness(port)[0] == 200 for _ in range(6)), 10)
        # the parent did not hold its own pause against the workers
        time.sleep(TIMEOUT + 1)
        assert "ENGINE_WORKER_STUCK" not in daemon.output()
    finally:
        assert daemon.stop() == 0
