"""Finishing a Twisted web request whose answer comes later (a guard still fetching keys, the
sibling workers asked about a renewal), shared by the http binding and the workers' own sockets
(which may import no binding but the contract)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from twisted.internet import defer
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web import http
from twisted.web.server import NOT_DONE_YET, Request

from ssekd.telemetry.redact import redact_uri

log = Logger()


def answer_later(request: Request, body: defer.Deferred[bytes | int],
                 logged: Callable[[str], str] = redact_uri) -> None:
    """Finish `request` with what `body` fires with (unless the client has gone meanwhile, or
    it is `NOT_DONE_YET`: then whoever returned it finishes the request); a failure is `500`,
    logged with the request's URI as `logged` shows it (no token)."""
    req: Any = request  # twisted.web is untyped for mypy
    gone: list[bool] = []
    req.notifyFinish().addErrback(lambda _: gone.append(True))

    def write(answer: bytes | int) -> None:
        if gone or answer is NOT_DONE_YET:
            return
        assert isinstance(answer, bytes)
        req.write(answer)
        req.finish()

    def failed(failure: Failure) -> None:
        uri = bytes(req.uri).decode("latin-1")
        log.failure("answering {uri}", failure, uri=logged(uri))
        if not gone:
            req.setResponseCode(http.INTERNAL_SERVER_ERROR)
            req.finish()

    body.addCallback(write).addErrback(failed)
