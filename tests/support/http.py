"""HTTP clients for the tests: curl (what users type) and raw bytes on a socket (what hostile
clients send)."""

from __future__ import annotations

import socket
import subprocess
import time


def curl(*args: str) -> tuple[int, dict[str, str], bytes]:
    """Run curl; return status, lower-cased headers and body."""
    out = subprocess.run(["curl", "-s", "-i", "--max-time", "10", *args],
                         capture_output=True, timeout=20, check=True).stdout
    head, _, body = out.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return status, headers, body


def raw(port: int, data: bytes, wait: float = 3.0) -> bytes:
    """Send raw bytes; return all the server sends until it closes the connection, which it
    must do within `wait` seconds (a bad request is answered and the connection closed)."""
    with socket.create_connection(("127.0.0.1", port), timeout=wait) as s:
        s.sendall(data)
        chunks = []
        deadline = time.monotonic() + wait
        while True:
            s.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                chunk = s.recv(65536)
            except ConnectionResetError:
                chunk = b""
            except TimeoutError:
                raise AssertionError(f"still open after {wait} s; got {b''.join(chunks)!r}") \
                    from None
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
