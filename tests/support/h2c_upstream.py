"""A cleartext upstream that accepts `Upgrade: h2c` (RFC 7540 3.2), which neither nginx nor
nghttpd does: the request that offers it is answered `101` and then on HTTP/2 stream 1, and
later requests on the connection are HTTP/2 streams. It serves the files of a folder (`GET`)
and answers anything else `405`, recording for each request its method, path, how it came
(`h2c-upgrade`, `h2`) and the connection it came on - for the http client's upgrade path.

Built on the `h2` package's server side, in threads of the test process.
"""

from __future__ import annotations

import socket
import threading
from dataclasses import dataclass, field
from pathlib import Path

import h2.config
import h2.connection
import h2.events


@dataclass
class H2cUpstream:
    root: Path
    #: (method, path, how, connection number) per request.
    seen: list[tuple[str, str, str, int]] = field(default_factory=list)
    port: int = 0

    def start(self) -> H2cUpstream:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def stop(self) -> None:
        self._listener.close()

    def _accept(self) -> None:
        number = 0
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            number += 1
            threading.Thread(target=self._serve, args=(conn, number), daemon=True).start()

    def _serve(self, sock: socket.socket, number: int) -> None:
        with sock:
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = sock.recv(65536)
                if not chunk:
                    return
                data += chunk
            head, rest = data.split(b"\r\n\r\n", 1)
            lines = head.split(b"\r\n")
            method, path, _ = lines[0].decode().split(" ", 2)
            headers = {k.strip().lower(): v.strip() for k, _, v in
                       (line.decode().partition(":") for line in lines[1:])}
            length = int(headers.get("content-length", "0"))
            while len(rest) < length:
                rest += sock.recv(65536)
            if headers.get("upgrade") != "h2c" or "http2-settings" not in headers:
                body = b"upgrade expected"
                sock.sendall(b"HTTP/1.1 400 Bad Request\r\ncontent-length: %d\r\n\r\n%s"
                             % (len(body), body))
                return
            sock.sendall(b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\n"
                         b"Upgrade: h2c\r\n\r\n")
            conn = h2.connection.H2Connection(h2.config.H2Configuration(
                client_side=False, header_encoding="utf-8"))
            conn.initiate_upgrade_connection(headers["http2-settings"].encode())
            self.seen.append((method, path, "h2c-upgrade", number))
            self._answer(conn, 1, method, path)
            sock.sendall(conn.data_to_send())
            streams: dict[int, tuple[str, str]] = {}
            while True:
                try:
                    data = sock.recv(65536)
                except OSError:
                    return
                if not data:
                    return
                for event in conn.receive_data(data):
                    if isinstance(event, h2.events.RequestReceived):
                        pseudo = dict(event.headers)
                        streams[event.stream_id] = (pseudo[":method"], pseudo[":path"])
                    elif isinstance(event, h2.events.DataReceived):
                        conn.acknowledge_received_data(event.flow_controlled_length,
                                                       event.stream_id)
                    elif isinstance(event, h2.events.StreamEnded):
                        method, path = streams.pop(event.stream_id)
                        self.seen.append((method, path, "h2", number))
                        self._answer(conn, event.stream_id, method, path)
                sock.sendall(conn.data_to_send())

    def _answer(self, conn: h2.connection.H2Connection, stream_id: int, method: str,
                path: str) -> None:
        file = self.root / path.lstrip("/").split("?")[0]
        if method != "GET":
            status, body = "405", b""
        elif file.is_file():
            status, body = "200", file.read_bytes()
        else:
            status, body = "404", b""
        conn.send_headers(stream_id, [(":status", status),
                                      ("content-length", str(len(body)))],
                          end_stream=not body)
        if body:  # small files only: one window
            conn.send_data(stream_id, body, end_stream=True)
