"""Real nginx (the Debian package) as an example's upstream, run from the example's own
`nginx.conf` on a free loopback port: what the example's container mounts and writes (the site,
the logs, the pid file) lives in a folder of the test, and its access log counts the requests
that reached it."""

from __future__ import annotations

import getpass
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ssekd.dev.broker import free_port, port_open, stop_process
from tests.support.wait import wait_until

NGINX = shutil.which("nginx") or "/usr/sbin/nginx"
#: Where the example's container has its site (the compose file mounts `www/` there).
SITE = "/usr/share/nginx/html"


@dataclass
class Nginx:
    process: subprocess.Popen[bytes]
    port: int
    folder: Path

    @property
    def access_log(self) -> Path:
        return self.folder / "access.log"

    def requests(self) -> list[str]:
        """The request lines it has answered (`GET /valid.json HTTP/1.1`), in order."""
        if not self.access_log.exists():
            return []
        return re.findall(r'"([A-Z]+ \S+ HTTP/[0-9.]+)"', self.access_log.read_text())

    def stop(self) -> None:
        stop_process(self.process, 10)


def adapt(conf: str, port: int, site: Path, folder: Path) -> str:
    """The example's nginx.conf for this machine: loopback and `port` instead of `80` on every
    address, the test's folder for the site, logs, pid and temporary files, in the foreground."""
    conf = re.sub(r"^\s*user\s+[^;]+;", f"user {getpass.getuser()};", conf, flags=re.M)
    conf = re.sub(r"error_log\s+\S+", f"error_log {folder / 'error.log'}", conf)
    conf = re.sub(r"access_log\s+\S+", f"access_log {folder / 'access.log'}", conf)
    conf = re.sub(r"pid\s+\S+;", f"pid {folder / 'nginx.pid'};", conf)
    conf = re.sub(r"^\s*listen\s+\[::\]:80;\n", "", conf, flags=re.M)
    conf = re.sub(r"listen\s+80;", f"listen 127.0.0.1:{port};", conf)
    conf = conf.replace(f"root {SITE};", f"root {site};")
    temp = "".join(f"    {kind}_temp_path {folder / kind};\n"
                   for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    conf = re.sub(r"http\s*\{\n", lambda m: m.group(0) + temp, conf, count=1)
    return "daemon off;\n" + conf


def start_nginx(conf: Path, site: Path, folder: Path) -> Nginx:
    """nginx with the example's `conf`, serving `site`, listening on a free loopback port."""
    folder.mkdir(parents=True, exist_ok=True)
    port = free_port()
    adapted = folder / "nginx.conf"
    adapted.write_text(adapt(conf.read_text(encoding="utf-8"), port, site.resolve(), folder),
                       encoding="utf-8")
    process = subprocess.Popen([NGINX, "-p", str(folder), "-c", str(adapted),
                                "-e", str(folder / "error.log")],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_until(lambda: port_open("127.0.0.1", port) or process.poll() is not None, 10,
                   what="nginx to listen")
        if process.poll() is not None:
            raise RuntimeError(f"nginx exited: {(folder / 'error.log').read_text()}")
    except BaseException:
        stop_process(process, 5)
        raise
    return Nginx(process, port, folder)
