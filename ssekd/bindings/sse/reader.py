"""Reading an upstream's text/event-stream, bounded: the sse client's parser.

The upstream is not trusted to be well-behaved. A line is held only until it ends, and one longer
than `max_line` bytes, an event larger than `max_event` bytes, or bytes that are not UTF-8 end the
read with `UpstreamError` instead of growing memory or passing on text a browser would mangle.

Nor is it trusted to send its bytes in sensible pieces. A line that is not finished yet is kept
in a growing buffer with its length, and each read scans only the bytes it brings for a line end:
the work of a read is proportional to its own size, never to the size of the line it continues
(otherwise a long unfinished line followed by a byte at a time costs a rescan of the whole line
per byte). `work` counts the bytes scanned and copied, for the tests that bound it.

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
        #: The line being read, until its end arrives (amortized O(1) appends per byte).
        self._partial = bytearray()
        #: Bytes scanned and copied so far: stays within a small multiple of the bytes fed.
        self.work = 0
        self._skip_lf = False  # the last chunk ended in CR: a LF starting the next one goes with it
        self._first = True
        self._lines: list[bytes] = []
        self._size = 0
        self._id: str | None = None

    def feed(self, data: bytes) -> list[Event | Retry]:
        """What `data` completes, in order. Raises `UpstreamError` (and must not be fed again)."""
        # a LF that completes the CR ending the last read is no line end of its own
        start = 1 if self._skip_lf and data[:1] == b"\n" else 0
        self._skip_lf = False
        out: list[Event | Retry] = []
        partial = self._partial
        self.work += len(data)  # the scan for line ends below sees each byte of `data` once
        for m in _EOL.finditer(data, start):
            if partial:
                if len(partial) + m.start() - start > self.max_line:
                    raise UpstreamError(f"a line longer than {self.max_line} bytes")
                partial += memoryview(data)[start:m.start()]
                line = bytes(partial)
                self.work += len(line)  # copied out of the buffer
                partial.clear()
            else:
                line = data[start:m.start()]
            self._line(line, out)
            start = m.end()
        if start < len(data):
            if len(partial) + len(data) - start > self.max_line:
                raise UpstreamError(f"a line longer than {self.max_line} bytes")
            partial += memoryview(data)[start:]
            self.work += len(data) - start  # copied into the buffer
        self._skip_lf = data.endswith(b"\r")
        return out

    def _line(self, line: bytes, out: list[Event | Retry]) -> None:
        if len(line) > self.max_line:
            raise UpstreamError(f"a line longer than {self.max_line} bytes")
        self.work += len(line)  # the UTF-8 check and the field split each see the line once
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
