"""A stand-in for Zilla's `extras-sse-server` image, the upstream of its sse.proxy.jwt and
asyncapi.sse.proxy examples: an event stream on one port (`GET` any path: `text/event-stream`,
held open), and a TCP port where each line written is a JSON object sent to every open stream
as one event. The examples' test.sh write `{ "data": "Hello, world" }` (sse.proxy.jwt) and
`{ "name": "event name", "data": { "id": 1, ... } }` (asyncapi.sse.proxy, whose expected output
is `data:{"id":1,"name":"Hello World!"}`): `name` (or `event`) is the event's type, `id` its id,
and `data` its data - a string as it is, anything else as compact JSON.

Each stream request's path and headers are kept (`requests`), so a test can see what the relay
asked for (its path, its `Last-Event-ID`); `end_streams` ends the open streams (the upstream
going away) while the ports stay open. Threads and sockets of the standard library only."""

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
        #: (path, headers by lower-case name) of each stream request, in order
        self.requests: list[tuple[str, dict[str, str]]] = []
        stand_in = self

        class Stream(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
                with stand_in._lock:
                    stand_in.requests.append(
                        (self.path, {k.lower(): v for k, v in self.headers.items()}))
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
        lines = [f"id:{event['id']}"] if "id" in event else []
        kind = event.get("event", event.get("name"))
        if kind is not None:
            lines.append(f"event:{kind}")
        data = event.get("data", "")
        text = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
        lines += [f"data:{part}" for part in text.split("\n")]
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

    def end_streams(self) -> None:
        """End every open stream (its connection closes); new ones are served as before."""
        with self._lock:
            for _, done in self._streams:
                done.set()
            self._streams.clear()

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
