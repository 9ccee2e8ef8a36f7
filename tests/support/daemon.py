"""The real daemon, `twistd -n ssekd`, as a child process on loopback ports."""

from __future__ import annotations

import os
import re
import resource
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ssekd.dev.broker import port_open, stop_process
from tests.support.wait import wait_until

TWISTD = str(Path(sys.executable).with_name("twistd"))
SSEKD = str(Path(sys.executable).with_name("ssekd"))
#: `SSEKD_TEST_WORKERS=2 pytest ...` runs every daemon the tests start with that many workers
#: (unless a test chooses its own `--workers`).
WORKERS = os.environ.get("SSEKD_TEST_WORKERS")


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

    def wait_output(self, text: str, timeout: float = 10.0, count: int = 1) -> None:
        """Wait until `text` is in the output (`count` times: once per worker, say)."""
        wait_until(lambda: self.output().count(text) >= count, timeout,
                   what=lambda: f"{text!r} not {count} time(s) in daemon output:\n"
                                f"{self.output()}")

    def workers_started(self) -> bool:
        """Whether every worker has said ENGINE_STARTED (true at once without workers): a
        parent listens before its workers adopt its sockets, and a test that counts events or
        scrapes metrics must not start before them. Only a config with a stdout exporter says."""
        if "type: stdout" not in self.config.read_text():
            return True  # no events to tell: the ports are all there is
        text = self.output()
        parent = re.search(r" ENGINE_STARTED .* with (\d+) workers", text)
        if parent is None:
            return WORKERS is None or " ENGINE_STARTED " in text
        started = len(re.findall(r" ENGINE_STARTED .* worker \d+$", text, re.MULTILINE))
        return started >= int(parent.group(1))

    def worker_pids(self) -> dict[int, int]:
        """Worker number -> pid of the workers running now (from the parent's events)."""
        pids: dict[int, int] = {}
        for line in self.output().splitlines():
            m = re.search(r"ENGINE_WORKER_(STARTED|DIED|STOPPED) worker (\d+) pid (\d+)", line)
            if m and m.group(1) == "STARTED":
                pids[int(m.group(2))] = int(m.group(3))
            elif m:
                pids.pop(int(m.group(2)), None)
        return pids


def start_daemon(config: Path, env: Mapping[str, str] | None = None,
                 wait_ports: list[int] | None = None, timeout: float = 60.0,
                 extra_args: list[str] | None = None, nofile: int | None = None,
                 wait_output: str | None = None) -> Daemon:
    """Start the daemon on `config` and wait until `wait_ports` accept connections, and until
    its output holds `wait_output` (when a probe connection would disturb what a test counts).
    With `nofile`, the daemon runs under `ulimit -n nofile`. `timeout` is how long a start may
    take, not a measure of it: a quiet machine starts the daemon in about a second, one shared
    with other test runs (a CI host, load average 15) took over 20 s."""

    def limit_fds() -> None:
        if nofile is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

    log = config.with_suffix(f".{time.monotonic_ns()}.log")
    out = open(log, "wb")  # noqa: SIM115 - handed to the child, closed just below
    proc_env = dict(os.environ)
    proc_env.update(env or {})
    args = list(extra_args or [])
    if WORKERS and "--workers" not in args:
        args += ["--workers", WORKERS]
    process = subprocess.Popen(
        [TWISTD, "-n", "--pidfile=", "ssekd", "--config", str(config), *args],
        stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=proc_env,
        cwd=config.parent, preexec_fn=limit_fds if nofile is not None else None,
    )
    out.close()
    daemon = Daemon(process, config, log, list(wait_ports or []))
    deadline = time.monotonic() + timeout

    def listening(port: int) -> bool:
        if process.poll() is not None:
            raise AssertionError(f"daemon exited with {process.returncode}:\n{daemon.output()}")
        return port_open("127.0.0.1", port)

    try:
        for port in daemon.ports:
            wait_until(lambda: listening(port), max(0.0, deadline - time.monotonic()),
                       what=lambda: f"daemon did not listen on {port}:\n{daemon.output()}")
        if daemon.ports or wait_output is not None:
            wait_until(lambda: process.poll() is None and daemon.workers_started(),
                       max(0.0, deadline - time.monotonic()),
                       what=lambda: f"workers did not all start:\n{daemon.output()}")
        if wait_output is not None:
            wait_until(lambda: process.poll() is None and wait_output in daemon.output(),
                       max(0.0, deadline - time.monotonic()),
                       what=lambda: f"{wait_output!r} not in daemon output:\n{daemon.output()}")
    except AssertionError:
        daemon.stop()
        raise
    return daemon
