"""Where HTTP/2 header blocks start and end in the bytes a client sends.

`h2` gathers a header block (a HEADERS frame and the CONTINUATION frames up to END_HEADERS)
silently and says nothing until it is complete, so a client that never completes one, or sends
its HEADERS frame a byte at a time, looks to the connection like any other client that is not
idle. `HeaderBlockWatch` reads only the 9-byte frame headers of the received bytes (it skips
payloads) to tell when a block is under way; `LimitedH2Connection` gives that a deadline.

The same frame headers tell two more things `h2` keeps to itself: how many bytes the block under
way has announced so far (`h2` buffers up to 64 CONTINUATION frames, 1 MiB, before it objects),
and how many frames arrived that the server must answer (SETTINGS and PING without ACK: a client
can send thousands and let the answers pile up), so the connection can bound both; and where in
the bytes each header block starts, so the connection can hand `h2` one new stream at a time
(`h2` counts its open streams by walking all of them for each new one: a read of 1,000 HEADERS
cost half a million steps).
"""

from __future__ import annotations

#: HEADERS, PUSH_PROMISE and CONTINUATION: the frames that carry header blocks (RFC 9113 §6).
_HEADER_BLOCK_FRAMES = frozenset({0x1, 0x5, 0x9})
_CONTINUATION = 0x9
_END_HEADERS = 0x4
#: SETTINGS and PING: each one without the ACK flag makes the receiver send an ACK.
_ANSWERED_FRAMES = frozenset({0x4, 0x6})
_ACK = 0x1
_FRAME_HEADER = 9
#: `PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n`, the client's first bytes (h2c.PREFACE; RFC 9113 §3.4).
_PREFACE_LENGTH = 24


class HeaderBlockWatch:
    """Follows frame boundaries of a server connection's input; `pending` is True while a
    header block is incomplete: a block without END_HEADERS yet, or a header-block frame whose
    payload has not all arrived."""

    def __init__(self) -> None:
        self._skip = _PREFACE_LENGTH  # a client starts with the preface, then frames
        self._head = b""  # the part of a frame header received so far
        self._block_open = False
        self._in_block_frame = False  # the payload being skipped belongs to a header block
        #: Payload bytes announced by the frames of the latest header block (HEADERS or
        #: PUSH_PROMISE and the CONTINUATION frames after it), counted at each frame header.
        self.block_bytes = 0
        #: SETTINGS and PING frames without ACK seen so far.
        self.answered = 0

    @property
    def pending(self) -> bool:
        return self._block_open or (self._in_block_frame and self._skip > 0)

    def feed(self, data: bytes) -> list[int]:
        """Follow `data`; the offsets in it where a header block (HEADERS or PUSH_PROMISE)
        starts, but 0 (a frame that starts there, or before, needs no cut)."""
        starts: list[int] = []
        pos, end = 0, len(data)
        while pos < end:
            if self._skip:
                step = min(self._skip, end - pos)
                self._skip -= step
                pos += step
                continue
            begun = pos - len(self._head)
            take = _FRAME_HEADER - len(self._head)
            self._head += data[pos:pos + take]
            pos += take
            if len(self._head) < _FRAME_HEADER:
                return starts
            head, self._head = self._head, b""
            length, kind, flags = int.from_bytes(head[:3], "big"), head[3], head[4]
            self._in_block_frame = kind in _HEADER_BLOCK_FRAMES
            if self._in_block_frame:
                self._block_open = not flags & _END_HEADERS
                if kind == _CONTINUATION:
                    self.block_bytes += length
                else:
                    self.block_bytes = length
                    if begun > 0:
                        starts.append(begun)
            elif kind in _ANSWERED_FRAMES and not flags & _ACK:
                self.answered += 1
            self._skip = length
        return starts
