"""One open text/event-stream response: writes, keepalive, backpressure, ending.

`SseStream` sits between a Twisted request and whatever produces events for it (an
`EventsHandle`, e.g. a kafka subscription). It registers itself as the request's streaming
producer, so when the client's transport buffer fills (HTTP/1.1 TCP, or an HTTP/2 flow-control
window) Twisted pauses it and it pauses its source: nothing more is buffered for that client.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from twisted.internet.interfaces import IPushProducer
from twisted.web.server import Request
from zope.interface import implementer

from ssekd.bindings.sse.wire import KEEPALIVE

if TYPE_CHECKING:
    from ssekd.bindings.sse.server import SseServer


class EventsHandle(Protocol):
    """What an events binding returns for an opened stream."""

    def pause(self) -> None: ...

    def resume(self) -> None: ...

    def close(self) -> None: ...


@implementer(IPushProducer)
class SseStream:
    """The sink an events binding writes SSE bytes to."""

    __slots__ = (
        "__weakref__",
        "_timer",
        "done",
        "handle",
        "last_write",
        "request",
        "server",
        "written",
    )

    def __init__(self, server: SseServer, request: Request) -> None:
        self.server = server
        # Twisted's Request and IReactorTime are untyped for mypy: keep them as Any here
        self.request: Any = request
        self.handle: EventsHandle | None = None
        self.done = False
        self.last_write = server.clock.seconds()
        self.written = 0
        self._timer: Any = None

    def start(self, handle: EventsHandle, first: bytes) -> None:
        """Send the headers (and `retry:`), become the request's producer, arm the keepalive."""
        self.handle = handle
        self.request.registerProducer(self, True)
        self.request.notifyFinish().addBoth(self._finished)
        self.request.write(first)
        self.last_write = self.server.clock.seconds()
        self._arm(self.server.max_idle)

    # -- EventSink ---------------------------------------------------------------------------

    def write(self, data: bytes) -> None:
        if self.done:
            return
        self.written += len(data)
        self.last_write = self.server.clock.seconds()
        self.request.write(data)

    def end(self) -> None:
        """Finish the response with a 200 that ends: the browser reconnects with its last id."""
        if self.done:
            return
        self._close()
        try:
            self.request.unregisterProducer()
            self.request.finish()
        except RuntimeError:  # the connection went away in the meantime
            pass

    # -- IPushProducer (called by Twisted) --------------------------------------------------

    def pauseProducing(self) -> None:
        if self.handle is not None and not self.done:
            self.handle.pause()

    def resumeProducing(self) -> None:
        if self.handle is not None and not self.done:
            self.handle.resume()

    def stopProducing(self) -> None:
        self._close()

    # -- internals ---------------------------------------------------------------------------

    def _finished(self, _: Any) -> None:
        self._close()

    def _close(self) -> None:
        if self.done:
            return
        self.done = True
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = None
        if self.handle is not None:
            self.handle.close()
        self.server.streams.pop(self, None)

    def _arm(self, delay: float) -> None:
        self._timer = self.server.clock.callLater(delay, self._keepalive)

    def _keepalive(self) -> None:
        """Write `:` when idle for max-idle-time; writes in between just move the deadline."""
        self._timer = None
        if self.done:
            return
        idle = self.server.clock.seconds() - self.last_write
        if idle >= self.server.max_idle:
            self.write(KEEPALIVE)
            idle = 0.0
        self._arm(self.server.max_idle - idle)
