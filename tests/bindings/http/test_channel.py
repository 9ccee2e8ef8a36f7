"""The http binding's channel limits on a MemoryReactorClock: the request-head deadline and the
body size limit."""

from __future__ import annotations

import pytest
from twisted.internet.testing import MemoryReactorClock, StringTransport

from ssekd.bindings.http.channel import LimitedHTTPChannel, Limits


def channel(clock: MemoryReactorClock, **limits: float) -> tuple[LimitedHTTPChannel,
                                                                  StringTransport]:
    ch = LimitedHTTPChannel(Limits(**limits))  # type: ignore[arg-type]
    ch.callLater = clock.callLater
    transport = StringTransport()
    ch.makeConnection(transport)
    return ch, transport


def test_head_deadline_closes_a_slow_client_without_sleeping() -> None:
    clock = MemoryReactorClock()
    ch, transport = channel(clock, header_timeout=5.0)
    clock.advance(60)  # connected but silent: the head deadline is not armed yet
    assert not transport.disconnecting
    ch.dataReceived(b"GET / HTTP/1.1\r\n")
    for _ in range(4):
        clock.advance(1)
        ch.dataReceived(b"X-Slow: 1\r\n")  # trickling resets no deadline
    assert not transport.disconnecting
    clock.advance(1.01)
    assert transport.disconnecting
    assert transport.value().startswith(b"HTTP/1.1 408 Request Timeout")


def test_head_deadline_cancelled_once_headers_arrive() -> None:
    clock = MemoryReactorClock()
    ch, transport = channel(clock, header_timeout=5.0)
    ch.dataReceived(b"GET / HTTP/1.1\r\nHost: x\r\n")
    ch.requestFactory = _NeverFinishes
    ch.dataReceived(b"\r\n")
    clock.advance(100)
    assert not transport.disconnecting
    assert not clock.getDelayedCalls() or all(not c.active() for c in clock.getDelayedCalls())


@pytest.mark.parametrize("value", [b"a\x00b", b"a\rb"])
def test_header_value_with_nul_or_cr_is_refused(value: bytes) -> None:
    """RFC 9110 §5.5, whatever the Twisted version (24.7 passed such a value on)."""
    ch, transport = channel(MemoryReactorClock())
    ch.dataReceived(b"GET / HTTP/1.1\r\nHost: x\r\nLast-Event-ID: " + value + b"\r\n\r\n")
    assert transport.value().startswith(b"HTTP/1.1 400 Bad Request")
    assert transport.disconnecting
    assert not ch.requests[0].requestHeaders.hasHeader(b"last-event-id")


def test_body_larger_than_limit_is_refused() -> None:
    clock = MemoryReactorClock()
    ch, transport = channel(clock, body_bytes=10)
    ch.dataReceived(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 11\r\n\r\n")
    assert transport.value().startswith(b"HTTP/1.1 413")
    assert transport.disconnecting


class _NeverFinishes:
    """A request object that accepts the request and never answers (like a live stream)."""

    def __init__(self, channel: object, queued: object = None) -> None:
        self.channel = channel

    def __getattr__(self, name: str) -> object:
        return lambda *a, **k: None
