"""Counting the syscalls that put a server's bytes on its sockets, while a scenario runs.

`perf stat` counts the kernel's syscall tracepoints for the server's threads: a counter in the
kernel per syscall, nothing stops the process (as `strace` would, which also multiplies its CPU
time). `/proc/PID/io`'s `syscw` would be cheaper still but counts `write`/`writev` only, not
`send`/`sendto`, which is what Twisted and Python's `socket.send` make. Without `perf` (or
without the right to trace) the count is simply missing from the report.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterable
from pathlib import Path

#: The syscalls a server writes to a socket with (`socket.send` is `sendto`).
SENDS = ("sendto", "sendmsg", "writev", "write")
#: The tracepoint names' endings: each of `SENDS`, and any syscall at all.
ALL = ("", *(f"_{name}" for name in SENDS))


class SyscallCount:
    """`perf stat` on `pids` from construction to `stop()`."""

    def __init__(self, pids: Iterable[int]) -> None:
        self.out = Path(tempfile.mkstemp(prefix="perf-", suffix=".csv")[1])
        perf = shutil.which("perf")
        self.process: subprocess.Popen[bytes] | None = None
        if perf is None:
            return
        events = ",".join([*(f"syscalls:sys_enter_{name}" for name in SENDS),
                           "raw_syscalls:sys_enter"])
        self.process = subprocess.Popen(
            [perf, "stat", "-x", ",", "-e", events, "-p", ",".join(map(str, pids)),
             "-o", str(self.out)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def stop(self) -> dict[str, int] | None:
        """The count of each of `SENDS` since the start, and of every syscall (`all`); None
        without perf."""
        if self.process is None:
            return None
        self.process.send_signal(signal.SIGINT)  # perf writes its counts on SIGINT
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return None
        counts: dict[str, int] = {}
        for line in self.out.read_text().splitlines():
            fields = line.split(",")
            if len(fields) < 3 or not fields[2].endswith(tuple(f"sys_enter{n}" for n in ALL)):
                continue
            name = fields[2].rpartition(":")[2].removeprefix("sys_enter").lstrip("_") or "all"
            counts[name] = int(fields[0]) if fields[0].isdigit() else 0
        self.out.unlink(missing_ok=True)
        return counts if counts else None
