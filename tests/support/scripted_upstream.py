"""An HTTP/1.1 upstream that answers each path with a script (a bad status, the wrong content
type, a line too long, bytes that are not UTF-8, silence, plain events), over cleartext or TLS,
recording what each request carried - for the sse client's tests on real sockets.

It runs in threads of the test process; each connection is served until its script is done or
the client goes away.
"""

from __future__ import annotations

import socket
import socketserver
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
        upstream = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                sock: socket.socket = self.request
                sock.settimeout(30)
                alpn = None
                if upstream.tls is not None:
                    try:
                        sock = upstream.tls.wrap_socket(sock, server_side=True)
                    except (ssl.SSLError, OSError):
                        return  # the client refused our certificate: what a test may want
                    alpn = sock.selected_alpn_protocol()
                head = b""
                while b"\r\n\r\n" not in head:
                    chunk = sock.recv(4096)
                    if not chunk:
                        return
                    head += chunk
                lines = head.split(b"\r\n\r\n")[0].decode("latin-1").split("\r\n")
                path = lines[0].split(" ")[1]
                headers = {}
                for line in lines[1:]:
                    name, _, value = line.partition(":")
                    headers[name.strip().lower()] = value.strip()
                upstream.seen.append(Seen(path, headers, alpn))
                script = upstream.scripts.get(path.split("?")[0])
                try:
                    if script is None:
                        sock.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                    else:
                        script(sock)
                except OSError:
                    pass

        socketserver.ThreadingTCPServer.allow_reuse_address = True
        self._server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

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
