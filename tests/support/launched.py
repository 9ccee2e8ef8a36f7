"""A command started as a user starts it in a terminal (`make run`, a README command): its own
process group, output (stdout and stderr together, in order) to a file, stopped with what
Ctrl-C sends."""

from __future__ import annotations

import os
import pty
import signal
import subprocess
import termios
import threading
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
    #: the thread copying a terminal's output to `log` (`launch(terminal=True)`)
    copier: threading.Thread | None = None

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def running(self) -> bool:
        return self.process.poll() is None

    def printing(self) -> bool:
        """Whether more output may come: the process runs, or what it printed to its terminal
        is not all in `log` yet (the copy ends when the terminal's last writer has gone, a
        moment after the process: a command that printed and exited may not be in `log` yet)."""
        return self.running() or (self.copier is not None and self.copier.is_alive())

    def wait_output(self, text: str, timeout: float = 30.0) -> str:
        """Wait until `text` is in the output; return the output."""
        wait_until(lambda: text in self.output() or not self.printing(), timeout,
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
           log: Path | None = None, terminal: bool = False) -> Launched:
    """Run `command` with bash in `cwd`, as its own process group. With `terminal`, its output
    goes to a pseudo-terminal, as in a terminal window: programs print there what they print
    for a person (curl, for one, leaves out its progress meter), and it is copied to `log`."""
    log = log or cwd / f".launched-{time.monotonic_ns()}.log"
    full_env = {**os.environ, **(env or {})}
    if not terminal:
        with open(log, "wb") as out:
            process = subprocess.Popen(["bash", "-c", command], cwd=cwd, stdout=out,
                                       stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                       env=full_env, start_new_session=True)
        return Launched(process, log, command)
    main, child = pty.openpty()
    attributes = termios.tcgetattr(child)
    attributes[1] &= ~termios.ONLCR  # lines end in \n, as in the file a test reads
    termios.tcsetattr(child, termios.TCSANOW, attributes)
    process = subprocess.Popen(["bash", "-c", command], cwd=cwd, stdout=child, stderr=child,
                               stdin=subprocess.DEVNULL, env={**full_env, "TERM": "dumb"},
                               start_new_session=True)
    os.close(child)

    def copy() -> None:
        with open(log, "wb") as out:
            while True:
                try:
                    chunk = os.read(main, 65536)
                except OSError:  # EIO: every process holding the terminal has exited
                    break
                if not chunk:
                    break
                out.write(chunk)
                out.flush()
        os.close(main)

    open(log, "wb").close()
    copier = threading.Thread(target=copy, daemon=True)
    copier.start()
    return Launched(process, log, command, copier)
