"""The metrics of one sse binding: Zilla's stream metrics, slow-client pauses, limit ends."""

from __future__ import annotations

from ssekd.telemetry.metrics import Metrics


class SseStats:
    """Zilla's stream metrics of one sse binding, plus slow-client pauses and limit ends.

    For ssekd a stream is one SSE response: `received` is the client's side of it (the request
    that opens it, its closing by the client), `sent` the server's side (the response started,
    the bytes of events sent, its ending by the server)."""

    def __init__(self, metrics: Metrics, binding: str) -> None:
        self.active_received = metrics.gauge("stream.active.received", binding)
        self.active_sent = metrics.gauge("stream.active.sent", binding)
        self.opens_received = metrics.counter("stream.opens.received", binding)
        self.opens_sent = metrics.counter("stream.opens.sent", binding)
        self.closes_received = metrics.counter("stream.closes.received", binding)
        self.closes_sent = metrics.counter("stream.closes.sent", binding)
        self.errors_received = metrics.counter("stream.errors.received", binding)
        self.errors_sent = metrics.counter("stream.errors.sent", binding)
        self.data_received = metrics.counter("stream.data.received", binding)
        self.data_sent = metrics.counter("stream.data.sent", binding)
        self.pauses = metrics.counter("sse.pauses", binding)
        self.latency = metrics.histogram("sse.delivery.latency", binding)
        self._metrics = metrics
        self._binding = binding

    def opened(self) -> None:
        self.opens_sent.value += 1
        self.active_sent.value += 1
        self.active_received.value += 1

    def closed(self, by_client: bool) -> None:
        self.active_sent.value -= 1
        self.active_received.value -= 1
        if by_client:
            self.closes_received.value += 1
        else:
            self.closes_sent.value += 1

    def ended_by_limit(self, limit: str) -> None:
        """A limit ended a stream (called before the stream ends itself)."""
        self.errors_sent.value += 1
        self._metrics.counter("sse.limit.ends", self._binding, limit=limit).value += 1
