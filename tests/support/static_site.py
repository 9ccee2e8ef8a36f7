"""A static site served by the daemon (tcp -> http -> http-filesystem -> filesystem) on the port
in `HTTP_PORT`, with files made to probe paths, ranges and a symlink leading out of the root."""

from __future__ import annotations

import os
from pathlib import Path

CONFIG = """\
name: test
bindings:
  tcp0:
    type: tcp
    kind: server
    options:
      host: 127.0.0.1
      port: ${{{{ env.HTTP_PORT }}}}
    exit: http0
  http0:
    type: http
    kind: server
    options:
      limits:
        header-timeout: 1
        header-bytes: 4096
{cors}
    routes:
      - when:
          - headers:
              :authority: localhost:${{{{ env.HTTP_PORT }}}}
          - headers:
              :authority: 127.0.0.1:${{{{ env.HTTP_PORT }}}}
        exit: files_map
  files_map:
    type: http-filesystem
    kind: proxy
    routes:
      - when:
          - path: /{{path}}
        exit: files
        with:
          path: ${{params.path}}
  files:
    type: filesystem
    kind: server
    options:
      location: www
{files_options}telemetry:
  exporters:
    out:
      type: stdout
"""

SAME_ORIGIN = ""
CROSS_ORIGIN = """\
      access-control:
        policy: cross-origin
        allow:
          origins: [https://app.example.com]
          credentials: true
        max-age: 600
        expose:
          headers: [x-trace]"""


def write_site(root: Path, cors: str = SAME_ORIGIN, files_options: str = "") -> Path:
    """The site under `root`; `files_options` are more lines of the filesystem's options."""
    www = root / "www"
    (www / "docs").mkdir(parents=True)
    (www / ".git").mkdir()
    (www / ".git" / "config").write_text("[remote]\n")
    (www / ".env").write_text("PASSWORD=hunter2\n")
    (www / "docs" / ".secret").write_text("hidden\n")
    (www / "index.html").write_text("<h1>ssekd</h1>\n")
    (www / "docs" / "index.html").write_text("docs\n")
    (www / "one-k.txt").write_bytes(b"x" * 1024)
    (www / "app.js").write_text("console.log(1)\n")
    (root / "secret.txt").write_text("outside\n")
    os.symlink(root / "secret.txt", www / "link-out.txt")
    config = root / "zilla.yaml"
    config.write_text(CONFIG.format(cors=cors, files_options=files_options))
    return config
