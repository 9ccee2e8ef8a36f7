"""One http-kafka request answered later, after Kafka said something.

A request waits on Deferreds (an acknowledgement, a reply, a change of a topic); when its client
goes away first, every wait it holds is cancelled (timers and cache watchers go with them) and
nothing is written to the dead request.

Every answer says it is data, not a page of the daemon's origin (`DATA_ONLY`): what a fetch
serves, and what a reply carries, was written by someone else (a `POST` of `<script>` with
`Content-Type: text/html`, read back by a fetch route), so a browser must neither guess another
type for it (`nosniff`) nor run or load anything from it (the content security policy).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from twisted.internet.defer import CancelledError, Deferred
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web import http
from twisted.web.server import Request

from ssekd.telemetry.redact import hide_jwts

T = TypeVar("T")

_log = Logger()

#: Headers of every http-kafka answer (module docstring).
DATA_ONLY = (("x-content-type-options", b"nosniff"),
             ("content-security-policy", b"default-src 'none'; frame-ancestors 'none'; sandbox"))


class Exchange:
    """The request and what it waits on."""

    __slots__ = ("_waits", "gone", "redact", "request")

    def __init__(self, request: Request, redact: Callable[[str], str] = str) -> None:
        self.request = request
        #: What a logged path becomes (an async location's token hidden).
        self.redact = redact
        self.gone = False
        self._waits: list[Deferred[Any]] = []
        req: Any = request  # twisted.web is untyped for mypy
        req.notifyFinish().addErrback(self._lost)

    def _lost(self, _: Failure) -> None:
        self.gone = True
        waits, self._waits = self._waits, []
        for d in waits:
            d.cancel()

    def hold(self, d: Deferred[T]) -> Deferred[T]:
        """`d`, cancelled if the client goes away before it fires."""
        if self.gone:
            d.cancel()
            return d
        self._waits.append(d)

        def done(result: Any) -> Any:
            if d in self._waits:
                self._waits.remove(d)
            return result

        d.addBoth(done)
        return d

    def answer(self, status: int, headers: Iterable[tuple[str, str | bytes]] = (),
               body: bytes = b"") -> None:
        """Write the response and finish (nothing, when the client has gone)."""
        if self.gone:
            return
        req: Any = self.request
        req.setResponseCode(status)
        # Twisted dates a response when the request came; a held one (a reply, `Prefer: wait`)
        # is made now, and `Date` says when a message was made (RFC 9110 §6.6.1)
        req.setHeader(b"date", http.datetimeToString())
        for own, data_only in DATA_ONLY:
            req.responseHeaders.setRawHeaders(own.encode("latin-1"), [data_only])
        for name, value in headers:
            req.responseHeaders.addRawHeader(name.encode("latin-1"),
                                             value if isinstance(value, bytes)
                                             else value.encode("utf-8"))
        if status in (http.NO_CONTENT, http.NOT_MODIFIED) or req.method == b"HEAD":
            body = b""
        elif not req.responseHeaders.hasHeader(b"content-length"):
            req.setHeader(b"content-length", str(len(body)).encode())
        if body:
            req.write(body)
        req.finish()

    def text(self, status: int, message: str, headers: Iterable[tuple[str, str]] = ()) -> None:
        """A short plain-text answer saying why (a refusal)."""
        self.answer(status, [("content-type", "text/plain; charset=utf-8"), *headers],
                    (message + "\n").encode("utf-8"))

    def failed(self, failure: Failure) -> None:
        """Last errback of a request's chain: a cancelled wait is the client's leaving; anything
        else is a bug, logged, and the client gets a `500` without a traceback."""
        if failure.check(CancelledError) or self.gone:
            return
        uri = bytes(getattr(self.request, "uri", b"")).decode("latin-1")
        _log.failure("http-kafka request {uri}", failure, uri=hide_jwts(self.redact(uri)))
        self.text(http.INTERNAL_SERVER_ERROR, "internal error")
