"""Fixtures shared by every test folder: running the real daemon on loopback ports."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from ssekd.broker import Broker, free_port, port_open, start_broker, stop_process

TWISTD = str(Path(sys.executable).with_name("twistd"))


@dataclass
class Daemon:
    """A `twistd -n ssekd` process. Its output goes to `log`; read it with `output()`."""

    process: subprocess.Popen[bytes]
    config: Path
    log: Path
    ports: list[int] = field(default_factory=list)

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def alive(self) -> bool:
        return self.process.poll() is None

    def signal(self, signum: int) -> None:
        self.process.send_signal(signum)

    def stop(self, timeout: float = 10.0) -> int:
        return stop_process(self.process, timeout)

    def wait_output(self, text: str, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in self.output():
                return
            time.sleep(0.05)
        raise AssertionError(f"{text!r} not in daemon output:\n{self.output()}")


def start_daemon(config: Path, env: Mapping[str, str] | None = None,
                 wait_ports: list[int] | None = None, timeout: float = 20.0,
                 extra_args: list[str] | None = None) -> Daemon:
    """Start the daemon on `config` and wait until `wait_ports` accept connections."""
    log = config.with_suffix(f".{time.monotonic_ns()}.log")
    out = open(log, "wb")  # noqa: SIM115 - handed to the child, closed just below
    proc_env = dict(os.environ)
    proc_env.update(env or {})
    process = subprocess.Popen(
        [TWISTD, "-n", "--pidfile=", "ssekd", "--config", str(config), *(extra_args or [])],
        stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=proc_env,
        cwd=config.parent,
    )
    out.close()
    daemon = Daemon(process, config, log, list(wait_ports or []))
    deadline = time.monotonic() + timeout
    for port in daemon.ports:
        while not port_open("127.0.0.1", port):
            if process.poll() is not None:
                raise AssertionError(f"daemon exited with {process.returncode}:\n"
                                     f"{daemon.output()}")
            if time.monotonic() > deadline:
                daemon.stop()
                raise AssertionError(f"daemon did not listen on {port}:\n{daemon.output()}")
            time.sleep(0.05)
    return daemon


@pytest.fixture
def daemons() -> Iterator[list[Daemon]]:
    """Collects daemons started by a test and stops them afterwards, whatever happened."""
    started: list[Daemon] = []
    yield started
    for d in started:
        d.stop()


@pytest.fixture
def run_daemon(daemons: list[Daemon]):  # type: ignore[no-untyped-def]
    """`run_daemon(config_path, env=..., wait_ports=[...])` -> a Daemon stopped after the test."""

    def run(config: Path, env: Mapping[str, str] | None = None,
            wait_ports: list[int] | None = None, **kw: object) -> Daemon:
        d = start_daemon(config, env, wait_ports, **kw)  # type: ignore[arg-type]
        daemons.append(d)
        return d

    return run


@pytest.fixture
def port() -> int:
    return free_port()


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    """One tansu broker for the whole test session, on a free port; tests keep apart by topic."""
    log = tmp_path_factory.mktemp("broker") / "tansu.log"
    broker = start_broker(log_path=log)
    yield broker
    broker.stop()
