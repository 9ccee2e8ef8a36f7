"""HAProxy (the Debian package) run from the project's deploy/haproxy/haproxy.cfg, rewritten
for loopback: its own listening port, the test's daemons as servers, a stats socket in the
test's folder."""

from __future__ import annotations

import re
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ssekd.dev.broker import port_open, stop_process
from tests.support.wait import wait_until

DEPLOYED = Path(__file__).resolve().parents[2] / "deploy" / "haproxy" / "haproxy.cfg"


#: The address HAProxy connects to the daemons from in the tests (`source`), the one their
#: `proxy-protocol.from` trusts; browsers and other clients connect from 127.0.0.1.
BALANCER = "127.0.0.2"
#: What a daemon behind HAProxy adds to its tcp server's options (`write_config(tcp_options=)`).
TRUST_BALANCER = f", proxy-protocol: {{from: [{BALANCER}]}}"


def loopback_config(folder: Path, port: int, servers: list[int], tls_port: int | None = None,
                    certificate: Path | None = None) -> tuple[Path, Path]:
    """The deployed config with `bind`, `server` lines, stats socket and connection limits
    moved to this machine: plain HTTP on `port`, TLS on `tls_port` with `certificate` (a PEM
    with the key), the servers reached from `BALANCER`; returns (config, stats socket)."""
    text = DEPLOYED.read_text()
    stats = folder / "haproxy.sock"
    text = re.sub(r"stats socket \S+", f"stats socket {stats}", text)
    text = re.sub(r"bind :80\b", f"bind 127.0.0.1:{port}", text)
    if tls_port is not None:
        assert certificate is not None
        text = re.sub(r"bind :443 ssl crt \S+", f"bind 127.0.0.1:{tls_port} ssl crt {certificate}",
                      text)
    else:
        text = re.sub(r"    bind :443 .*\n", "", text)
    # within this machine's open-file limit (HAProxy asks for two per connection)
    text = re.sub(r"maxconn \d+", "maxconn 4000", text)
    lines = [f"    server ssekd{i} 127.0.0.1:{p} check source {BALANCER}"
             for i, p in enumerate(servers, 1)]
    text = re.sub(r"(    server .*\n)+", "\n".join(lines) + "\n", text)
    path = folder / "haproxy.cfg"
    path.write_text(text)
    return path, stats


@dataclass
class Haproxy:
    process: subprocess.Popen[bytes]
    port: int
    stats: Path
    log: Path

    def show_stat(self) -> dict[str, dict[str, str]]:
        """Server name -> its row of `show stat` (status, scur, chkdown...), backend servers
        only."""
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(5)
            s.connect(str(self.stats))
            s.sendall(b"show stat\n")
            data = b""
            while chunk := s.recv(65536):
                data += chunk
        header, *rows = data.decode().strip().splitlines()
        names = header.lstrip("# ").split(",")
        found = {}
        for row in rows:
            cells = dict(zip(names, row.split(","), strict=False))
            if cells["svname"] not in ("FRONTEND", "BACKEND"):
                found[cells["svname"]] = cells
        return found

    def status(self, server: str) -> str:
        return self.show_stat()[server]["status"]

    def stop(self) -> int:
        return stop_process(self.process)


def start_haproxy(folder: Path, port: int, servers: list[int], tls_port: int | None = None,
                  certificate: Path | None = None) -> Haproxy:
    config, stats = loopback_config(folder, port, servers, tls_port, certificate)
    check = subprocess.run(["haproxy", "-c", "-q", "-f", str(config)], capture_output=True,
                           text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    log = folder / "haproxy.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(["haproxy", "-db", "-f", str(config)], stdout=out,
                                   stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    proxy = Haproxy(process, port, stats, log)
    wait_until(lambda: port_open("127.0.0.1", port) and stats.exists(), 10,
               what=lambda: f"haproxy did not start:\n{log.read_text()}")
    return proxy
