"""The daemon as a service manager (systemd) sees it: the signals it sends on stop, and the
notifications it expects from a `Type=notify` service on a real Unix datagram socket.

systemd's default `KillMode=control-group` sends SIGTERM to every process of the unit at once;
with workers, each then also gets the SIGTERM its parent forwards. A repeated SIGTERM must not
shorten the drain (it did: `engine.drain: 6` ended after 2.5 s); a second SIGINT ends it now.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from ssekd.dev.broker import free_port
from tests.support.broker import Kafka
from tests.support.daemon import Daemon, start_daemon
from tests.support.notify import NotifySocket
from tests.support.sse import SseClient
from tests.support.streamd import write_config
from tests.support.wait import wait_until

pytestmark = [pytest.mark.daemon, pytest.mark.broker]

DRAIN = 3.0


def started(kafka: Kafka, tmp_path: Path, workers: int,
            env: dict[str, str] | None = None) -> tuple[Daemon, int, str]:
    topic = kafka.topic(1)
    kafka.send(topic, [b"first"])
    port = free_port()
    config = write_config(tmp_path, kafka.bootstrap, port, health=True,
                          engine=f"{{drain: {DRAIN:g}}}")
    daemon = start_daemon(config, env=env, wait_ports=[port],
                          extra_args=["--workers", str(workers)])
    daemon.wait_output("ENGINE_STARTED", count=workers + (workers > 1))
    return daemon, port, topic


def test_sigterm_to_every_process_twice_never_shortens_the_drain(kafka: Kafka,
                                                                 tmp_path: Path) -> None:
    """With workers, as systemd's control group sees them: each worker gets the test's SIGTERMs
    and its parent's forwarded one (one process: tests/test_tap.py, on a clock)."""
    workers = 2
    daemon, port, topic = started(kafka, tmp_path, workers)
    try:
        pids = [daemon.process.pid, *daemon.worker_pids().values()]
        assert len(pids) == workers + (workers > 1)
        with SseClient(port, f"/events/{topic}") as stream:
            assert stream.events(1)[0].data == "first"
            began = time.monotonic()
            for _ in range(2):  # control-group: every process, and once more a second later
                for pid in pids:
                    os.kill(pid, signal.SIGTERM)
                time.sleep(1.0)
            # still serving, the stream still open (a repeated SIGTERM stopped it at once)
            assert daemon.alive()
            kafka.send(topic, [b"still draining"])
            assert stream.events(1)[0].data == "still draining"
            daemon.wait_output("again: the", count=1)
            assert stream.next_event(DRAIN + 5) is None and stream.ended
            ended = time.monotonic() - began
        assert daemon.process.wait(10) == 0
        assert ended >= DRAIN - 0.3, f"the drain ended after {ended:.2f} s of {DRAIN} s"
    finally:
        daemon.stop()


def test_a_second_sigint_ends_the_drain_at_once(kafka: Kafka, tmp_path: Path) -> None:
    """With workers: the parent forwards the second SIGINT (one process: tests/test_tap.py)."""
    workers = 2
    daemon, port, topic = started(kafka, tmp_path, workers)
    try:
        with SseClient(port, f"/events/{topic}") as stream:
            assert stream.events(1)[0].data == "first"
            daemon.signal(signal.SIGINT)
            daemon.wait_output("ENGINE_DRAINING readiness 503", count=workers)
            began = time.monotonic()
            daemon.signal(signal.SIGINT)
            assert stream.next_event(DRAIN) is None and stream.ended
            assert time.monotonic() - began < DRAIN - 1.0
        assert daemon.process.wait(10) == 0
        assert "SIGINT again" in daemon.output()
    finally:
        daemon.stop()


@pytest.mark.parametrize("workers", [1, 2])
def test_ready_reloading_and_stopping_reach_the_notify_socket(workers: int, kafka: Kafka,
                                                              tmp_path: Path) -> None:
    notify = NotifySocket(tmp_path / "notify.sock")
    daemon: Daemon | None = None
    try:
        daemon, port, _ = started(kafka, tmp_path, workers,
                                  env={"NOTIFY_SOCKET": str(notify.path)})
        assert notify.wait_for("READY") == {"READY": "1"}
        daemon.signal(signal.SIGHUP)
        reloading = notify.wait_for("RELOADING")
        assert reloading["RELOADING"] == "1" and int(reloading["MONOTONIC_USEC"]) > 0
        assert notify.wait_for("READY") == {"READY": "1", "STATUS": "config reloaded"}
        daemon.wait_output("CONFIG_RELOADED", count=workers)
        daemon.signal(signal.SIGTERM)
        assert notify.wait_for("STOPPING") == {"STOPPING": "1"}
        assert daemon.process.wait(DRAIN + 10) == 0
        notify.receive(0.5)
        # the main process alone speaks for the service (NotifyAccess=main): never a worker
        senders = {pid for pid, _ in notify.messages}
        assert senders == {daemon.process.pid}, (senders, daemon.process.pid)
        assert [list(m) for _, m in notify.messages] == [
            ["READY"], ["RELOADING", "MONOTONIC_USEC"], ["READY", "STATUS"], ["STOPPING"]]
    finally:
        notify.close()
        if daemon is not None:
            daemon.stop()


def test_without_a_notify_socket_nothing_is_sent_and_nothing_fails(kafka: Kafka,
                                                                   tmp_path: Path) -> None:
    daemon, port, _ = started(kafka, tmp_path, 1, env={"NOTIFY_SOCKET": "/nonexistent/sock"})
    try:
        daemon.signal(signal.SIGHUP)
        daemon.wait_output("CONFIG_RELOADED")
        wait_until(daemon.alive, 1)
    finally:
        assert daemon.stop() == 0
    assert "Traceback" not in daemon.output()
