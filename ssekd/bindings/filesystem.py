"""filesystem server (docs/config-reference.md): files under `location`, never outside it.

Paths arrive percent-encoded from the URL. They are split into segments, each decoded once, and
any `..`, empty-root (`//etc`), NUL, backslash or encoded-slash segment is refused before the
disk is touched, as is a segment starting with `.` (`.env`, `.git/config`) unless `dotfiles:
allow` (an ssekd addition); with `symlinks: ignore` every component is checked with `lstat`.
Files are sent by a pull producer (64 KiB at a time, only when the socket asks), so a 1 GiB file
never sits in memory.
"""

from __future__ import annotations

import email.utils
import mimetypes
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Protocol, runtime_checkable
from urllib.parse import unquote_to_bytes

from twisted.web import http
from twisted.web.server import NOT_DONE_YET, Request
from twisted.web.static import NoRangeStaticProducer, SingleRangeStaticProducer

from ssekd.config.model import Binding
from ssekd.spi.binding import BindingType, BuildContext, KindSpec


@runtime_checkable
class FileServing(Protocol):
    """The role a filesystem server plays: serves a path below its root (http-filesystem's
    exit)."""

    def serve(self, request: Request, path: str) -> bytes | int: ...

INDEX = "index.html"
FOLDER = "folder"

_TYPES = {
    ".html": "text/html; charset=utf-8", ".htm": "text/html; charset=utf-8",
    ".css": "text/css; charset=utf-8", ".js": "text/javascript; charset=utf-8",
    ".mjs": "text/javascript; charset=utf-8", ".json": "application/json",
    ".txt": "text/plain; charset=utf-8", ".svg": "image/svg+xml", ".wasm": "application/wasm",
    ".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".gif": "image/gif",
    ".webp": "image/webp", ".ico": "image/x-icon", ".woff2": "font/woff2", ".map":
    "application/json", ".xml": "application/xml", ".pdf": "application/pdf",
}


def content_type(name: str) -> str:
    suffix = os.path.splitext(name)[1].lower()
    if suffix in _TYPES:
        return _TYPES[suffix]
    guessed, _ = mimetypes.guess_type(name)
    return guessed or "application/octet-stream"


def safe_segments(path: str, dotfiles: bool = False) -> list[str] | None:
    """The path's segments, or None when it could lead outside the root or to a hidden file.

    `path` is the URL path below the root, still percent-encoded. It is split at its `/` first
    and each segment decoded exactly once, so `%2e%2e` is `..` (refused), `%252e` stays a
    literal `%2e` file name, and an encoded `/` (`%2f`) or `\\` can never join two segments
    into one path (refused). A segment starting with `.` (`.env`, `.git`) is refused unless
    `dotfiles` (the binding's `dotfiles: allow`).
    """
    if path.startswith("/"):
        return None  # `//etc/passwd`: an absolute path after the route's own `/`
    segments = []
    for raw in path.split("/"):
        try:
            segment = unquote_to_bytes(raw).decode("utf-8")
        except UnicodeDecodeError:
            return None
        if "\x00" in segment or "\\" in segment or "/" in segment:
            return None
        if segment in ("..", ".") or (segment.startswith(".") and not dotfiles):
            return None
        segments.append(segment)
    return segments


@dataclass(frozen=True)
class Found:
    path: Path
    info: os.stat_result


class FileServer:
    """Runtime of a filesystem server: looks files up safely and serves them."""

    def __init__(self, name: str, location: Path, follow_symlinks: bool,
                 dotfiles: bool = False) -> None:
        self.name = name
        self.location = location
        self.follow_symlinks = follow_symlinks
        #: Whether names starting with `.` are served (`dotfiles: allow`).
        self.dotfiles = dotfiles

    def find(self, path: str) -> Found | str | None:
        """The file for `path`; FOLDER for a folder named without its `/`; or None."""
        segments = safe_segments(path, self.dotfiles)
        if segments is None:
            return None
        current = self.location
        try:
            info = os.stat(current)
            for segment in segments:
                if not segment:
                    continue  # `a//b` or a trailing `/`
                if not stat.S_ISDIR(info.st_mode):
                    return None
                current = current / segment
                info = os.stat(current) if self.follow_symlinks else os.lstat(current)
                if stat.S_ISLNK(info.st_mode):
                    return None  # symlinks: ignore
            if stat.S_ISDIR(info.st_mode):
                if segments[-1] != "":
                    return FOLDER
                current = current / INDEX
                info = os.stat(current) if self.follow_symlinks else os.lstat(current)
        except (OSError, ValueError):
            return None
        if not stat.S_ISREG(info.st_mode):
            return None
        return Found(current, info)

    def serve(self, request: Request, path: str) -> bytes | int:
        """Answer GET/HEAD for `path` (relative to the root, percent-encoded)."""
        if request.method not in (b"GET", b"HEAD"):
            request.setResponseCode(http.NOT_ALLOWED)
            request.setHeader(b"allow", b"GET, HEAD")
            return b""
        found = self.find(path)
        if found is None:
            request.setResponseCode(http.NOT_FOUND)
            return b""
        if isinstance(found, str):
            # `/docs` is a folder: send the browser to `/docs/` so relative links resolve.
            request.setResponseCode(http.MOVED_PERMANENTLY)
            query = request.uri.partition(b"?")[2]
            request.setHeader(b"location", request.path + b"/" + (b"?" + query if query else b""))
            return b""
        info = found.info
        etag = f'"{info.st_size:x}-{info.st_mtime_ns:x}"'.encode()
        request.setHeader(b"etag", etag)
        request.setHeader(b"last-modified", http.datetimeToString(int(info.st_mtime)))
        request.setHeader(b"accept-ranges", b"bytes")
        if _not_modified(request, etag, info.st_mtime):
            request.setResponseCode(http.NOT_MODIFIED)
            return b""
        request.setHeader(b"content-type", content_type(found.path.name).encode())
        try:
            file: IO[bytes] = open(found.path, "rb")
        except OSError:
            request.setResponseCode(http.NOT_FOUND)
            return b""
        span = _single_range(request.getHeader(b"range"), info.st_size)
        if isinstance(span, str):  # "unsatisfiable"
            file.close()
            request.setResponseCode(http.REQUESTED_RANGE_NOT_SATISFIABLE)
            request.setHeader(b"content-range", f"bytes */{info.st_size}".encode())
            return b""
        if span is not None:
            start, length = span
            request.setResponseCode(http.PARTIAL_CONTENT)
            request.setHeader(b"content-range",
                              f"bytes {start}-{start + length - 1}/{info.st_size}".encode())
            request.setHeader(b"content-length", str(length).encode())
            if request.method == b"HEAD":
                file.close()
                return b""
            SingleRangeStaticProducer(request, file, start, length).start()
            return NOT_DONE_YET
        request.setHeader(b"content-length", str(info.st_size).encode())
        if request.method == b"HEAD":
            file.close()
            return b""
        NoRangeStaticProducer(request, file).start()
        return NOT_DONE_YET


def _not_modified(request: Request, etag: bytes, mtime: float) -> bool:
    if_none_match = request.getHeader(b"if-none-match")
    if if_none_match is not None:
        tags = [t.strip().removeprefix(b"W/") for t in if_none_match.split(b",")]
        return b"*" in tags or etag in tags
    since = request.getHeader(b"if-modified-since")
    if since is not None:
        try:
            parsed = email.utils.parsedate_to_datetime(since.decode("latin-1"))
            return int(mtime) <= int(parsed.timestamp())
        except (TypeError, ValueError, IndexError):
            return False
    return False


def _single_range(header: bytes | None, size: int) -> tuple[int, int] | str | None:
    """(start, length) for one `bytes=a-b` range; None to send the whole file."""
    if header is None or not header.startswith(b"bytes=") or b"," in header:
        return None
    first, _, last = header[6:].strip().partition(b"-")
    try:
        if first:
            start = int(first)
            end = int(last) if last else size - 1
        else:
            suffix = int(last)
            if suffix == 0:
                return "unsatisfiable"
            start, end = max(size - suffix, 0), size - 1
    except ValueError:
        return None
    if start >= size or start > end or start < 0:
        return "unsatisfiable"
    end = min(end, size - 1)
    return start, end - start + 1


def _build(ctx: BuildContext, binding: Binding) -> FileServer:
    location = ctx.config.resolve_path(str(binding.options.get("location", ".")))
    if not location.is_dir():
        # The seed's example names /var/www/, which need not exist where the config is checked:
        # say so, serve 404s, and start.
        ctx.events.emit(binding.name, "BINDING_FILESYSTEM_LOCATION_MISSING", str(location))
    follow = binding.options.get("symlinks", "ignore") == "follow"
    dotfiles = binding.options.get("dotfiles", "ignore") == "allow"
    return FileServer(binding.name, location, follow, dotfiles)


BINDING = BindingType("filesystem", {
    "server": KindSpec(
        role=FileServing, build=_build,
        options={"type": "object", "additionalProperties": False, "required": ["location"],
                 "description": "Serves `GET` and `HEAD` for files below `location`, with ETag, "
                                "Last-Modified, single byte ranges and `index.html` for folders; "
                                "nothing outside `location` is ever read.",
                 "properties": {
                     "location": {"type": "string", "minLength": 1,
                                  "description": "The root folder, relative to the config file's "
                                                 "folder unless absolute. A missing folder is an "
                                                 "event at start, and every request a `404`."},
                     "symlinks": {"enum": ["follow", "ignore"], "default": "ignore",
                                  "description": "`ignore` answers `404` for any path through a "
                                                 "symbolic link."},
                     "dotfiles": {"enum": ["allow", "ignore"], "default": "ignore",
                                  "x-ssekd-addition": True,
                                  "description": "`ignore` answers `404` for any path with a "
                                                 "segment starting with `.` (`/.env`, "
                                                 "`/.git/config`), whatever the folder holds; "
                                                 "`allow` serves them (e.g. a `.well-known` "
                                                 "folder)."}}},
    ),
})
