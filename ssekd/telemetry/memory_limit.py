"""The memory limit of the daemon's control group, for `ssekd.memory.limit`: what the kernel
holds every process of the unit to (systemd's `MemoryMax=`, a container's memory limit).

Exported so an alert can compare the daemon's memory with what it may use before the OOM killer
ends it, without the operator copying the limit into the alert. cgroup v2 keeps it in
`memory.max` of the process's group; v1 in `memory.limit_in_bytes` of its memory group. No limit
(`max`, or v1's page-rounded 2^63) is None, and the metric is absent.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

#: At or above this, a v1 limit means "none" (the kernel writes 2^63 rounded to a page).
UNLIMITED = 1 << 60
#: Seconds a reading is reused: a scrape every second need not read sysfs every time.
TTL = 60.0


def _cgroups(text: str) -> tuple[str | None, str | None]:
    """(v2 path, v1 memory path) from /proc/self/cgroup."""
    v2 = v1 = None
    for line in text.splitlines():
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hierarchy == "0" and controllers == "":
            v2 = path
        elif "memory" in controllers.split(","):
            v1 = path
    return v2, v1


def read_limit(root: Path = Path("/sys/fs/cgroup"),
               proc_cgroup: Path = Path("/proc/self/cgroup")) -> int | None:
    """The limit in bytes, or None without one (or when it cannot be read)."""
    try:
        v2, v1 = _cgroups(proc_cgroup.read_text())
    except OSError:
        return None
    candidates: list[Path] = []
    if v1 is not None:
        candidates += [root / "memory" / v1.lstrip("/") / "memory.limit_in_bytes",
                       root / "memory" / "memory.limit_in_bytes"]
    if v2 is not None:
        candidates += [root / v2.lstrip("/") / "memory.max", root / "memory.max"]
    for path in candidates:
        try:
            text = path.read_text().strip()
        except OSError:
            continue
        if text == "max":
            return None
        try:
            value = int(text)
        except ValueError:
            continue
        return value if value < UNLIMITED else None
    return None


class MemoryLimit:
    """`read_limit`, read again at most every `TTL` seconds."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._at = float("-inf")
        self._value: int | None = None

    def __call__(self) -> int | None:
        now = self.clock()
        if now - self._at >= TTL:
            self._at = now
            self._value = read_limit()
        return self._value
