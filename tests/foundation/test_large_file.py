"""A file larger than 1 GiB is streamed by a producer: the daemon's memory stays flat."""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path

import psutil

from tests.foundation.test_static_http import write_site

SIZE = (1 << 30) + (64 << 20)  # 1 GiB + 64 MiB


def test_large_file_rss_stays_flat(tmp_path: Path, run_daemon, port: int) -> None:  # type: ignore[no-untyped-def]
    config = write_site(tmp_path)
    big = tmp_path / "www" / "big.bin"
    with open(big, "wb") as f:  # sparse: costs no disk, reads as zeros
        f.truncate(SIZE)
    daemon = run_daemon(config, env={"HTTP_PORT": str(port)}, wait_ports=[port])
    proc = psutil.Process(daemon.process.pid)
    before = proc.memory_info().rss
    peak = before
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, proc.memory_info().rss)
            time.sleep(0.02)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        result = subprocess.run(
            ["curl", "-s", "-o", "/dev/null", "-w", "%{http_code} %{size_download}",
             "--limit-rate", "400M", f"http://localhost:{port}/big.bin"],
            capture_output=True, timeout=240, check=True)
    finally:
        done.set()
        sampler.join()
    status, size = result.stdout.decode().split()
    assert status == "200" and int(size) == SIZE
    growth = peak - before
    assert growth < 50 * 1024 * 1024, f"RSS grew by {growth / 2**20:.1f} MiB"
