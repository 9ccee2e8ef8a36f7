"""Clients that ask for streams and never read: the slow-client tests' and benchmark's load."""

from __future__ import annotations

import socket

import h2.config
import h2.connection
import h2.settings


def silent_h1(port: int, path: str) -> socket.socket:
    """A connection with a tiny receive buffer that asks for a stream and never reads."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
    sock.connect(("127.0.0.1", port))
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    return sock


def silent_h2(port: int, path: str, streams: int
              ) -> tuple[socket.socket, h2.connection.H2Connection]:
    """An HTTP/2 connection (prior knowledge) whose SETTINGS give every stream a zero window,
    opening `streams` streams; it never reads, so no window is ever opened. With its h2 state,
    to parse what the server sent when a test does read."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
    sock.connect(("127.0.0.1", port))
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    conn.local_settings = h2.settings.Settings(
        client=True, initial_values={h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 0,
                                     h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: 1000})
    conn.initiate_connection()
    for _ in range(streams):
        conn.send_headers(conn.get_next_available_stream_id(),
                          [(":method", "GET"), (":scheme", "http"), (":authority", "x"),
                           (":path", path)], end_stream=True)
    sock.sendall(conn.data_to_send())
    return sock, conn
