"""A command started as a user starts it in a terminal (`make run`, a README command): its own
process group, output (stdout and stderr together, in order) to a file, stopped with what
Ctrl-C sends."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tests.support.wait import wait_until


@dataclass
class Launched:
    process: subprocess.Popen[bytes]
    log: Path
    command: str

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def running(self) -> bool:
        return self.process.poll() is None

    def wait_output(self, text: str, timeout: float = 30.0) -> str:
        """Wait until `text` is in the output; return the output."""
        wait_until(lambda: text in self.output() or not self.running(), timeout,
                   what=lambda: f"{text!r} not in the output of {self.command}:\n"
                                f"{self.output()[-4000:]}")
        assert text in self.output(), f"{self.command} exited " \
                                      f"{self.process.returncode}:\n{self.output()[-4000:]}"
        return self.output()

    def interrupt(self, timeout: float = 30.0) -> int:
        """Ctrl-C: SIGINT to the process group; SIGKILL after `timeout`. Returns the status."""
        if self.running():
            os.killpg(self.process.pid, signal.SIGINT)
            try:
                return self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(10)
                raise AssertionError(f"{self.command} did not stop on Ctrl-C:\n"
                                     f"{self.output()[-4000:]}") from None
        return self.process.returncode

    def wait(self, timeout: float = 60.0) -> int:
        return self.process.wait(timeout)


def launch(command: str, cwd: Path, env: Mapping[str, str] | None = None,
           log: Path | None = None) -> Launched:
    """Run `command` with bash in `cwd`, as its own process group."""
    log = log or cwd / f".launched-{time.monotonic_ns()}.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(["bash", "-c", command], cwd=cwd, stdout=out,
                                   stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   env={**os.environ, **(env or {})}, start_new_session=True)
    return Launched(process, log, command)
