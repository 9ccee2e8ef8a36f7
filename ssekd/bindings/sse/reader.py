"""Reading an upstream's text/event-stream, bounded: the sse client's parser.

The upstream is not trusted to be well-behaved. A line is held only until it ends, and one longer
than `max_line` bytes, an event larger than `max_event` bytes, or bytes that are not UTF-8 end the
read with `UpstreamError` instead of growing memory or passing on text a browser would mangle.

Fields are kept as the upstream sent their values: `id`, `event` and `data` lines are written
again in the order they came, as `name:value` (Zilla's form, no space after the colon), so a
browser sees the same values; `retry` is handed on separately (the relay sends it to every
stream, and to streams that join later); comments (keepalives) and unknown fields are dropped, as
a browser would ignore them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: Longest line accepted from an upstream (the issue's bound): 1 MiB.
MAX_LINE = 1024 * 1024
#: Largest event (all its lines) accepted from an upstream.
MAX_EVENT = 4 * MAX_LINE

_EOL = re.compile(rb"\r\n|\r|\n")
_BOM = b"\xef\xbb\xbf"
_FIELDS = frozenset((b"id", b"event", b"data"))


class UpstreamError(Exception):
    """The upstream sent something the relay will not pass on; the message says what."""


@dataclass(frozen=True)
class Event:
    """One event as the relay sends it on: its `id` field (None when it had none) and its bytes
    (field lines and the blank line that ends it)."""

    id: str | None
    data: bytes


@dataclass(frozen=True)
class Retry:
    """A `retry:` field: milliseconds a client waits before reconnecting."""

    ms: int


class EventReader:
    """Turns the bytes of one upstream response into `Event`s and `Retry`s."""

    def __init__(self, max_line: int = MAX_LINE, max_event: int = MAX_EVENT) -> None:
        self.max_line = max_line
        self.max_event = max_event
        self._partial = b""
        self._skip_lf = False  # the last chunk ended in CR: a LF starting the next one goes with it
        self._first = True
        self._lines: list[bytes] = []
        self._size = 0
        self._id: str | None = None

    def feed(self, data: bytes) -> list[Event | Retry]:
        """What `data` completes, in order. Raises `UpstreamError` (and must not be fed again)."""
        if self._skip_lf and data[:1] == b"\n":
            data = data[1:]
        self._skip_lf = False
        buf = self._partial + data if self._partial else data
        out: list[Event | Retry] = []
        start = 0
        for m in _EOL.finditer(buf):
            self._line(buf[start:m.start()], out)
            start = m.end()
        self._partial = buf[start:]
        self._skip_lf = buf.endswith(b"\r")
        if len(self._partial) > self.max_line:
            raise UpstreamError(f"a line longer than {self.max_line} bytes")
        return out

    def _line(self, line: bytes, out: list[Event | Retry]) -> None:
        if len(line) > self.max_line:
            raise UpstreamError(f"a line longer than {self.max_line} bytes")
        if self._first:
            self._first = False
            if line.startswith(_BOM):
                line = line[len(_BOM):]
        try:
            line.decode("utf-8")
        except UnicodeDecodeError as e:
            raise UpstreamError(f"bytes that are not UTF-8 ({e.reason} at {e.start})") from e
        if not line:
            if self._lines:
                out.append(Event(self._id, b"".join(self._lines) + b"\n"))
            self._lines, self._size, self._id = [], 0, None
            return
        if line[0] == 0x3A:  # ":" a comment
            return
        name, colon, value = line.partition(b":")
        if colon and value[:1] == b" ":
            value = value[1:]
        if name == b"retry":
            if value.isdigit():
                out.append(Retry(int(value)))
            return
        if name not in _FIELDS:
            return
        if name == b"id":
            if b"\0" in value:  # a browser ignores such an id; so does the relay
                return
            self._id = value.decode("utf-8")
        self._size += len(line)
        if self._size > self.max_event:
            raise UpstreamError(f"an event larger than {self.max_event} bytes")
        self._lines.append(name + b":" + value + b"\n")
