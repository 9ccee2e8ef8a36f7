"""A file larger than 1 GiB is served whole and byte for byte. (That it is streamed by a producer
rather than read into memory is measured by the benchmark, `bench/static.py`: the daemon's RSS
while serving this same file.)"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.daemon import Daemon
from tests.support.static_site import write_site

pytestmark = [pytest.mark.daemon]

SIZE = (1 << 30) + (64 << 20)  # 1 GiB + 64 MiB
#: Offsets where the otherwise empty (sparse, all zeros) file has text, to be found in place.
MARKS = [0, (1 << 30) - 3, SIZE - 100]


def test_large_file_is_served_whole(tmp_path: Path, run_daemon: Callable[..., Daemon],
                                    port: int) -> None:
    config = write_site(tmp_path)
    big = tmp_path / "www" / "big.bin"
    with open(big, "wb") as f:  # sparse: costs no disk
        f.truncate(SIZE)
        for offset in MARKS:
            f.seek(offset)
            f.write(b"mark at %d" % offset)
    run_daemon(config, env={"HTTP_PORT": str(port)}, wait_ports=[port])
    curl = subprocess.Popen(["curl", "-sS", "--fail", f"http://localhost:{port}/big.bin"],
                            stdout=subprocess.PIPE)
    assert curl.stdout is not None
    compared = subprocess.run(["cmp", "-", str(big)], stdin=curl.stdout, capture_output=True,
                              text=True, timeout=240, check=False)
    curl.stdout.close()
    assert curl.wait(10) == 0
    assert compared.returncode == 0, compared.stdout + compared.stderr
