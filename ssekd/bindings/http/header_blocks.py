"""Where HTTP/2 header blocks start and end in the bytes a client sends.

`h2` gathers a header block (a HEADERS frame and the CONTINUATION frames up to END_HEADERS)
silently and says nothing until it is complete, so a client that never completes one, or sends
its HEADERS frame a byte at a time, looks to the connection like any other client that is not
idle. `HeaderBlockWatch` reads only the 9-byte frame headers of the received bytes (it skips
payloads) to tell when a block is under way; `BatchingH2Connection` gives that a deadline.
"""

from __future__ import annotations

#: HEADERS, PUSH_PROMISE and CONTINUATION: the frames that carry header blocks (RFC 9113 §6).
_HEADER_BLOCK_FRAMES = frozenset({0x1, 0x5, 0x9})
_END_HEADERS = 0x4
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

    @property
    def pending(self) -> bool:
        return self._block_open or (self._in_block_frame and self._skip > 0)

    def feed(self, data: bytes) -> None:
        pos, end = 0, len(data)
        while pos < end:
            if self._skip:
                step = min(self._skip, end - pos)
                self._skip -= step
                pos += step
                continue
            take = _FRAME_HEADER - len(self._head)
            self._head += data[pos:pos + take]
            pos += take
            if len(self._head) < _FRAME_HEADER:
                return
            head, self._head = self._head, b""
            self._in_block_frame = head[3] in _HEADER_BLOCK_FRAMES
            if self._in_block_frame:
                self._block_open = not head[4] & _END_HEADERS
            self._skip = int.from_bytes(head[:3], "big")
