"""Real nginx (the Debian package) as an example's upstream, run from the example's own
`nginx.conf` as its compose file runs `nginx:stable`: the same server block (TLS with the
example's `ssl/` certificate and HTTP/2 when the example's has them, plain HTTP otherwise), on
a free loopback port, as the test's user, with what the container mounts and writes (a copy of
the site from `www/`, logs, pid and temporary files) in a folder of the test, in the
foreground.

What the examples' configs do not have, and some tests ask for:

- an access log line per request in a second log (`seen()`) that names the protocol
  (`HTTP/2.0`, `HTTP/1.1`), the request's size, the connection, the bytes sent and an
  `Upgrade` offered, to show what the upstream saw (the example's own log stays, `requests()`);
- `writable`: `dav_methods PUT` (so a request body going through a proxy can be read back as
  a file) and room for large bodies;
- `cleartext`: the same pages on `plain_port` (HTTP/1.1) and `h2c_port` (HTTP/2 with prior
  knowledge) too.
"""

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
#: Where the example's container has its site and its keys (the compose file mounts them).
SITE = "/usr/share/nginx/html"
SSL = "/etc/nginx/ssl/"

_SEEN = ("    log_format seen '$request_method $request_uri $server_protocol $status "
         "$request_length '\n"
         "                    '$http_host $connection $body_bytes_sent $http_upgrade';\n"
         "    access_log {log} seen;\n")
_WRITABLE = "        dav_methods PUT;\n        create_full_put_path on;\n"
_CLEARTEXT = """\
    server {{
        listen 127.0.0.1:{plain_port};
        root {root};
{more}    }}

    server {{
        listen 127.0.0.1:{h2c_port} http2;
        root {root};
{more}    }}
"""


@dataclass
class Nginx:
    """A running nginx; `root` is the folder it serves (a copy of the example's www/), `port`
    the example's server's; `plain_port` and `h2c_port` the cleartext ones (`cleartext`)."""

    process: subprocess.Popen[bytes]
    port: int
    folder: Path
    root: Path
    plain_port: int | None = None
    h2c_port: int | None = None

    def requests(self) -> list[str]:
        """The request lines it has answered (`GET /valid.json HTTP/1.1`), in order, from the
        example's own access log."""
        log = self.folder / "access.log"
        if not log.exists():
            return []
        return re.findall(r'"([A-Z]+ \S+ HTTP/[0-9.]+)"', log.read_text())

    def seen(self) -> list[str]:
        """`METHOD URI PROTOCOL STATUS REQUEST_LENGTH HOST CONNECTION BODY_BYTES_SENT UPGRADE`
        per request (CONNECTION: nginx's serial number of the connection; UPGRADE: the
        `Upgrade` header, `-` without one)."""
        log = self.folder / "seen.log"
        return log.read_text().splitlines() if log.exists() else []

    def stop(self) -> None:
        stop_process(self.process, 10)


def adapt(conf: str, example: Path, folder: Path, root: Path, port: int, *,
          writable: bool = False, cleartext: tuple[int, int] | None = None) -> str:
    """The example's nginx.conf for this machine: loopback and `port` instead of the
    container's `80` or `443` (and no IPv6 twin), the example's ssl/, the test's folder for the
    site, logs, pid and temporary files, in the foreground; with the additions the module
    docstring lists."""
    conf = re.sub(r"^\s*user\s+[^;]+;", f"user {getpass.getuser()};", conf, flags=re.M)
    conf = re.sub(r"error_log\s+\S+", f"error_log {folder / 'error.log'}", conf)
    conf = re.sub(r"access_log\s+\S+", f"access_log {folder / 'access.log'}", conf)
    conf = re.sub(r"pid\s+\S+;", f"pid {folder / 'nginx.pid'};", conf)
    conf = re.sub(r"^\s*listen\s+\[::\]:(?:80|443)\b[^;]*;\n", "", conf, flags=re.M)
    conf = re.sub(r"listen\s+(?:80|443)\b", f"listen 127.0.0.1:{port}", conf)
    conf = conf.replace(SSL, f"{example / 'ssl'}/")
    more = _WRITABLE if writable else ""
    conf = conf.replace(f"root {SITE};\n", f"root {root};\n{more}")
    added = "".join(f"    {kind}_temp_path {folder / kind};\n"
                    for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    added += _SEEN.format(log=folder / "seen.log")
    if writable:
        added += "    client_max_body_size 64m;\n"
    conf = re.sub(r"http\s*\{\n", lambda m: m.group(0) + added, conf, count=1)
    if cleartext is not None:
        plain_port, h2c_port = cleartext
        servers = _CLEARTEXT.format(plain_port=plain_port, h2c_port=h2c_port, root=root,
                                    more=more)
        end = conf.rstrip().rindex("}")  # the http block's
        conf = conf[:end] + "\n" + servers + conf[end:]
    return "daemon off;\n" + conf


def start_nginx(example: Path, folder: Path, port: int | None = None, *,
                writable: bool = False, cleartext: bool = False) -> Nginx:
    """nginx as the compose file of the example folder `example` runs it (its nginx.conf,
    www/ and ssl/), its own files under `folder`, on `port` (else a free one)."""
    folder.mkdir(parents=True, exist_ok=True)
    root = folder / "html"
    shutil.copytree(example / "www", root, dirs_exist_ok=True)
    port = port or free_port()
    twins = (free_port(), free_port()) if cleartext else None
    adapted = folder / "nginx.conf"
    adapted.write_text(adapt((example / "nginx.conf").read_text(encoding="utf-8"), example,
                             folder, root, port, writable=writable, cleartext=twins),
                       encoding="utf-8")
    process = subprocess.Popen([NGINX, "-p", str(folder), "-c", str(adapted),
                                "-e", str(folder / "error.log")],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_until(lambda: port_open("127.0.0.1", port) or process.poll() is not None, 10,
                   what="nginx to listen")
        if process.poll() is not None:
            _, err = process.communicate(timeout=10)
            raise RuntimeError(f"nginx exited: {err.decode(errors='replace')}"
                               f"{(folder / 'error.log').read_text(errors='replace')}")
    except BaseException:
        stop_process(process, 5)
        raise
    return Nginx(process, port, folder, root, *(twins or (None, None)))
