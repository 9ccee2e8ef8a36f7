"""An HTTP/1.1 upstream that answers each path with a script (a bad status, the wrong content
type, a line too long, bytes that are not UTF-8, silence, plain events), over cleartext or TLS,
recording what each request carried - for the sse client's tests on real sockets.

It runs in threads of the test process; each connection is served until its script is done or
the client goes away.
"""

from __future__ import annotations

import socket
import ssl
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    pkcs12,
)

from tests.support.head_server import serve_heads

SSE_HEAD = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Cache-Control: no-store\r\nConnection: close\r\n\r\n")

Script = Callable[[socket.socket], None]


@dataclass
class Seen:
    """One request as the upstream received it."""

    path: str
    headers: dict[str, str]
    alpn: str | None = None


def events_then_hold(body: bytes, hold: threading.Event) -> Script:
    """A 200 event stream sending `body`, then open (quiet) until `hold` is set."""
    def run(sock: socket.socket) -> None:
        sock.sendall(SSE_HEAD + body)
        hold.wait(30)
    return run


def answer(head: bytes, body: bytes = b"", hold: threading.Event | None = None) -> Script:
    """Send `head` and `body` as they are, then close (or keep open until `hold` is set)."""
    def run(sock: socket.socket) -> None:
        sock.sendall(head + body)
        if hold is not None:
            hold.wait(30)
    return run


@dataclass
class ScriptedUpstream:
    scripts: dict[str, Script]
    tls: ssl.SSLContext | None = None
    seen: list[Seen] = field(default_factory=list)
    port: int = 0

    def __post_init__(self) -> None:
        def handle(sock: socket.socket, head: bytes, alpn: str | None) -> None:
            lines = head.split(b"\r\n\r\n")[0].decode("latin-1").split("\r\n")
            path = lines[0].split(" ")[1]
            headers = {}
            for line in lines[1:]:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
            self.seen.append(Seen(path, headers, alpn))
            script = self.scripts.get(path.split("?")[0])
            if script is None:
                sock.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
            else:
                script(sock)

        self._server = serve_heads(handle, self.tls)
        self.port = self._server.server_address[1]

    def requests(self, path: str) -> list[Seen]:
        return [s for s in self.seen if s.path.split("?")[0] == path]

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def server_context(store: Path, password: str, folder: Path) -> ssl.SSLContext:
    """A TLS server context from a PKCS#12 store's key (the test PKI's `localhost`)."""
    key, cert, _ = pkcs12.load_key_and_certificates(store.read_bytes(), password.encode())
    assert key is not None and cert is not None
    pem = folder / "upstream.pem"
    pem.write_bytes(cert.public_bytes(Encoding.PEM) +
                    key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()))
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(pem)
    ctx.set_alpn_protocols(["http/1.1"])
    return ctx
