"""The downstream side of a request the http client carries upstream (`HttpClient.render`).

`Relay` writes the upstream's status, end-to-end headers and body to the client's request as
they come, and is the request's streaming producer: when the client's connection (HTTP/1.1) or
stream window (HTTP/2) is full, Twisted pauses it and it pauses the upstream call, so the daemon
holds at most one flow-control window or socket buffer of a response however slow the client.
A client that goes away cancels the upstream call.

Upstream trouble before the response head is an answer, never a traceback: `502` when the
upstream refused, was unreachable, reset or closed the connection, or spoke no HTTP; `504`
when it did not answer in time. After the head, the client's answer is cut off (its connection
closed short on HTTP/1.1, its stream reset on HTTP/2) so it cannot take a partial body for a whole
one. Both are `BINDING_HTTP_UPSTREAM_FAILED` events.
"""

from __future__ import annotations

from typing import Any

from twisted.internet.interfaces import IPushProducer
from twisted.web import http
from twisted.web.server import Request
from zope.interface import implementer

from ssekd.bindings.http.exchange import UpstreamCall, end_to_end
from ssekd.bindings.http.response_check import Abort, ResponseCheck, UpstreamAnswer
from ssekd.telemetry.events import EventLog

UPSTREAM_FAILED = "BINDING_HTTP_UPSTREAM_FAILED"
RESPONSE_ABORTED = "BINDING_HTTP_RESPONSE_ABORTED"

#: Response headers the downstream connection writes itself.
_OWN = frozenset({"content-length"})


@implementer(IPushProducer)
class Relay:
    """One request's response, from the upstream call to the client (a `ResponseSink`)."""

    def __init__(self, binding: str, request: Request, method: str, path: str,
                 events: EventLog, check: ResponseCheck | None = None,
                 describe: str = "") -> None:
        self.binding = binding
        self.request: Any = request  # twisted.web is untyped for mypy
        self.method = method
        self.path = path
        self.events = events
        self.check = check
        self.describe = describe
        self.call: UpstreamCall | None = None
        #: The client is gone or the answer is over: nothing more is written.
        self.done = False
        self.answered = False
        #: A response held for `check`: status, headers and the body so far.
        self._held: tuple[int, list[tuple[bytes, bytes]]] | None = None
        self._held_body: list[bytes] = []
        self._held_size = 0
        self._paused_early = False
        request.notifyFinish().addErrback(self._client_gone)

    # -- the upstream call ---------------------------------------------------------------

    def attach(self, call: UpstreamCall) -> None:
        """The call that carries the request, once it has started."""
        if self.done:
            call.cancel()
            return
        self.call = call
        if self._paused_early:
            call.pause()

    # -- ResponseSink --------------------------------------------------------------------

    def head(self, status: int, headers: list[tuple[bytes, bytes]]) -> None:
        if self.done:
            return
        headers = end_to_end(headers)
        check = self.check
        if check is not None and check.wants(self.method, self.path, status, _text(headers)):
            self._held = (status, headers)
            return
        self._write_head(status, headers)

    def data(self, chunk: bytes) -> None:
        if self.done:
            return
        if self._held is None:
            self.request.write(chunk)
            return
        assert self.check is not None
        self._held_size += len(chunk)
        if self._held_size > self.check.max_body:
            self._abort_held(Abort(f"body over {self.check.max_body} bytes"))
            return
        self._held_body.append(chunk)

    def end(self) -> None:
        if self.done:
            return
        if self._held is not None:
            assert self.check is not None
            status, headers = self._held
            body = b"".join(self._held_body)
            verdict = self.check.check(UpstreamAnswer(self.method, self.path, status,
                                                      _text(headers), body))
            if verdict is not None:
                self._abort_held(verdict)
                return
            self._held = None
            self._held_body = []
            self._write_head(status, headers)
            if body:
                self.request.write(body)
        self._finish()

    def failed(self, why: str) -> None:
        if self.done:
            return
        timeout = why == "timeout"
        if not self.answered:
            status = http.GATEWAY_TIMEOUT if timeout else http.BAD_GATEWAY
            self.events.emit(self.binding, UPSTREAM_FAILED,
                             f"{self.describe}: {why}; answered {status}")
            self.request.setResponseCode(status)
            self.request.setHeader(b"content-length", b"0")
            self._finish()
            return
        self.events.emit(self.binding, UPSTREAM_FAILED,
                         f"{self.describe}: {why} after the response head; answer cut off")
        self._cut_off()

    # -- writing to the client -----------------------------------------------------------

    def _write_head(self, status: int, headers: list[tuple[bytes, bytes]]) -> None:
        self.answered = True
        request = self.request
        request.setResponseCode(status)
        by_name: dict[bytes, list[bytes]] = {}
        for name, value in headers:
            by_name.setdefault(name.lower(), []).append(value)
        for name, values in by_name.items():
            if name.decode("latin-1") in _OWN and name == b"content-length" and len(values) > 1:
                continue  # conflicting lengths: let the connection frame the body itself
            request.responseHeaders.setRawHeaders(name, values)
        request.registerProducer(self, True)

    def _abort_held(self, verdict: Abort) -> None:
        assert self._held is not None
        status, headers = self._held
        self._held = None
        self._held_body = []
        self.events.emit(self.binding, RESPONSE_ABORTED,
                         f"{self.describe}: {status} aborted: {verdict.reason}")
        if self.call is not None:
            self.call.cancel()
        if verdict.instead is not None:  # nothing of the response has gone: answer otherwise
            self.request.setResponseCode(verdict.instead)
            self.request.setHeader(b"retry-after", b"0")
            self.request.setHeader(b"content-length", b"0")
            self._finish()
            return
        self._write_head(status, headers)
        self.request.write(b"")  # the head goes out, then the answer is cut off
        self._cut_off()

    def _finish(self) -> None:
        self.done = True
        if self.answered:
            self.request.unregisterProducer()
        self.request.finish()

    def _cut_off(self) -> None:
        """End the client's answer unfinished, so a partial body is never taken for a whole
        one: an HTTP/2 stream is reset (`RST_STREAM`, the connection's other streams go on); an
        HTTP/1.1 connection is closed once what was written has gone (its head, say: a reset
        would discard that), short of the length or the last chunk it announced."""
        self.done = True
        call, self.call = self.call, None
        if call is not None:
            call.cancel()
        if self.answered:
            self.request.unregisterProducer()
        transport = getattr(self.request, "transport", None)
        if transport is None:  # HTTP/2: the request's channel is its stream
            stream: Any = getattr(self.request, "channel", None)
            if hasattr(stream, "abortConnection"):
                stream.abortConnection()
            return
        transport.loseConnection()

    def _client_gone(self, reason: Any) -> None:
        """The client went away before the answer ended: the upstream request is cancelled."""
        self.done = True
        call, self.call = self.call, None
        if call is not None:
            call.cancel()

    # -- IPushProducer (the client's side of flow control) -------------------------------

    def pauseProducing(self) -> None:
        if self.call is not None:
            self.call.pause()
        else:
            self._paused_early = True

    def resumeProducing(self) -> None:
        self._paused_early = False
        if self.call is not None:
            self.call.resume()

    def stopProducing(self) -> None:
        self._client_gone(None)


def _text(headers: list[tuple[bytes, bytes]]) -> tuple[tuple[str, str], ...]:
    return tuple((n.decode("latin-1").lower(), v.decode("latin-1")) for n, v in headers)
