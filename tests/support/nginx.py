"""Real nginx as the upstream of Zilla's http.proxy example (its compose file runs `nginx:stable`
with the example's nginx.conf, ssl/ and www/): the same server block - TLS with the example's
certificate, HTTP/2, `root` the example's pages - on a free loopback port, run as the
test's user (`user` is that user, logs, pid and temp files in the test's folder, in the foreground).

What the example's config does not have, and the tests use: `dav_methods PUT` (so a request
body going through the proxy can be read back as a file), and an access log line per request
that names the protocol (`HTTP/2.0`, `HTTP/1.1`), the request's size, the connection, the
bytes sent and an `Upgrade` offered, to show what the upstream saw.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ssekd.dev.broker import free_port
from tests.support.wait import wait_until

NGINX = shutil.which("nginx") or "/usr/sbin/nginx"

_CONF = """\
user  {user};
worker_processes  1;
error_log  {folder}/error.log warn;
pid        {folder}/nginx.pid;

events {{
    worker_connections  1024;
}}

http {{
    include       /etc/nginx/mime.types;
    default_type  application/octet-stream;

    log_format seen '$request_method $request_uri $server_protocol $status $request_length '
                    '$http_host $connection $body_bytes_sent $http_upgrade';
    access_log {folder}/access.log seen;
    client_body_temp_path {folder}/body;
    proxy_temp_path {folder}/proxy;
    fastcgi_temp_path {folder}/fastcgi;
    uwsgi_temp_path {folder}/uwsgi;
    scgi_temp_path {folder}/scgi;

    sendfile        on;
    keepalive_timeout  65;
    client_max_body_size 64m;

    server {{
        listen 127.0.0.1:{port} ssl http2;

        ssl_certificate     {ssl}/cert.pem;
        ssl_certificate_key {ssl}/key.pem;

        root {root};
        dav_methods PUT;
        create_full_put_path on;
    }}

    server {{
        listen 127.0.0.1:{plain_port};
        root {root};
        dav_methods PUT;
    }}

    server {{
        listen 127.0.0.1:{h2c_port} http2;
        root {root};
        dav_methods PUT;
    }}
}}
"""


@dataclass
class Nginx:
    """A running nginx; `root` is the folder it serves (a copy of the example's www/). `port`
    is the example's (TLS, HTTP/2 or HTTP/1.1 by ALPN); the same pages are on `plain_port`
    (cleartext HTTP/1.1) and `h2c_port` (cleartext HTTP/2 with prior knowledge)."""

    port: int
    plain_port: int
    h2c_port: int
    folder: Path
    root: Path
    process: subprocess.Popen[bytes]

    def seen(self) -> list[str]:
        """The access log: `METHOD URI PROTOCOL STATUS REQUEST_LENGTH HOST CONNECTION
        BODY_BYTES_SENT UPGRADE` per request (CONNECTION: nginx's serial number of the
        connection; UPGRADE: the `Upgrade` header, `-` without one)."""
        log = self.folder / "access.log"
        return log.read_text().splitlines() if log.exists() else []

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)


def start_nginx(example: Path, folder: Path, port: int | None = None) -> Nginx:
    """nginx as the example's compose file runs it (module docstring), its files from the
    example folder `example` (ssl/, www/), its own under `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    root = folder / "html"
    shutil.copytree(example / "www", root, dirs_exist_ok=True)
    port = port or free_port()
    plain_port, h2c_port = free_port(), free_port()
    conf = folder / "nginx.conf"
    user = pwd.getpwuid(os.getuid()).pw_name  # workers read the test's folder, as it does
    conf.write_text(_CONF.format(user=user, folder=folder, port=port, plain_port=plain_port,
                                 h2c_port=h2c_port, ssl=example / "ssl", root=root))
    process = subprocess.Popen([NGINX, "-p", str(folder), "-c", str(conf), "-e",
                                str(folder / "error.log"), "-g", "daemon off;"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_until(lambda: process.poll() is not None or _accepts(port), 10)
    finally:
        if process.poll() is not None:
            _, err = process.communicate(timeout=10)
            raise RuntimeError(f"nginx did not start: {err.decode(errors='replace')}")
    return Nginx(port, plain_port, h2c_port, folder, root, process)


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), 0.5):
            return True
    except OSError:
        return False
