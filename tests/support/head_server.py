"""A loopback server for tests that play the far side of an HTTP/1.1 connection by hand (a
hostile key server, a scripted SSE upstream): the socket plumbing they share, so each says only
what it answers."""

from __future__ import annotations

import socket
import socketserver
import ssl
import threading
from collections.abc import Callable

#: Called per connection with the socket (TLS-wrapped with `tls`), the request head as read (up
#: to and including the blank line, maybe more) and the ALPN protocol chosen (None in clear).
HeadHandler = Callable[[socket.socket, bytes, str | None], None]


def serve_heads(handle: HeadHandler, tls: ssl.SSLContext | None = None
                ) -> socketserver.ThreadingTCPServer:
    """Serve on a free loopback port (`server_address[1]`), one thread per connection, until
    `shutdown()`. A failed handshake, a client that leaves before its head is complete, or an
    `OSError` while `handle` writes ends that connection quietly: the tests want to see what
    the daemon does about such peers, not tracebacks from the fake one."""

    class Handler(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            sock: socket.socket = self.request
            sock.settimeout(30)
            alpn = None
            if tls is not None:
                try:
                    sock = tls.wrap_socket(sock, server_side=True)
                except (ssl.SSLError, OSError):
                    return  # the client refused our certificate: what a test may want
                alpn = sock.selected_alpn_protocol()
            head = b""
            while b"\r\n\r\n" not in head:
                try:
                    chunk = sock.recv(4096)
                except OSError:
                    return
                if not chunk:
                    return
                head += chunk
            try:
                handle(sock, head, alpn)
            except OSError:
                pass

    socketserver.ThreadingTCPServer.allow_reuse_address = True
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server
