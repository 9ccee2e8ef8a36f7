"""The daemon under twistd: SIGTERM stops it cleanly, SIGHUP reloads the config (a bad one is
refused, a good one adds a route while open connections go on), and it daemonizes with a
pidfile and a logfile."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
from pathlib import Path

import pytest

from ssekd.dev.broker import port_open
from tests.support.daemon import TWISTD, Daemon
from tests.support.http import curl
from tests.support.static_site import write_site
from tests.support.wait import wait_until

pytestmark = [pytest.mark.daemon]


def test_sigterm_exits_zero(site: tuple[Daemon, str], port: int) -> None:
    daemon, _ = site
    assert daemon.stop() == 0
    assert "ENGINE_STOPPED" in daemon.output()


def test_sighup_reload(site: tuple[Daemon, str], tmp_path: Path, port: int) -> None:
    daemon, base = site
    config = daemon.config
    good = config.read_text()
    # An open keep-alive connection made before the reload keeps working after it.
    with socket.create_connection(("127.0.0.1", port), timeout=5) as kept:
        kept.sendall(b"GET /one-k.txt HTTP/1.1\r\nHost: localhost:%d\r\n\r\n" % port)
        assert kept.recv(65536).startswith(b"HTTP/1.1 200")
        config.write_text(good.replace("type: filesystem", "type: filesystem\n    oops: 1"))
        daemon.signal(signal.SIGHUP)
        daemon.wait_output("CONFIG_RELOAD_FAILED")
        assert "oops" in daemon.output()
        assert curl(base + "/")[0] == 200
        (tmp_path / "other").mkdir()
        (tmp_path / "other" / "new.txt").write_text("new route\n")
        config.write_text(good.replace(
            "    routes:\n      - when:\n          - headers:\n              :authority",
            "    routes:\n      - when:\n          - headers:\n              :path: /new/*\n"
            "        exit: other_map\n      - when:\n          - headers:\n              :authority",
            1).replace("telemetry:", OTHER + "telemetry:"))
        daemon.signal(signal.SIGHUP)
        daemon.wait_output("CONFIG_RELOADED")
        status, _, body = curl(base + "/new/new.txt")
        assert status == 200 and body == b"new route\n"
        kept.sendall(b"GET /one-k.txt HTTP/1.1\r\nHost: localhost:%d\r\n\r\n" % port)
        assert kept.recv(65536).startswith(b"HTTP/1.1 200")
    assert daemon.alive()


OTHER = """\
  other_map:
    type: http-filesystem
    kind: proxy
    routes:
      - when:
          - path: /new/{path}
        exit: other
        with:
          path: ${params.path}
  other:
    type: filesystem
    kind: server
    options:
      location: other
"""


def test_daemonized_with_twistd_pidfile_and_logfile(tmp_path: Path, port: int) -> None:
    config = write_site(tmp_path).read_text().replace("    out:\n      type: stdout\n", "")
    (tmp_path / "zilla.yaml").write_text(config.replace("exporters:\n", "exporters: {}\n"))
    pidfile, logfile = tmp_path / "ssekd.pid", tmp_path / "ssekd.log"
    subprocess.run([TWISTD, f"--pidfile={pidfile}", f"--logfile={logfile}", "ssekd",
                    "--config", str(tmp_path / "zilla.yaml")], check=True, timeout=30,
                   cwd=tmp_path, env={**os.environ, "HTTP_PORT": str(port)})
    wait_until(lambda: port_open("127.0.0.1", port), 15, what=f"nothing listens on {port}")
    pid = int(pidfile.read_text())
    try:
        assert curl(f"http://localhost:{port}/")[0] == 200
        assert "ENGINE_STARTED" in logfile.read_text()
    finally:
        os.kill(pid, signal.SIGTERM)
    wait_until(lambda: not pidfile.exists(), 15,
               what="twistd removes its pidfile on an orderly stop")
    assert "ENGINE_STOPPED" in logfile.read_text()
