"""One http-kafka request answered later, after Kafka said something.

A request waits on Deferreds (an acknowledgement, a reply, a change of a topic); when its client
goes away first, every wait it holds is cancelled (timers and cache watchers go with them) and
nothing is written to the dead request.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TypeVar

from twisted.internet.defer import CancelledError, Deferred
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web import http
from twisted.web.server import Request

T = TypeVar("T")

_log = Logger()


class Exchange:
    """The request and what it waits on."""

    __slots__ = ("_waits", "gone", "request")

    def __init__(self, request: Request) -> None:
        self.request = request
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
        _log.failure("http-kafka request {uri}", failure, uri=getattr(self.request, "uri", b""))
        self.text(http.INTERNAL_SERVER_ERROR, "internal error")
