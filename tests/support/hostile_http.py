"""Small HTTP/1.1 servers that misbehave on purpose, for the fetches ssekd makes from URLs in its
config (JWKS, schema registry): one that drips its answer a byte at a time, one that redirects
wherever a test says, over cleartext or TLS. They run in threads of the test process and record
how much of their answer each client took before going away."""

from __future__ import annotations

import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from tests.support.head_server import serve_heads

#: How a connection is answered, once its request head is read: (socket, request line).
Answer = Callable[[socket.socket, str], None]


def drip(head: bytes, body: bytes, every: float, stop: threading.Event,
         sent: list[int]) -> Answer:
    """`head` at once, then `body` one byte every `every` seconds; `sent` counts the body bytes
    written before the client left (or `stop` was set)."""
    def run(sock: socket.socket, _: str) -> None:
        sock.sendall(head)
        count = 0
        try:
            for byte in body:
                if stop.wait(every):
                    break
                sock.sendall(bytes((byte,)))
                count += 1
        except OSError:
            pass  # the client gave up: what the test wants to see
        finally:
            sent.append(count)
    return run


def drip_head(head: bytes, every: float, stop: threading.Event, sent: list[int]) -> Answer:
    """The status line and headers themselves a byte every `every` seconds."""
    return drip(b"", head, every, stop, sent)


def redirect(location: str, code: int = 302) -> Answer:
    def run(sock: socket.socket, _: str) -> None:
        sock.sendall(f"HTTP/1.1 {code} Found\r\nLocation: {location}\r\n"
                     f"Content-Length: 0\r\nConnection: close\r\n\r\n".encode())
    return run


def document(body: bytes, content_type: str = "application/json") -> Answer:
    def run(sock: socket.socket, _: str) -> None:
        sock.sendall(f"HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\n"
                     f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
    return run


@dataclass
class HostileServer:
    """Answers every request with `answer`; `requests` are the request lines it read."""

    answer: Answer
    tls: ssl.SSLContext | None = None
    requests: list[str] = field(default_factory=list)
    port: int = 0

    def __post_init__(self) -> None:
        def handle(sock: socket.socket, head: bytes, _alpn: str | None) -> None:
            line = head.split(b"\r\n", 1)[0].decode("latin-1")
            self.requests.append(line)
            self.answer(sock, line)

        self._server = serve_heads(handle, self.tls)
        self.port = self._server.server_address[1]

    def url(self, path: str = "/jwks.json") -> str:
        scheme = "https" if self.tls is not None else "http"
        host = "localhost" if self.tls is not None else "127.0.0.1"
        return f"{scheme}://{host}:{self.port}{path}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def wait_for(values: list[int], timeout: float = 10.0) -> int:
    """The first value a drip reported (it reports once its client left or it was stopped)."""
    end = time.monotonic() + timeout
    while not values and time.monotonic() < end:
        time.sleep(0.01)
    assert values, "the server never noticed the client leave"
    return values[0]
