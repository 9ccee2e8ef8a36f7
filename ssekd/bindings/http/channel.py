"""HTTP/1.1 connection limits: header size and count, a deadline for the request head, and a
body-size cap, so a slowloris client or a giant header cannot tie up the daemon."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from twisted.internet.interfaces import IDelayedCall
from twisted.internet.protocol import connectionDone
from twisted.python.failure import Failure
from twisted.web.http import HTTPChannel

DEFAULT_HEADER_BYTES = 16384
DEFAULT_HEADER_COUNT = 100
DEFAULT_HEADER_TIMEOUT = 10.0
DEFAULT_IDLE_TIMEOUT = 60.0
DEFAULT_BODY_BYTES = 1 << 20


@dataclass(frozen=True)
class Limits:
    """`options.limits` of the http binding (an ssekd extension; Zilla has no such block)."""

    header_bytes: int = DEFAULT_HEADER_BYTES
    header_count: int = DEFAULT_HEADER_COUNT
    header_timeout: float = DEFAULT_HEADER_TIMEOUT
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT
    body_bytes: int = DEFAULT_BODY_BYTES

    @classmethod
    def from_options(cls, options: Mapping[str, Any] | None) -> Limits:
        o = options or {}
        return cls(
            header_bytes=int(o.get("header-bytes", DEFAULT_HEADER_BYTES)),
            header_count=int(o.get("header-count", DEFAULT_HEADER_COUNT)),
            header_timeout=float(o.get("header-timeout", DEFAULT_HEADER_TIMEOUT)),
            idle_timeout=float(o.get("idle-timeout", DEFAULT_IDLE_TIMEOUT)),
            body_bytes=int(o.get("body-bytes", DEFAULT_BODY_BYTES)),
        )


LIMITS_SCHEMA: Mapping[str, Any] = {
    "type": "object", "additionalProperties": False, "x-ssekd-addition": True,
    "description": "Bounds on what one client may cost; Zilla has no such block.",
    "properties": {
        "header-bytes": {"type": "integer", "minimum": 256, "default": DEFAULT_HEADER_BYTES,
                         "x-ssekd-addition": True,
                         "description": "Largest request head (request line and headers); more "
                                        "is `400`."},
        "header-count": {"type": "integer", "minimum": 1, "default": DEFAULT_HEADER_COUNT,
                         "x-ssekd-addition": True,
                         "description": "Most headers in one request; more is `400`."},
        "header-timeout": {"type": "number", "exclusiveMinimum": 0,
                           "default": DEFAULT_HEADER_TIMEOUT, "x-ssekd-addition": True,
                           "description": "Seconds from the first byte of a request to the end of "
                                          "its head (against slowloris); then `408` and close."},
        "idle-timeout": {"type": "number", "exclusiveMinimum": 0,
                         "default": DEFAULT_IDLE_TIMEOUT, "x-ssekd-addition": True,
                         "description": "Seconds a connection may stay silent before it is closed "
                                        "(HTTP/2 too). An sse exit's `max-idle-time` must be "
                                        "shorter."},
        "body-bytes": {"type": "integer", "minimum": 0, "default": DEFAULT_BODY_BYTES,
                       "x-ssekd-addition": True,
                       "description": "Largest request body; more is `413`."},
    },
}


class LimitedHTTPChannel(HTTPChannel):
    """HTTPChannel with an overall deadline for each request head.

    Twisted's own timeout is an *idle* timeout: a client that sends one header byte every few
    seconds resets it forever. The deadline here starts at the first byte of a request and is
    cancelled only when the whole head has arrived. It is armed from `dataReceived`, never from
    `connectionMade`, because after an ALPN switch to HTTP/2 this channel object stays alive but
    receives nothing, and its timer must not close the connection under the HTTP/2 protocol.
    """

    def __init__(self, limits: Limits) -> None:
        super().__init__()
        self.limits = limits
        self.maxHeaders = limits.header_count
        self.totalHeadersSize = limits.header_bytes
        self.MAX_LENGTH = limits.header_bytes
        self._awaiting_head = True
        self._head_deadline: IDelayedCall | None = None

    def dataReceived(self, data: bytes) -> None:
        if self._awaiting_head and self._head_deadline is None:
            self._head_deadline = self.callLater(self.limits.header_timeout, self._head_too_slow)
        super().dataReceived(data)

    def allHeadersReceived(self) -> None:
        self._disarm()
        self._awaiting_head = False
        if self.length is not None and self.length > self.limits.body_bytes:
            self._respond_and_close(b"413 Content Too Large")
            return
        super().allHeadersReceived()

    def requestDone(self, request: Any) -> None:
        super().requestDone(request)
        self._awaiting_head = True

    def headerReceived(self, line: bytes) -> bool:
        """A field value holding NUL, CR or LF is refused (RFC 9110 §5.5), as newer Twisted does
        itself; Twisted 24.7 passed it on to the request."""
        if len(line.translate(None, b"\x00\r\n")) != len(line):
            self._respond_and_close(b"400 Bad Request")
            return False
        ok: bool = super().headerReceived(line)
        return ok

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        self._disarm()
        super().connectionLost(reason)

    def _disarm(self) -> None:
        if self._head_deadline is not None:
            if self._head_deadline.active():
                self._head_deadline.cancel()
            self._head_deadline = None

    def _head_too_slow(self) -> None:
        self._head_deadline = None
        if self.transport is not None and self._awaiting_head:
            self._respond_and_close(b"408 Request Timeout")

    def _respond_and_close(self, status: bytes) -> None:
        assert self.transport is not None
        self.transport.write(b"HTTP/1.1 " + status +
                             b"\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
        self.transport.loseConnection()
        self.setRawMode()  # ignore whatever else arrives before the close
        self.dataReceived = lambda data: None  # type: ignore[method-assign]
