"""Static files from the running daemon, with curl as the client: index, ETag and 304, HEAD,
ranges, and no way out of the root."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.daemon import Daemon
from tests.support.http import curl
from tests.support.static_site import write_site

pytestmark = [pytest.mark.daemon]


def test_index_etag_304_and_head(site: tuple[Daemon, str]) -> None:
    _, base = site
    status, headers, body = curl(base + "/")
    assert status == 200 and body == b"<h1>ssekd</h1>\n"
    assert headers["content-type"] == "text/html; charset=utf-8"
    assert "last-modified" in headers and headers["etag"].startswith('"')
    status, headers2, body = curl("-H", f"If-None-Match: {headers['etag']}", base + "/")
    assert status == 304 and body == b"" and headers2["etag"] == headers["etag"]
    status, headers3, body = curl("-I", base + "/one-k.txt")
    assert status == 200 and headers3["content-length"] == "1024" and body == b""
    status, _, body = curl(base + "/docs/")
    assert status == 200 and body == b"docs\n"
    status, headers, _ = curl(base + "/docs?x=1")
    assert status == 301 and headers["location"] == "/docs/?x=1"
    status, headers, _ = curl(base + "/app.js?v=3")
    assert status == 200 and headers["content-type"].startswith("text/javascript")


def test_range_request(site: tuple[Daemon, str]) -> None:
    _, base = site
    status, headers, body = curl("-H", "Range: bytes=10-19", base + "/one-k.txt")
    assert status == 206 and body == b"x" * 10
    assert headers["content-range"] == "bytes 10-19/1024"
    status, _, _ = curl("-H", "Range: bytes=5000-", base + "/one-k.txt")
    assert status == 416


@pytest.mark.parametrize("path", [
    "/../../etc/passwd", "/%2e%2e/%2e%2e/etc/passwd", "//etc/passwd", "/link-out.txt",
    "/docs/../../secret.txt", "/%2fetc/passwd", "/..%2f..%2fsecret.txt", "/missing.html", "/%00",
    "/%2E%2E/secret.txt", "/.%2e/secret.txt", "/%2e./secret.txt", "/..%5csecret.txt",
    "/%2e%2e%5csecret.txt", "/..\\secret.txt", "/%252e%252e/secret.txt", "/..;/secret.txt",
    "/%c0%ae%c0%ae/secret.txt", "/docs/%2e%2e/%2e%2e/secret.txt", "/....//secret.txt",
    "/docs/..%00/secret.txt",
])
def test_no_way_out_of_the_root(site: tuple[Daemon, str], path: str) -> None:
    """The traversal spellings the audit tried (and more): each `404`, nothing outside read."""
    _, base = site
    status, _, body = curl("--path-as-is", base + path)
    assert status == 404 and b"root:" not in body and b"outside" not in body


@pytest.mark.parametrize("path", ["/.env", "/.git/config", "/docs/.secret", "/%2eenv",
                                  "/docs%2findex.html", "/docs%2Findex.html", "/docs/%2e%2fx"])
def test_dotfiles_and_encoded_slashes_are_404(site: tuple[Daemon, str], path: str) -> None:
    """`/.env` and `/.git/config` answered 200, and `%2f` was decoded and served."""
    _, base = site
    status, _, body = curl("--path-as-is", base + path)
    assert status == 404 and body == b""


def test_dotfiles_allow_serves_them_and_nothing_else_changes(
        tmp_path: Path, run_daemon: Callable[..., Daemon], port: int) -> None:
    config = write_site(tmp_path, files_options="      dotfiles: allow\n")
    run_daemon(config, env={"HTTP_PORT": str(port)}, wait_ports=[port])
    base = f"http://localhost:{port}"
    assert curl(base + "/.env")[0] == 200
    assert curl(base + "/docs/.secret")[2] == b"hidden\n"
    for path in ("/docs%2findex.html", "/%2e%2e/secret.txt", "/../secret.txt"):
        assert curl("--path-as-is", base + path)[0] == 404, path


def test_filesystem_symlinks_follow(tmp_path: Path, run_daemon: Any, port: int) -> None:
    config = write_site(tmp_path)
    config.write_text(config.read_text().replace("      location: www\n",
                                                 "      location: www\n      symlinks: follow\n"))
    run_daemon(config, env={"HTTP_PORT": str(port)}, wait_ports=[port])
    status, _, body = curl(f"http://127.0.0.1:{port}/link-out.txt")
    assert (status, body) == (200, b"outside\n")

