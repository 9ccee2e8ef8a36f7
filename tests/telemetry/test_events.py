"""The stdout exporter: every line the daemon prints to stdout is an event in SPEC §10's format
(`namespace:binding [dd/Mon/yyyy:HH:mm:ss +0000] EVENT_NAME detail`), including the ones about a
config that cannot start, a failed reload, a broker that is down, a TLS handshake that failed, a
token the JWT guard refused and an unreadable last event id.

twistd's own log goes to `--logfile`, so stdout holds what the stdout exporter prints and
nothing else: every line of it must parse.
"""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from ssekd.dev.broker import Broker, free_port, port_open, stop_process
from tests.support.daemon import TWISTD
from tests.support.jwt import JwksServer, ec_key
from tests.support.jwt import curl as jwt_curl
from tests.support.jwt import write_config as write_jwt_config
from tests.support.pki import ENV, Pki, tls_config
from tests.support.sse import SseClient
from tests.support.streamd import write_config

EVENT = re.compile(r"(?P<namespace>[a-zA-Z]+[a-zA-Z0-9._-]*):(?P<binding>[a-zA-Z]+[a-zA-Z0-9._-]*)"
                   r" \[(?P<time>\d\d/[A-Z][a-z]{2}/\d{4}:\d\d:\d\d:\d\d \+0000)\]"
                   r" (?P<name>[A-Z][A-Z0-9_]*) (?P<detail>\S.*)")


@dataclass
class Event:
    namespace: str
    binding: str
    time: datetime
    name: str
    detail: str


def parse(stdout: str, began: float) -> list[Event]:
    """Every line as an event, or fail naming the line; times between `began` and now."""
    events = []
    for line in stdout.splitlines():
        m = EVENT.fullmatch(line)
        assert m is not None, f"not an event line: {line!r}"
        when = datetime.strptime(m["time"], "%d/%b/%Y:%H:%M:%S %z")
        assert when.tzinfo is not None and when.utcoffset() == UTC.utcoffset(None)
        assert began - 1 <= when.timestamp() <= time.time() + 1, line
        events.append(Event(m["namespace"], m["binding"], when, m["name"], m["detail"]))
    return events


@dataclass
class Run:
    process: subprocess.Popen[bytes]
    stdout: Path
    began: float

    def events(self) -> list[Event]:
        return parse(self.stdout.read_text(errors="replace"), self.began)

    def wait_event(self, name: str, timeout: float = 20.0) -> Event:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = [e for e in self.events() if e.name == name]
            if found:
                return found[0]
            time.sleep(0.1)
        raise AssertionError(f"no {name} in {self.stdout.read_text()}")


@pytest.fixture
def launch(tmp_path: Path) -> Iterator[Any]:
    """`launch(config, ports, env)`: twistd with its log in a file and stdout in another."""
    runs: list[Run] = []

    def start(config: Path, ports: list[int], env: dict[str, str] | None = None,
              wait: bool = True) -> Run:
        out = tmp_path / f"stdout-{len(runs)}.txt"
        with open(out, "wb") as f:
            p = subprocess.Popen(
                [TWISTD, "-n", "--pidfile=", f"--logfile={tmp_path / 'twistd.log'}", "ssekd",
                 "--config", str(config)], stdout=f, stderr=subprocess.DEVNULL,
                stdin=subprocess.DEVNULL, cwd=config.parent,
                env={**__import__("os").environ, **(env or {})})
        run = Run(p, out, time.time())
        runs.append(run)
        deadline = time.monotonic() + 20
        for port in ports if wait else ():
            while not port_open("127.0.0.1", port):
                assert p.poll() is None and time.monotonic() < deadline, out.read_text()
                time.sleep(0.05)
        return run

    yield start
    for r in runs:
        stop_process(r.process, 10)


def test_a_config_error_at_start_is_an_event(tmp_path: Path, launch: Any) -> None:
    config = tmp_path / "zilla.yaml"
    config.write_text("name: broken\nbindings:\n  tcp:\n    type: tcp\n    kind: server\n"
                      "    options: {port: nope}\n    exit: tcp\n")
    run = launch(config, [], wait=False)
    assert run.process.wait(20) == 1
    events = run.events()
    assert events and all(e.name == "CONFIG_INVALID" for e in events)
    assert (events[0].namespace, events[0].binding) == ("broken", "ssekd")
    assert any(f"{config}:6: bindings.tcp.options.port" in e.detail for e in events)


def test_reload_failure_broker_outage_and_unreadable_id(tmp_path: Path, launch: Any) -> None:
    port = free_port()
    dead = f"127.0.0.1:{free_port()}"  # nothing listens: the broker is down
    config = write_config(tmp_path, dead, port)
    run = launch(config, [port])
    run.wait_event("ENGINE_STARTED")
    client = SseClient(port, "/events/topic-a", {"Last-Event-ID": "garbage!"})
    try:
        assert client.status == 200
        unreadable = run.wait_event("BINDING_SSE_KAFKA_LAST_EVENT_ID_UNREADABLE")
        assert unreadable.binding == "sse_kafka" and "garbage!" in unreadable.detail
        down = run.wait_event("BINDING_KAFKA_BROKER_UNAVAILABLE")
        assert down.binding == "kafka_client"
    finally:
        client.close()
    good = config.read_text()
    config.write_text(good.replace("kind: server", "kind: serverless", 1))
    run.process.send_signal(signal.SIGHUP)
    failed = run.wait_event("CONFIG_RELOAD_FAILED")
    assert failed.namespace == "test" and f"{config}:" in failed.detail
    stop_process(run.process, 10)
    names = [e.name for e in run.events()]
    assert names[-1] == "ENGINE_STOPPED"


def test_tls_handshake_failure_is_an_event_and_counted(tmp_path: Path, pki: Pki,
                                                       launch: Any) -> None:
    metrics_port = free_port()
    config, tls_port, _ = tls_config(tmp_path, pki, "{keys: [localhost], alpn: [h2, http/1.1]}",
                                     metrics_port=metrics_port)
    run = launch(config, [tls_port, metrics_port], ENV)
    with socket.create_connection(("127.0.0.1", tls_port), timeout=5) as garbage:
        garbage.sendall(b"\x16\x03\x01\x00\x05garbage that is not a ClientHello\r\n\r\n")
        garbage.recv(4096)
    failed = run.wait_event("BINDING_TLS_HANDSHAKE_FAILED")
    assert (failed.namespace, failed.binding) == ("tlstest", "tls_in")
    ok = subprocess.run(["openssl", "s_client", "-connect", f"127.0.0.1:{tls_port}",
                         "-alpn", "h2", "-servername", "localhost"], input=b"Q\n",
                        capture_output=True, timeout=20)
    assert b"ALPN protocol: h2" in ok.stdout
    page = _scrape(metrics_port)
    assert 'tls_handshakes_total{binding="tls_in",namespace="tlstest",outcome="failed",' \
           'protocol="none"} 1.0' in page
    assert 'tls_handshakes_total{binding="tls_in",namespace="tlstest",outcome="ok",' \
           'protocol="h2"} 1.0' in page


def _scrape(port: int) -> str:
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        return str(r.read().decode())


@pytest.mark.broker
@pytest.mark.daemon
def test_a_refused_token_is_an_event_with_its_reason_and_never_the_token(
        tmp_path: Path, launch: Any, kafka_broker: Broker) -> None:
    key = ec_key()
    jwks = JwksServer([key]).up()
    try:
        port = free_port()
        run = launch(write_jwt_config(tmp_path, port, kafka_broker.bootstrap, jwks.url), [port])
        run.wait_event("GUARD_JWT_KEYS_LOADED")
        expired = key.token(ttl=-60)
        assert jwt_curl(f"http://127.0.0.1:{port}/events/t", token=expired).status == 403
        failed = run.wait_event("GUARD_JWT_AUTHORIZATION_FAILED")
        assert (failed.namespace, failed.binding) == ("test", "jwt0")
        assert "expired" in failed.detail and expired not in run.stdout.read_text()
        assert [e.name for e in run.events()].count("GUARD_JWT_AUTHORIZATION_FAILED") == 1
    finally:
        jwks.down()
