"""How the http binding answers a request its `options.requests` cannot check yet (a schema
registry that does not answer): after the wait, `503` with `Retry-After` - or, for an exit that
answers temporary refusals its own way (an SSE stream), that way - on a clock that does not
sleep, over the binding's own HTTP/1.1 channel."""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.testing import MemoryReactorClock
from twisted.web.server import Request

from ssekd.bindings.http.channel import Limits
from ssekd.bindings.http.cors import AccessControl
from ssekd.bindings.http.server import HttpRoot, HttpSite
from ssekd.bindings.http.validation.builder import ModelBuilder
from ssekd.bindings.http.validation.requests import build_requests
from ssekd.bindings.http.validation.waiting import WAIT_SECONDS
from ssekd.catalogs.catalog import Schema
from ssekd.telemetry.events import EventLog
from tests.support.http_fakes import Upload, http11


class SilentRegistry:
    """A catalog whose every answer is still on its way."""

    name = "sr"
    has_ids = False

    def resolve(self, subject: str, version: str | int) -> Deferred[Schema]:
        return Deferred()

    def stale(self, subject: str, version: str | int) -> bool:
        return False


class StreamLike(Upload):
    """An exit that answers temporary refusals itself (as the sse binding does)."""

    def answer_unavailable(self, request: Request, reason: str, retry_after: float) -> bytes:
        request.setHeader(b"content-type", b"text/event-stream")
        return b"retry: %d\n: %s\n\n" % (int(retry_after * 1000), reason.encode())


def site_with(exit: Any, clock: MemoryReactorClock) -> HttpSite:
    builder = ModelBuilder({"sr": SilentRegistry()}, clock, lambda n, d: None,
                           lambda path, message: (path, message))
    requests = build_requests([{"path": "/items", "content": {
        "model": "json", "catalog": {"sr": [{"subject": "item"}]}}}], builder, ("r",), False)
    root = HttpRoot("http0", [], exit, AccessControl(), EventLog("test"), clock=clock,
                    requests=requests)
    return HttpSite(root, Limits(), clock)


POST = (b"POST /items HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: 2\r\n\r\n{}")


def test_a_schema_the_catalog_does_not_give_is_503_after_the_wait() -> None:
    clock = MemoryReactorClock()
    upload = Upload()
    proto, transport = http11(site_with(upload, clock))
    proto.dataReceived(POST)
    clock.advance(WAIT_SECONDS - 0.5)
    assert transport.value() == b"", "still waiting for the catalog"
    clock.advance(0.5)
    answer = transport.value()
    assert answer.startswith(b"HTTP/1.1 503 "), answer
    assert b"Retry-After: 1\r\n" in answer
    assert answer.endswith(b"the schema is not available yet (schema not resolved yet)\n")
    assert upload.bodies == [], "the exit never saw it"


def test_an_exit_that_answers_temporary_refusals_answers_it() -> None:
    clock = MemoryReactorClock()
    stream = StreamLike()
    proto, transport = http11(site_with(stream, clock))
    proto.dataReceived(POST)
    clock.advance(WAIT_SECONDS)
    answer = transport.value()
    assert answer.startswith(b"HTTP/1.1 200 "), answer
    assert b"retry: 1000\n: the schema is not available yet" in answer
    assert stream.bodies == []
