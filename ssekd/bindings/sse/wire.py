"""The text/event-stream wire format, as Zilla writes it (docs/protocol.md).

Field order `id:`, `event:`, then one `data:` line per payload line, then a blank line; no space
after the colon. Payload lines are split at LF, CR LF and lone CR alike: a browser ends a field
line at any of them, so a lone CR left inside a `data:` line would start a bogus field.
"""

from __future__ import annotations

import re

KEEPALIVE = b":\n\n"
#: Asks the client for fresh credentials before its token expires (docs/protocol.md); it answers with a
#: POST of that content type carrying them.
CHALLENGE = (b'event:challenge\n'
             b'data:{"method":"POST","headers":{"content-type":"application/x-challenge-response"}}'
             b'\n\n')
_LINES = re.compile(rb"\r\n|\r|\n")

#: The pieces of the commonest event, an id and one data line: `ID`, the id, `ID_DATA`, the
#: data, `END`. The encoder's hot path appends them for many events to one list and joins once;
#: `event_bytes` is the general form and gives the same bytes.
ID = b"id:"
ID_DATA = b"\ndata:"
END = b"\n\n"
#: The bytes that end a field line; data holding neither fits one `data:` line.
LF, CR = 10, 13


def retry_field(ms: int) -> bytes:
    return b"retry:%d\n\n" % ms


def comment(text: str) -> bytes:
    """A comment line (ignored by clients), e.g. why a stream ends at once."""
    return b": " + _LINES.sub(b" ", text.encode("utf-8")) + b"\n\n"


def id_data_event(event_id: bytes, data: bytes) -> bytes:
    """`event_bytes` of an ASCII id and data without LF or CR, without its checks."""
    return ID + event_id + ID_DATA + data + END


def event_bytes(event_id: str | None, event: str | None, data: bytes | None) -> bytes:
    """One event. `data` None writes no data line (a delete of a null key)."""
    out = []
    if event_id is not None:
        out.append(b"id:" + event_id.encode("utf-8") + b"\n")
    if event is not None:
        out.append(b"event:" + event.encode("utf-8") + b"\n")
    if data is not None:
        if b"\n" in data or b"\r" in data:
            out.extend(b"data:" + line + b"\n" for line in _LINES.split(data))
        else:
            out.append(b"data:" + data + b"\n")
    out.append(b"\n")
    return b"".join(out)
