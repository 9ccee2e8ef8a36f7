"""The daemon serving SSE over HTTP/3 for the tests: the usual tcp -> tls -> http -> sse ->
sse-kafka -> kafka chain, plus a quic server binding on a UDP port whose exit is that same http
server, and a producer that keeps a topic busy while a test reads it."""

from __future__ import annotations

import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ssekd.dev.broker import free_port
from tests.support import zilla_config as zc
from tests.support.broker import Kafka
from tests.support.daemon import Daemon, start_daemon
from tests.support.h3client import H3SseClient, free_udp_port
from tests.support.pki import ENV, Pki
from tests.support.wait import wait_until


@dataclass
class H3Daemon:
    """A running daemon: TLS on `tls_port` (TCP), QUIC on `quic_port` (UDP), Prometheus metrics
    on `metrics_port`."""

    daemon: Daemon
    tls_port: int
    quic_port: int
    metrics_port: int
    ca: Path

    def client(self, **options: Any) -> H3SseClient:
        """A connected HTTP/3 client of the daemon (the test's CA verifies its key)."""
        return H3SseClient(options.pop("port", self.quic_port), ca=self.ca, **options).connect()

    def metric(self, name: str, **labels: str) -> float:
        """The sum of a metric's samples that carry `labels`, over their other labels (and over
        the workers: the parent's scrape sums them), from the Prometheus endpoint; 0 if none."""
        wanted = [f'{key}="{value}"' for key, value in labels.items()]
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics",
                                    timeout=10) as answer:
            text = answer.read().decode()
        total = 0.0
        for line in text.splitlines():
            sample, _, value = line.rpartition(" ")
            if (sample == name or sample.startswith(name + "{")) and all(
                    label in sample for label in wanted):
                total += float(value)
        return total

    def stop(self) -> None:
        self.daemon.stop()


def h3_config(folder: Path, pki: Pki, bootstrap: str, *, quic: zc.Node | None = None,
              **stack: Any) -> tuple[Path, int, int, int]:
    """Write the config; returns (path, tls port, quic port, metrics port). `quic` adds to the
    quic binding's options (`limits`, `retry` ...); `stack` goes to `zc.sse_stack` (`engine`,
    `sse`, `http` ...)."""
    tls_port, quic_port, metrics_port = free_port(), free_udp_port(), free_port()
    quic_binding: zc.Node = {
        "type": "quic", "kind": "server", "vault": "server",
        "options": {"host": "127.0.0.1", "port": quic_port, "keys": ["localhost"],
                    "alpn": ["h3"], **(quic or {})},
        "exit": "http"}
    config = zc.sse_stack(
        tls_port, bootstrap, name="h3test",
        tls=zc.tls_server("server", alpn=["h2", "http/1.1"]),
        vaults={"server": zc.keys_vault(pki.keys, "${{env.KEYSTORE_PASSWORD}}")},
        telemetry=zc.stdout_telemetry("out", prometheus_port=metrics_port),
        extra={"quic": quic_binding}, **stack)
    return zc.write(folder / f"h3-{quic_port}.yaml", config), tls_port, quic_port, metrics_port


def start_h3_daemon(folder: Path, pki: Pki, bootstrap: str, *, workers: int | None = None,
                    **options: Any) -> H3Daemon:
    """Start the daemon of `h3_config` and wait until it answers an HTTP/3 handshake (its TCP
    port says the process is up; the UDP one can only be told by a QUIC client)."""
    config, tls_port, quic_port, metrics_port = h3_config(folder, pki, bootstrap, **options)
    extra = ["--workers", str(workers)] if workers is not None else None
    daemon = start_daemon(config, ENV, wait_ports=[tls_port, metrics_port], extra_args=extra)
    running = H3Daemon(daemon, tls_port, quic_port, metrics_port, pki.ca_pem)

    def answers() -> bool:
        try:
            running.client().close()
        except ConnectionError:
            return False
        return True

    try:
        wait_until(answers, 20, what=lambda: f"no HTTP/3 handshake on {quic_port}:\n"
                                             f"{daemon.output()}")
    except AssertionError:
        daemon.stop()
        raise
    return running


@dataclass
class Producer:
    """Produces `prefix-<n>` to `topic` every `interval` seconds in a thread until `stop()`;
    `produced` is everything it produced, in order (a one-partition topic keeps that order)."""

    kafka: Kafka
    topic: str
    interval: float = 0.005
    prefix: str = "event"
    size: int = 0  # pad values to this many bytes
    produced: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> Producer:
        self._thread = threading.Thread(target=self._run, name="producer", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> list[str]:
        """Stop, wait until the broker has every record; returns `produced`."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        self.kafka.flush()
        return self.produced

    def count(self) -> int:
        return len(self.produced)

    def _run(self) -> None:
        n = 0
        next_at = time.monotonic()
        while not self._stop.is_set():
            value = f"{self.prefix}-{n}"
            value = value + "." * max(0, self.size - len(value))
            self.kafka.produce(self.topic, value.encode())
            self.produced.append(value)
            n += 1
            if n % 20 == 0:
                self.kafka.producer.poll(0)
            next_at += self.interval
            self._stop.wait(max(0.0, next_at - time.monotonic()))
