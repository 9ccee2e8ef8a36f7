"""A file larger than 1 GiB is streamed by a producer: the daemon's memory stays flat."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.support.rss import PeakRss
from tests.support.static_site import write_site

pytestmark = [pytest.mark.daemon]

SIZE = (1 << 30) + (64 << 20)  # 1 GiB + 64 MiB


def test_large_file_rss_stays_flat(tmp_path: Path, run_daemon, port: int) -> None:  # type: ignore[no-untyped-def]
    config = write_site(tmp_path)
    big = tmp_path / "www" / "big.bin"
    with open(big, "wb") as f:  # sparse: costs no disk, reads as zeros
        f.truncate(SIZE)
    daemon = run_daemon(config, env={"HTTP_PORT": str(port)}, wait_ports=[port])
    with PeakRss(daemon.process.pid) as rss:
        result = subprocess.run(
            ["curl", "-s", "-o", "/dev/null", "-w", "%{http_code} %{size_download}",
             "--limit-rate", "400M", f"http://localhost:{port}/big.bin"],
            capture_output=True, timeout=240, check=True)
    status, size = result.stdout.decode().split()
    assert status == "200" and int(size) == SIZE
    assert rss.growth < 50 * 1024 * 1024, f"RSS grew by {rss.growth / 2**20:.1f} MiB"
