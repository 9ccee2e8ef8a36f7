"""A minimal SSE client over a raw socket, for reading streams event by event with timeouts."""

from __future__ import annotations

import socket
import time
import zlib
from dataclasses import dataclass
from typing import Self


@dataclass
class Event:
    id: str | None
    event: str | None
    data: str | None
    received: float = 0.0


class SseClient:
    """A minimal text/event-stream reader over a raw socket (HTTP/1.1, chunked or not).

    Raw, because http.client's socket file refuses to read again after one timeout, and
    these tests wait with timeouts all the time.
    """

    def __init__(self, port: int, path: str, headers: dict[str, str] | None = None,
                 timeout: float = 10.0, source: str | None = None,
                 preamble: bytes = b"") -> None:
        """`source`: the local address to connect from; `preamble`: bytes sent before the
        request (a PROXY protocol header)."""
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout,
                                             source_address=(source, 0) if source else None)
        lines = [f"GET {path} HTTP/1.1", f"Host: 127.0.0.1:{port}",
                 "Accept: text/event-stream"]
        lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
        self.sock.sendall(preamble + ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        self._raw = b""  # bytes from the socket not yet de-chunked
        self._body = b""  # de-chunked body not yet parsed into lines
        self.comments = 0
        #: the text of each comment line, in order
        self.comment_lines: list[str] = []
        self.retry: int | None = None
        self.ended = False
        deadline = time.monotonic() + timeout
        while b"\r\n\r\n" not in self._raw:
            if not self._recv(deadline):
                raise AssertionError(f"no response headers: {self._raw!r}")
        head, _, self._raw = self._raw.partition(b"\r\n\r\n")
        status_line, *header_lines = head.decode("latin-1").split("\r\n")
        self.status = int(status_line.split()[1])
        self.headers = {}
        for h in header_lines:
            name, _, value = h.partition(":")
            self.headers[name.strip()] = value.strip()
        # header names are case-insensitive (uvicorn sends them in lower case)
        self.chunked = any(k.lower() == "transfer-encoding" and v.lower() == "chunked"
                           for k, v in self.headers.items())
        #: Body bytes still to come of a response with a Content-Length (its end is the end
        #: of the stream even on a connection kept alive, as for a browser).
        self._left: int | None = next((int(v) for k, v in self.headers.items()
                                       if k.lower() == "content-length"), None)
        #: A gzip body (`Content-Encoding: gzip`) is decoded as it comes; `body_bytes` counts
        #: the body as sent (compressed or not).
        self.gzip = any(k.lower() == "content-encoding" and v.lower() == "gzip"
                        for k, v in self.headers.items())
        self._gunzip = zlib.decompressobj(16 + zlib.MAX_WBITS) if self.gzip else None
        self.body_bytes = 0

    def _take(self, body: bytes) -> None:
        """Body bytes as sent: decoded into `_body`."""
        self.body_bytes += len(body)
        self._body += body if self._gunzip is None else self._gunzip.decompress(body)

    def _recv(self, deadline: float) -> bool:
        """Read more from the socket; False on timeout or end of stream."""
        left = deadline - time.monotonic()
        if left <= 0 or self.ended:
            return False
        self.sock.settimeout(left)
        try:
            data = self.sock.recv(65536)
        except TimeoutError:
            return False
        except OSError:
            data = b""
        if not data:
            self.ended = True
            return False
        self._raw += data
        return True

    def _dechunk(self) -> None:
        if not self.chunked:
            if self._left is not None:
                taken, self._raw = self._raw[:self._left], self._raw[self._left:]
                self._take(taken)
                self._left -= len(taken)
                if self._left == 0:
                    self.ended = True
                return
            self._take(self._raw)
            self._raw = b""
            return
        while True:
            size_line, sep, rest = self._raw.partition(b"\r\n")
            if not sep:
                return
            size = int(size_line.split(b";")[0], 16)
            if len(rest) < size + 2:
                return
            if size == 0:
                self.ended = True
                self._raw = b""
                return
            self._take(rest[:size])
            self._raw = rest[size + 2:]

    def _line(self, deadline: float) -> bytes | None:
        while True:
            self._dechunk()
            line, sep, rest = self._body.partition(b"\n")
            if sep:
                self._body = rest
                return line
            if self.ended or not self._recv(deadline):
                return None

    def next_event(self, timeout: float = 10.0) -> Event | None:
        """The next event, or None when the stream ended or `timeout` passed with none."""
        deadline = time.monotonic() + timeout
        fields: dict[str, str] = {}
        data: list[str] = []
        pending = b""
        while True:
            raw = self._line(deadline)
            if raw is None:
                # keep a half-read event for the next call
                if fields or data:
                    self._body = pending + self._body
                return None
            pending += raw + b"\n"
            line = raw.decode("utf-8")
            if line == "":
                pending = b""
                if fields or data:
                    return Event(fields.get("id"), fields.get("event"),
                                 "\n".join(data) if data else None, time.monotonic())
                continue
            if line.startswith(":"):
                self.comments += 1
                self.comment_lines.append(line[1:].strip())
                continue
            name, _, value = line.partition(":")
            if name == "data":
                data.append(value)
            elif name == "retry":
                self.retry = int(value)
            else:
                fields[name] = value

    def events(self, n: int, timeout: float = 10.0) -> list[Event]:
        """Exactly `n` events, or fail naming how many arrived."""
        out: list[Event] = []
        deadline = time.monotonic() + timeout
        while len(out) < n:
            e = self.next_event(max(0.0, deadline - time.monotonic()))
            if e is None:
                raise AssertionError(f"got {len(out)} of {n} events: {out[-3:]}")
            out.append(e)
        return out

    def until(self, markers: list[str], timeout: float = 10.0) -> list[Event]:
        """The events before every one of `markers` (event data, see `Kafka.mark`) has arrived,
        markers left out; fail if they do not all arrive within `timeout`."""
        out: list[Event] = []
        waiting = set(markers)
        deadline = time.monotonic() + timeout
        while waiting:
            e = self.next_event(max(0.0, deadline - time.monotonic()))
            if e is None:
                raise AssertionError(f"markers {sorted(waiting)} did not arrive; got {out[-3:]}")
            if e.data in waiting:
                waiting.discard(e.data)
            else:
                out.append(e)
        return out

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
