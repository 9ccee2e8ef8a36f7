"""librdkafka's log goes through the binding's events: connection failures say themselves once
per change of the broker's state (not twenty `%3|...|FAIL|...` lines a second on stderr), other
lines once a minute at most, and while no broker answers the connection attempts come further
and further apart."""

from __future__ import annotations

import re
import socket
import threading
import time
from pathlib import Path

import pytest

from ssekd.bindings.kafka.librdkafka import LibrdkafkaLog
from ssekd.bindings.kafka.settings import ClientSettings
from ssekd.dev.broker import Broker, free_port, start_broker
from tests.support import faults
from tests.support import zilla_config as zc
from tests.support.daemon import start_daemon
from tests.support.wait import wait_until

FAIL = ("FAIL", "rdkafka#consumer-1", "localhost:9/bootstrap: Connect to ipv4#127.0.0.1:9 "
                                      "failed: Connection refused (after 0ms in state CONNECT)")


def test_connection_failures_are_kept_quiet_other_lines_said_once_a_minute() -> None:
    said: list[tuple[str, str]] = []
    now = [0.0]
    log = LibrdkafkaLog(lambda name, detail: said.append((name, detail)), clock=lambda: now[0])
    for _ in range(50):
        log.log(40, "%s [%s] %s", *FAIL)
    assert said == [] and "Connection refused" in str(log.last_failure)
    for _ in range(3):
        log.log(30, "%s [%s] %s", "CONFWARN", "rdkafka#consumer-1", "property x is ignored")
    now[0] = 61.0
    log.log(30, "%s [%s] %s", "CONFWARN", "rdkafka#consumer-1", "property x is ignored")
    assert said == [("BINDING_KAFKA_LOG", "CONFWARN: property x is ignored"),
                    ("BINDING_KAFKA_LOG", "CONFWARN: property x is ignored (2 repeat(s) in the "
                                          "last minute not shown)")]


def test_the_rest_between_consumers_follows_librdkafka_s_back_off_properties() -> None:
    settings = ClientSettings(("localhost:9",))
    assert settings.backoff(settings.consumer_config("g")) == (0.5, 10.0)
    short = ClientSettings(("localhost:9",), properties={"reconnect.backoff.max.ms": 200})
    conf = short.consumer_config("g")
    assert conf["reconnect.backoff.ms"] == 200, "librdkafka wants start <= maximum"
    assert short.backoff(conf) == (0.2, 0.2)


class AcceptAndClose:
    """A port where every connection is accepted and closed at once, noting when: how often
    the daemon tries its broker, which a refused connection would not show."""

    def __init__(self, port: int) -> None:
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", port))
        self.sock.listen(128)
        self.sock.settimeout(0.1)
        self.times: list[float] = []
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stopping.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            self.times.append(time.monotonic())
            conn.close()

    def close(self) -> None:
        self.stopping.set()
        self.thread.join(5)
        self.sock.close()


@pytest.mark.daemon
@pytest.mark.timeout(120)
def test_no_broker_one_line_and_attempts_further_apart_then_connected(tmp_path: Path) -> None:
    broker_port = free_port()
    fake = AcceptAndClose(broker_port)
    daemon = None
    broker: Broker | None = None
    try:
        port = free_port()
        built = faults.config(f"127.0.0.1:{broker_port}", port)
        built["bindings"]["kafka_client"]["options"]["properties"][
            "reconnect.backoff.max.ms"] = 8000
        built["bindings"]["cache_server"]["options"]["bootstrap"] = ["early"]
        config = zc.write(tmp_path / f"zilla-{port}.yaml", built)
        daemon = start_daemon(config, wait_ports=[port])
        daemon.wait_output("BINDING_KAFKA_BROKER_UNAVAILABLE", timeout=15)
        # timed from the first attempt, not the start: a loaded machine starts the daemon late
        wait_until(lambda: bool(fake.times), timeout=10)
        start = fake.times[0]
        time.sleep(max(0.0, 25 - (time.monotonic() - start)))
        fake.close()
        output = daemon.output()
        assert output.count("BINDING_KAFKA_BROKER_UNAVAILABLE") == 1, output
        assert "%3|" not in output and "FAIL" not in output, output
        assert len(output.splitlines()) < 30, output
        times = [t - start for t in fake.times]
        # before: an attempt every 50 ms for ever (500 in 25 s); now each consumer tries every
        # 0.25 s for its 2 s and the rest before the next one doubles (0.5, 1, 2, 4, 8 s): the
        # silences between attempts (those under 0.9 s are a consumer's own retries) grow
        assert len(times) < 100, times
        silences = [b - a for a, b in zip(times, times[1:], strict=False) if b - a >= 0.9]
        assert len(silences) >= 3, times
        assert all(b > a for a, b in zip(silences, silences[1:], strict=False)), silences
        assert silences[-1] > 2 * silences[0], silences
        broker = start_broker(broker_port)
        daemon.wait_output("BINDING_KAFKA_BROKER_CONNECTED", timeout=30)
        back = daemon.output().split("BINDING_KAFKA_BROKER_CONNECTED", 1)[1].splitlines()[0]
        assert re.search(r"\(back after \d+ s away; \d+ tries failed\)$", back), back
    finally:
        fake.close()
        if daemon is not None:
            daemon.stop()
        if broker is not None:
            broker.stop()
