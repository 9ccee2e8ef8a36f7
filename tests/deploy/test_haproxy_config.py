"""deploy/haproxy/haproxy.cfg: HAProxy accepts it, it balances by open streams, and its health
check asks the readiness path the shipped config's http binding answers, on that binding's
cleartext port. (tests/e2e/test_haproxy.py runs it for real in front of three daemons.)"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from tests.support.deploy import DEPLOY, health_paths, served_ports, shipped_config

CFG = DEPLOY / "haproxy" / "haproxy.cfg"


def test_haproxy_accepts_the_config(tmp_path: Path) -> None:
    text = CFG.read_text().replace("/run/haproxy/ssekd.sock", str(tmp_path / "s.sock"))
    (tmp_path / "haproxy.cfg").write_text(text)
    out = subprocess.run(["haproxy", "-c", "-f", str(tmp_path / "haproxy.cfg")],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stdout + out.stderr


def test_checks_ask_the_readiness_path_on_the_cleartext_port() -> None:
    text = CFG.read_text()
    assert re.search(r"^\s+balance leastconn$", text, re.MULTILINE)
    assert re.search(r"^\s+option http-no-delay$", text, re.MULTILINE)
    (path,) = re.findall(r"option httpchk GET (\S+)", text)
    config = shipped_config()
    served = served_ports(config)
    ports = {int(p) for p in re.findall(r"^\s+server \S+ \S+:(\d+) check", text, re.MULTILINE)}
    assert len(ports) == 1
    (port,) = ports
    binding = served[port].cleartext_http
    assert binding is not None
    paths = health_paths(config, binding)
    assert paths is not None and path.encode() == paths.readiness
