"""Send at once when nothing is queued: the write path of fan-out to many TCP connections.

Twisted's `transport.write` always queues: it asks the reactor to watch the socket for
writability, sends on the next reactor turn, then stops watching - two `epoll_ctl` calls, a
`doWrite` with its logging context and the `send` for every write. Profiled at 1,000 streams x
100 events/s that bookkeeping was about a third of the reactor's time, and it delays every write
by one reactor turn. A stream at the tail has almost always sent everything, so for it the same
bytes go out with one `send` right away. Whatever the socket does not take, and any write while
something is still queued or the connection is closing, goes through `transport.write` as
before: ordering, Twisted's buffer and its producer pausing are unchanged.

Coalescing does not suffer: what arrives from Kafka while the reactor is busy sending is handed
over as one batch when it is free again (`ssekd.bindings.kafka.client`), so a busy reactor sends
fewer, larger writes, and an idle one sends each batch the moment it arrives.

A connection written this way has Nagle's algorithm off (`TCP_NODELAY`, as asyncio sets on
every TCP transport). Only plain TCP transports (`twisted.internet.tcp.Connection` without TLS
started on it) qualify; TLS, HTTP/2 and test transports keep their own `write`. The attributes
read here are those of Twisted's `FileDescriptor` buffer (listed in
tests/test_twisted_private_names.py); if a release lacked them, `eager` says no and the stream
uses `transport.write` rather than guess.
"""

from __future__ import annotations

import socket
from typing import Any

from twisted.internet import tcp

_BUFFER_ATTRIBUTES = ("dataBuffer", "offset", "_tempDataLen", "connected", "disconnecting",
                      "_writeDisconnected", "socket")


def eager(transport: Any) -> bool:
    """Whether `send_now` may write to `transport` (a plain TCP connection); turns Nagle off on
    it if so. Two functions rather than a closure per stream: 10,000 idle streams would hold
    10,000 closures (~0.5 KiB each)."""
    if (not isinstance(transport, tcp.Connection) or getattr(transport, "TLS", False)
            or not all(hasattr(transport, a) for a in _BUFFER_ATTRIBUTES)):
        return False
    if transport.socket.family in (socket.AF_INET, socket.AF_INET6):
        # Nagle's algorithm would hold a small write back while the previous one is
        # unacknowledged, and a client's delayed ACK can make that tens of milliseconds; writes
        # here are whole batches already (coalesced before they reach the stream)
        transport.setTcpNoDelay(True)
    return True


def send_now(t: Any, data: bytes) -> None:
    """Write `data` to an `eager` transport: at once when nothing is queued for it."""
    if (t._tempDataLen or t.offset != len(t.dataBuffer) or not t.connected
            or t.disconnecting or t._writeDisconnected):
        t.write(data)
        return
    try:
        sent = t.socket.send(data)
    except (BlockingIOError, InterruptedError):
        sent = 0
    except OSError:
        # let Twisted meet the same error on its own write and close the connection
        t.write(data)
        return
    if sent < len(data):
        t.write(data[sent:])
