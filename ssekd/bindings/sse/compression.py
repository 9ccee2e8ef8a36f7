"""gzip on event streams (an ssekd addition, off by default: the sse server's `compression`).

A stream's bytes are mostly JSON that repeats itself from event to event (the same field names,
ids that differ in a few digits), so gzip takes most of them off the wire - what matters to a
phone on a metered link, or to a fan-out whose network is the limit. But an event stream is
never finished: what a browser has not received it cannot show, so every write (one batch of
events, a keepalive) is compressed and *flushed* at once (`Z_SYNC_FLUSH`: the deflate stream is
brought to a byte boundary, and the client can decode everything sent so far). Each flush costs
a few bytes, so a batch of one small event saves less than a batch of many.

Each stream has its own compressor: its window (the history back-references reach into) is what
this client has received. Its memory is stated by zlib's own formula, `2^(window-bits + 2) +
2^(memory-level + 9)` bytes plus about 6 KiB of state (`memory_per_stream`); the defaults, a 1 KiB
window and the smallest hash table, keep it near 11 KiB a stream, 11 MB at 1,000 streams, where
zlib's defaults would take 256 KiB a stream. A small window finds fewer repeats than zlib's 32
KiB one; `bench/compression.py` measures what each setting saves against what it costs.

Only where the client asks for it (`Accept-Encoding` naming gzip with a weight above 0, RFC
9110 §12.5.3), and never for a route whose records are already compressed (sse-kafka's
`with.compress: false`): gzip on compressed bytes costs CPU and memory and saves nothing.
Brotli is left out: no library the project keeps does it.

A shared window is also a length oracle (CRIME, BREACH): an event whose bytes someone else
controls, sent after an event that holds a secret, compresses smaller when it repeats the
secret, and whoever sees the stream's sizes (on the network path, or the writer reading its own
stream) can guess the secret a few characters at a time. So `context` says what an event may
refer back to: `stream` (the default) is the whole history in the window; `event` compresses
each event of a write (each block that ends with a blank line) with no memory of the ones
before: a `Z_FULL_FLUSH` after each clears zlib's hash table, so its matches start over and the
bytes an event costs depend on that event alone. It stays one gzip member a browser decodes as
it comes, and costs most of what the shared history saved (`bench/compression.py`). What it
cannot help is a secret and someone else's bytes inside one event.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass
from typing import Literal

#: zlib's deflate state besides its window and hash table (deflate_state, its pending buffer and
#: the Python object, as tracemalloc measures them on CPython 3.11: `bench/compression.py`).
_STATE_BYTES = 6_200

_CODING = re.compile(r"\s*([A-Za-z0-9!#$%&'*+.^_`|~-]+)\s*(?:;(.*))?$")
_WEIGHT = re.compile(r"\s*q\s*=\s*([0-9.]+)\s*$", re.IGNORECASE)

#: What an event's compression may refer back to: the stream's history, or nothing before it.
Context = Literal["stream", "event"]
CONTEXTS: tuple[Context, ...] = ("stream", "event")
#: What ends an event (and a comment, a `retry:`) on ssekd's wire: a field never holds a newline.
_END = b"\n\n"


@dataclass(frozen=True)
class Compression:
    """The sse server's `compression` option: how hard to compress, and in how much memory."""

    #: 1 (fastest) to 9 (smallest).
    level: int = 6
    #: The window is 2^window-bits bytes of history (9 to 15).
    window_bits: int = 10
    #: The hash table is 2^(memory-level + 7) entries (1 to 9).
    memory_level: int = 1
    #: `stream`: events refer back to earlier ones (smaller); `event`: each is compressed alone,
    #: so one writer's event cannot be sized against another's secret (see the module's doc).
    context: Context = "stream"

    def memory_per_stream(self) -> int:
        """Bytes a stream's compressor holds (zlib's formula for deflate, plus its state)."""
        return (1 << (self.window_bits + 2)) + (1 << (self.memory_level + 9)) + _STATE_BYTES

    def writer(self) -> GzipWriter:
        return GzipWriter(self)


def accepts_gzip(header: bytes | str | None) -> bool:
    """Whether an `Accept-Encoding` value lets the response be gzip: `gzip` (or `x-gzip`, or
    `*` when gzip is not named) with a weight above 0. No header, or one that does not parse,
    is no."""
    if header is None:
        return False
    text = header.decode("latin-1") if isinstance(header, bytes) else header
    named: float | None = None
    anything: float | None = None
    for item in text.split(","):
        if not item.strip():
            continue
        m = _CODING.match(item)
        if m is None:
            return False
        weight = 1.0
        if m[2] is not None:
            params = [p for p in m[2].split(";") if p.strip()]
            w = _WEIGHT.match(params[0]) if len(params) == 1 else None
            if w is None:
                return False
            try:
                weight = float(w[1])
            except ValueError:
                return False
        coding = m[1].lower()
        if coding in ("gzip", "x-gzip"):
            named = weight if named is None else max(named, weight)
        elif coding == "*":
            anything = weight
    if named is not None:
        return named > 0
    return anything is not None and anything > 0


class GzipWriter:
    """One stream's gzip member: each write compressed and flushed, so the client can decode
    everything it was sent; `finish` adds the trailer (CRC and length) when the stream ends.
    With `context: event`, each event of a write is compressed and fully flushed on its own."""

    __slots__ = ("_deflate", "_per_event", "plain", "sent")

    def __init__(self, settings: Compression) -> None:
        self._deflate = zlib.compressobj(settings.level, zlib.DEFLATED,
                                         16 + settings.window_bits, settings.memory_level)
        self._per_event = settings.context == "event"
        #: Bytes given to the compressor, and bytes it made (the header included).
        self.plain = 0
        self.sent = 0

    def write(self, data: bytes) -> bytes:
        """`data` compressed and flushed (never empty: the first call carries the header)."""
        d = self._deflate
        if self._per_event:
            out = self._each_event(data)
        else:
            out = d.compress(data) + d.flush(zlib.Z_SYNC_FLUSH)
        self.plain += len(data)
        self.sent += len(out)
        return out

    def _each_event(self, data: bytes) -> bytes:
        """Each event of `data` compressed, then a full flush: zlib forgets its history (the
        hash table that finds matches), so the next event's bytes cannot refer back to it.
        A write that does not end with a blank line has its tail flushed the same way."""
        d = self._deflate
        full = zlib.Z_FULL_FLUSH
        view = memoryview(data)
        parts = []
        start = 0
        end = data.find(_END)
        while end >= 0:
            end += 2
            parts.append(d.compress(view[start:end]))
            parts.append(d.flush(full))
            start = end
            end = data.find(_END, start)
        if start < len(data) or not parts:  # a tail, or nothing (the header still goes)
            parts.append(d.compress(view[start:]))
            parts.append(d.flush(full))
        return b"".join(parts)

    def finish(self) -> bytes:
        """The end of the member: the client can check the whole stream arrived."""
        out = self._deflate.flush(zlib.Z_FINISH)
        self.sent += len(out)
        return out
