"""Response bytes a client has not taken yet: what a client that does not read may cost.

A response whose writer is a producer (an SSE stream, a static file) is paused when its
connection cannot take more, and costs what one step of it wrote. A response written whole in
one `write()` (an http-kafka answer, `Exchange.answer`; any `render` that returns bytes) cannot
be paused: the bytes exist, and they stay in memory until the client takes them. HTTP/2 makes
that cheap to abuse: a client that opens a hundred streams and never opens its flow-control
window had a hundred whole answers queued for it (an audit measured 171 MiB for two connections
asking for a 900 KB answer a hundred times each).

So the http binding bounds them (`limits.h2-unsent-bytes`, `limits.process-unsent-bytes`):

* an HTTP/2 connection holds at most `h2-unsent-bytes` unsent: past it, every producer of the
  connection is paused until half of it has gone (`h2_sending.BatchingH2Connection`), and a
  response written whole that would take it past the bound is refused, unless the connection
  holds nothing else (one response at a time, whatever its size, as HTTP/1.1 has it);
* the process holds at most `process-unsent-bytes` of responses written whole and not taken
  yet (`PROCESS`, shared by every http binding of the process; each refuses by its own
  figure): what HTTP/2 connections have queued, and what HTTP/1.1 connections wrote while
  their socket was full (`channel.LimitedHTTPChannel`: one answer each, as the connection
  takes no further request until its socket has taken the answer). Producers are not counted
  there: a paused stream holds one step, and pausing every stream of the process because some
  clients do not read would let those clients stop everybody's events.

What a refusal is. The response is refused before a byte of it is written, when its headers go
out: its `Content-Length` says what it would hold. It becomes `503` with `Retry-After` and no
body (an empty body needs no flow-control window, so the stream ends at once), and what is then
written to it is dropped. That was chosen over resetting the stream once the bound would be
passed (RST_STREAM after a `200`'s headers): the client learns what happened from a status
every HTTP client reads, and a browser's `fetch` sees a `503`, not a network error. The CORS
headers of the response stay, so a page of another origin can read the `503`. An HTTP/2
response written whole that announced no length, or more than it said, and would pass the bound
is cut with RST_STREAM ENHANCE_YOUR_CALM instead: its headers are out by then. HEAD requests are
never refused, and the process's bound spares responses of at most `SMALL` bytes: when clients
that do not read hold it full, everybody's small answers (a `401`, a `404`, one item) are still
served. Each HTTP/2 connection still holds at most its own bound of them (and at most
`h2-streams` of them: what an SSE stream of a client that does not read holds too), and
HTTP/1.1's socket buffer holds that much of one anyway, unseen by the count.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

#: `limits.h2-unsent-bytes` by default: a few whole answers of a megabyte, or a hundred SSE
#: streams' steps, per HTTP/2 connection.
DEFAULT_H2_UNSENT_BYTES = 4 << 20
#: `limits.process-unsent-bytes` by default.
DEFAULT_PROCESS_UNSENT_BYTES = 128 << 20
#: Responses this small are not refused for the process's bound: an SSE stream's step, and
#: what Twisted's socket buffer holds before it pauses an HTTP/1.1 connection (and the count
#: starts: `FileDescriptor.bufferSize`).
SMALL = 64 * 1024
#: `Retry-After` of a refusal, in seconds: the client's own connection (or others') has to
#: take what is queued first.
RETRY_AFTER = b"1"
#: The reason phrase of a refusal (HTTP/1.1 sends it; the request keeps it for the logs).
REFUSAL_REASON = b"Service Unavailable"

#: Response headers a refusal keeps (besides CORS's `access-control-*`).
_KEPT = frozenset({b"date", b"server", b"vary"})


class UnsentBytes:
    """Bytes of responses written whole that the process holds for clients (`PROCESS`)."""

    __slots__ = ("held",)

    def __init__(self) -> None:
        self.held = 0

    def fits(self, size: int, limit: int) -> bool:
        """Whether `size` more bytes keep the count within `limit`."""
        return self.held + size <= limit


#: The process's count: one reactor thread, so a plain integer.
PROCESS = UnsentBytes()


def announced_length(headers: Iterable[tuple[bytes, bytes]]) -> int:
    """The response's `Content-Length`, 0 when it announces none (or nonsense)."""
    for name, value in headers:
        if name.lower() == b"content-length":
            return int(value) if value.isdigit() else 0
    return 0


def refusal_headers(headers: Iterable[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """The headers of the `503` that replaces a response (module docstring)."""
    kept = [(name, value) for name, value in headers
            if name.lower() in _KEPT or name.lower().startswith(b"access-control-")]
    return [*kept, (b"retry-after", RETRY_AFTER), (b"content-length", b"0")]


def replaced_by_refusal(request: Any) -> None:
    """Record on `request` that a `503` went out instead of its response, whose body is then
    dropped: the access event reads what went out from the request."""
    request.code, request.code_message = 503, REFUSAL_REASON
    request.body_dropped = True
