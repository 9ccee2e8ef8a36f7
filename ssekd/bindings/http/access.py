"""The access log of an http binding: one event per answered request, as nginx's and Envoy's
access logs have one line per request.

`BINDING_HTTP_REQUEST_ACCEPTED` says a request came (before anything is known of its answer);
`BINDING_HTTP_REQUEST_ANSWERED` says how it ended: its status, the bytes of its body, how long
it took, the route's exit that answered it and the protocol version, in the text format as
`key=value` pairs and in the JSON format as fields. A stream of the sse binding has its own end
event instead (`BINDING_SSE_STREAM_ENDED`: how long it lasted, its events, why it ended). A
request refused before it reached the routes (a body over `limits.body-bytes`: `413`) is
answered here too, with the exit `-`. A client that went away before the answer is an event
with `aborted=true` and the status the answer would have had.

Events go to the stdout exporter only, as the accepted event does: without one nothing is made.
The path is shown as the binding's other events show it (credentials and JWTs hidden).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from twisted.logger import Logger
from twisted.web.server import Request

from ssekd.telemetry.events import EventLog

ANSWERED = "BINDING_HTTP_REQUEST_ANSWERED"

_log = Logger()


class AccessLog:
    """Emits the answered event of each request of one http binding."""

    def __init__(self, binding: str, events: EventLog, clock: Any,
                 logged: Callable[[str], str]) -> None:
        self.binding = binding
        self.events = events
        self.clock = clock  # an IReactorTime
        #: What a path may show in a log line (the binding's redaction).
        self.logged = logged

    @property
    def on(self) -> bool:
        return self.events.stdout is not None and self.clock is not None

    def watch(self, request: Request, began: float) -> None:
        """Emit the event when `request` has been answered (or its client has gone)."""
        req: Any = request
        req.notifyFinish().addCallbacks(
            lambda _: self._answered(req, began, False),
            lambda _: self._answered(req, began, True)).addErrback(
            lambda failure: _log.failure("access event of {uri}", failure,
                                         uri=self.logged(_known(req, "uri"))))

    def refused(self, request: Request, status: int, began: float | None = None,
                method: bytes = b"", uri: bytes = b"", version: bytes = b"") -> None:
        """A request answered `status` before it reached the routes (a body too big): its
        method and target as the connection read them (the request has them only later)."""
        if self.on:
            self._emit(request, status, 0, began, "-", False, method, uri, version)

    def _answered(self, request: Any, began: float, aborted: bool) -> None:
        if getattr(request, "sse_stream", False):
            return  # the stream's end event says it (BINDING_SSE_STREAM_ENDED)
        # a body refused for the unsent bounds (unsent.py) never left, whatever was written
        sent = 0 if getattr(request, "body_dropped", False) else \
            int(getattr(request, "sentLength", 0))
        status = getattr(request, "code", None) or getattr(request, "responseCode", None) or 200
        self._emit(request, int(status), sent, began,
                   getattr(request, "answered_by", "-"), aborted)

    def _emit(self, request: Any, status: int, sent: int, began: float | None, route: str,
              aborted: bool, method_read: bytes = b"", uri_read: bytes = b"",
              version_read: bytes = b"") -> None:
        peer = request.getClientAddress()
        host = getattr(peer, "host", None)
        who = f"{host}:{getattr(peer, 'port', 0)}" if host is not None else "-"
        # a request refused while its head was still coming has no method or path yet
        # (Twisted's placeholders say "(no method yet)"): shown as `-`
        path = self.logged(uri_read.decode("latin-1") if uri_read else _known(request, "uri"))
        method = method_read.decode("latin-1") if method_read else _known(request, "method")
        version = version_read.decode("latin-1") if version_read else \
            _known(request, "clientproto")
        duration = 0.0 if began is None else max(0.0, self.clock.seconds() - began)
        fields: dict[str, Any] = {
            "peer": who, "method": method, "path": path, "route": route, "status": status,
            "bytes": sent, "duration_ms": round(duration * 1000, 1), "version": version}
        if aborted:
            fields["aborted"] = True
        self.events.emit(self.binding, ANSWERED,
                         " ".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}"
                                  for k, v in fields.items()), fields)


def _known(request: Any, attribute: str) -> str:
    value = getattr(request, attribute, b"")
    text = value.decode("latin-1") if isinstance(value, bytes) else str(value or "")
    return "-" if not text or text.startswith("(no ") else text
