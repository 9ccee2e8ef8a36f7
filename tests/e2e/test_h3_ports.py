"""A quic binding's UDP port held by another process stops the daemon before it listens, with
one line naming the port and the config, as a TCP port does, with and without workers."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

import pytest

from tests.support.daemon import TWISTD
from tests.support.h3stack import h3_config
from tests.support.pki import ENV, Pki

pytestmark = [pytest.mark.daemon]


@pytest.mark.parametrize("workers", [None, 2], ids=["one-process", "two-workers"])
def test_a_taken_udp_port_stops_the_daemon_in_one_line(pki: Pki, tmp_path: Path,
                                                       workers: int | None) -> None:
    config, _, quic_port, _ = h3_config(tmp_path, pki, "127.0.0.1:9")
    extra = ["--workers", str(workers)] if workers else []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as holder:
        holder.bind(("127.0.0.1", quic_port))
        done = subprocess.run([TWISTD, "-n", "--pidfile=", "ssekd", "--config", str(config),
                               *extra], capture_output=True, text=True, timeout=60,
                              env={**os.environ, **ENV}, cwd=tmp_path)
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    (line,) = done.stderr.strip().splitlines()
    assert line == (f"ssekd: UDP port {quic_port} is in use (another ssekd? a `make run` in "
                    f"another terminal?): stop it, or change the port in {config}"), line
    assert "Traceback" not in done.stdout + done.stderr
