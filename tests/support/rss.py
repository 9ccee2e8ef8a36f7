"""Measuring helpers shared by tests and benchmarks (bench/ puts the project on sys.path)."""

from __future__ import annotations

import threading
import time
from types import TracebackType
from typing import Self

import psutil


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
