"""Shared bits of the benchmarks: starting processes on loopback, tables, result files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import psutil

from ssekd.dev.broker import free_port, port_open, stop_process

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
BIN = Path(sys.executable).parent



def wait_port(port: int, process: subprocess.Popen[bytes] | None = None,
              timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not port_open("127.0.0.1", port):
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"process exited with {process.returncode}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"nothing listens on {port}")
        time.sleep(0.05)


def spawn(argv: Sequence[str], cwd: Path | None = None, env: dict[str, str] | None = None,
          log: Path | None = None) -> subprocess.Popen[bytes]:
    out = open(log, "wb") if log else subprocess.DEVNULL  # noqa: SIM115 - the child owns it
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.Popen(list(argv), cwd=cwd, env=full_env, stdout=out,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


def stop(process: subprocess.Popen[bytes]) -> None:
    stop_process(process)


def table(title: str, header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [list(map(str, header))] + [[_fmt(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = [f"## {title}", ""]
    lines.append("| " + " | ".join(c.ljust(w) for c, w in zip(cells[0], widths)) + " |")
    lines.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for r in cells[1:]:
        lines.append("| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |")
    return "\n".join(lines)


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.1f}" if abs(value) >= 10 else f"{value:.2f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def write_result(name: str, data: dict[str, Any]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    data = {"bench": name, "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "cpus": os.cpu_count(), **data}
    path.write_text(json.dumps(data, indent=2) + "\n")
    return path


__all__ = [
    "BIN",
    "RESULTS",
    "ROOT",
    "free_port",
    "port_open",
    "spawn",
    "stop",
    "table",
    "wait_port",
    "write_result",
]


class PeakRss:
    """Samples a process's resident memory every `interval` seconds while the block runs.

    `with PeakRss(pid) as rss: ...` then `rss.before`, `rss.peak`, `rss.growth` (bytes).
    """

    def __init__(self, pid: int, interval: float = 0.02) -> None:
        self.process = psutil.Process(pid)
        self.interval = interval
        self.before = self.peak = 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    @property
    def growth(self) -> int:
        return self.peak - self.before

    def _sample(self) -> None:
        while not self._done.is_set():
            self.peak = max(self.peak, self.process.memory_info().rss)
            time.sleep(self.interval)

    def __enter__(self) -> Self:
        self.before = self.peak = self.process.memory_info().rss
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._done.set()
        self._thread.join()


def commit_of(root: Path) -> str:
    """The short commit id of the checkout at `root` (what a row measured), or "unknown"."""
    try:
        return subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def sent_ages(pending: bytes, data: bytes, now: float, into: list[float]) -> bytes:
    """Read the send times the load's events carry (`data:<time> ...`) from a stream's bytes:
    `now` minus each goes to `into`. `pending` is the unread end of the stream's previous bytes;
    returns this one's (an event cut between two reads is read with the next)."""
    text = pending + data
    pos = 0
    while True:
        a = text.find(b"data:", pos)
        if a < 0:
            break
        b = text.find(b" ", a)
        if b < 0:
            break
        try:
            into.append(now - float(text[a + 5:b]))
        except ValueError:
            pass
        pos = b
    return text[pos:][-64:]
