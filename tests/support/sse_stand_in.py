"""A stand-in for Zilla's `extras-sse-server` image, the upstream of its sse.proxy.jwt example:
an event stream on one port (`GET` any path: `text/event-stream`, held open), and a TCP port
where each line written is a JSON object (`{"data": ..., "event"?: ..., "id"?: ...}`) sent to
every open stream as one event. Threads and sockets of the standard library only."""

from __future__ import annotations

import json
import socket
import socketserver
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from ssekd.dev.broker import free_port


class SseStandIn:
    """`port`: the event stream; `input_port`: where events are written, a JSON line each."""

    def __init__(self) -> None:
        self.port = free_port()
        self.input_port = free_port()
        self._streams: list[Any] = []
        self._lock = threading.Lock()
        stand_in = self

        class Stream(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-store")
                self.end_headers()
                self.wfile.flush()
                done = threading.Event()
                with stand_in._lock:
                    stand_in._streams.append((self.wfile, done))
                done.wait()

            def log_message(self, *args: Any) -> None:
                pass

        class Input(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                for line in self.rfile:
                    if line.strip():
                        stand_in.send(json.loads(line))

        self._http = ThreadingHTTPServer(("127.0.0.1", self.port), Stream)
        self._input = socketserver.ThreadingTCPServer(("127.0.0.1", self.input_port), Input)
        self._http.daemon_threads = self._input.daemon_threads = True
        for server in (self._http, self._input):
            threading.Thread(target=server.serve_forever, daemon=True).start()

    def send(self, event: dict[str, Any]) -> None:
        lines = [f"{field}:{event[field]}" for field in ("id", "event") if field in event]
        lines += [f"data:{part}" for part in str(event.get("data", "")).split("\n")]
        wire = ("\n".join(lines) + "\n\n").encode("utf-8")
        with self._lock:
            for out, done in list(self._streams):
                try:
                    out.write(wire)
                    out.flush()
                except OSError:
                    done.set()
                    self._streams.remove((out, done))

    def write_input(self, line: bytes) -> None:
        """What `echo '<json>' | nc localhost <input port>` does."""
        with socket.create_connection(("127.0.0.1", self.input_port), timeout=5) as sock:
            sock.sendall(line)

    def streams(self) -> int:
        with self._lock:
            return len(self._streams)

    def close(self) -> None:
        with self._lock:
            for _, done in self._streams:
                done.set()
        self._http.shutdown()
        self._input.shutdown()
        self._http.server_close()
        self._input.server_close()
