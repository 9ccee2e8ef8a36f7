"""HTTP/2 that sends every ready DATA frame of a reactor turn in one write.

Twisted's `H2Connection` sends one DATA frame per reactor turn (`callLater(0)` after each) and
writes each frame to the transport on its own. For SSE fan-out that is the worst case: one event
written to 100 streams of a connection costs 100 reactor turns, 100 transport writes and, over
TLS, 100 TLS records and socket sends; at 100 events/s the connection falls behind (measured with
`bench/tls.py`: seconds of latency, 3-5x the CPU of HTTP/1.1 per delivery).

`BatchingH2Connection` keeps Twisted's stream objects, request handling, control frames,
timeouts, GOAWAY and RST_STREAM handling, and replaces only the data path:

* writes to streams are queued, and one send per reactor turn (scheduled by the first write of
  the turn) drains the queues of all streams that can send, round-robin one frame per stream
  per pass (priorities are not honoured: fairness is what SSE needs), up to `send_budget` bytes;
  the frames leave in one `transport.write`; another turn is scheduled only if data remains;
* flow control is HTTP/2's: a stream whose window is exhausted leaves the rotation until a
  WINDOW_UPDATE (or a SETTINGS change) reopens it, while the other streams go on; an exhausted
  connection window stops all sending until the peer opens it;
* when the transport pauses the connection (its buffer is full) nothing is sent until it resumes;
* a stream's producer (`request.registerProducer`) is paused when its window is used up by what
  is queued, as in Twisted, and also when `stream_buffer_limit` bytes are queued for it - so a
  client that opens huge windows but reads slowly makes its producers stop instead of making the
  queues grow without bound - and resumed once its queue has drained to half that;
* the connection holds at most `unsent_limit` bytes queued over all its streams (the http
  binding's `limits.h2-unsent-bytes`): past it, every stream's producer is paused, and all are
  given a chance to go on once half of it has gone. What responses written whole (no producer)
  have queued is counted for the process too (`unsent.PROCESS`); `h2_limits` refuses such a
  response when it would pass either bound (unsent.py says why and how);
* a connection that has data waiting (queued, or in a transport that paused it) and can send
  none of it for `timeOut` seconds (the binding's `idle-timeout`) is closed as idle: the
  client's PINGs, SETTINGS and WINDOW_UPDATEs that open nothing keep Twisted's idle timeout
  from firing (any frame read resets it) but do not count as progress here, so a client that
  never opens its window cannot keep what is queued for it alive by pinging;
* writes (and response headers) to a stream the client reset are dropped quietly, and a pull
  producer (a static file) still registered on a stream that ends is stopped (Twisted leaves it
  running, and it raised once its request had lost its channel).

The http binding's limits on what a client may make it do are a layer above this one
(`h2_limits.LimitedH2Connection`); `h2c.h2_connection` builds that connection for a site.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import h2.exceptions
from twisted.internet.interfaces import IDelayedCall
from twisted.internet.protocol import connectionDone
from twisted.python.failure import Failure
from twisted.web._http2 import _END_STREAM_SENTINEL, H2Connection

from ssekd.bindings.http.unsent import DEFAULT_H2_UNSENT_BYTES, PROCESS, UnsentBytes

#: Payload bytes one reactor turn may send before it yields to the reactor (reads, other
#: connections, timers); the rest goes on the next turn.
SEND_BUDGET = 256 * 1024

#: Bytes queued for one stream before its producer is paused.
STREAM_BUFFER_LIMIT = 64 * 1024


class BatchingH2Connection(H2Connection):
    """An `H2Connection` whose data path sends many frames per reactor turn (module docstring)."""

    send_budget = SEND_BUDGET
    stream_buffer_limit = STREAM_BUFFER_LIMIT
    #: Bytes queued over all streams before every producer of the connection is paused.
    unsent_limit = DEFAULT_H2_UNSENT_BYTES
    #: Where the process counts what responses written whole have queued.
    whole: UnsentBytes = PROCESS

    def __init__(self, reactor: Any = None) -> None:
        super().__init__(reactor)
        #: Streams with queued data that may send now, in round-robin order (the OrderedDict
        #: gives O(1) pop from the front, append at the back and removal from the middle).
        self._ready: OrderedDict[int, None] = OrderedDict()
        #: Streams with queued data whose own flow-control window is exhausted.
        self._window_blocked: set[int] = set()
        #: Bytes queued per stream (Twisted recomputes this from the queue on every write).
        self._queued: dict[int, int] = {}
        #: Bytes queued over all streams, and whether they reached `unsent_limit` since the
        #: connection last drained to half of it (producers may be paused by it).
        self._unsent = 0
        self._full = False
        #: Bytes queued per stream by writes without a producer, counted in `whole` as well.
        self._whole: dict[int, int] = {}
        #: When data last left (or started waiting), and the check for a connection that
        #: sends nothing while data waits (the stall watch).
        self._progress_at = 0.0
        self._stall_call: IDelayedCall | None = None
        self._send_call: IDelayedCall | None = None
        self._initial_window = self.conn.remote_settings.initial_window_size


    # -- writes from streams -----------------------------------------------------------------

    def writeDataToStream(self, streamID: int, data: bytes) -> None:
        """Queue `data` for the stream and make sure a send is scheduled for this turn.

        A stream already forgotten (reset by the client) takes nothing: the write is dropped."""
        queue = self._outboundStreamQueues.get(streamID)
        if not data or queue is None:
            return
        size = len(data)
        if not self._unsent and self._consumerBlocked is None:
            self._waiting()  # (a paused transport's bytes have been waiting since it paused)
        queue.append(data)
        self._queued[streamID] = self._queued.get(streamID, 0) + size
        self._unsent += size
        if self._unsent >= self.unsent_limit:
            self._full = True
        stream = self.streams[streamID]
        if stream.producer is None:  # written whole: nothing to pause, counted for the process
            self._whole[streamID] = self._whole.get(streamID, 0) + size
            self.whole.held += size
        if streamID not in self._window_blocked:
            self._ready[streamID] = None
            self._wake()
        if self.remainingOutboundWindow(streamID) <= 0:
            stream.flowControlBlocked()

    def endRequest(self, streamID: int) -> None:
        """END_STREAM goes out after whatever is queued for the stream (if it still exists)."""
        queue = self._outboundStreamQueues.get(streamID)
        if queue is None:
            return
        queue.append(_END_STREAM_SENTINEL)
        if streamID not in self._window_blocked:
            self._ready[streamID] = None
            self._wake()

    def remainingOutboundWindow(self, streamID: int) -> int:
        """Room left for the stream's producer: its window, capped by the buffer limit, minus
        what is queued, and no more than the connection's room under `unsent_limit`. H2Stream
        pauses its producer at <= 0 and resumes it above."""
        try:
            window = min(self.conn.local_flow_control_window(streamID), self.stream_buffer_limit)
        except h2.exceptions.StreamClosedError:
            # Reset by the client in the read being handled: `h2` has closed it, Twisted will
            # forget it when it reaches the reset. No room: the producer stays paused.
            return 0
        return int(min(window - self._queued.get(streamID, 0),
                       self.unsent_limit - self._unsent))

    def writeHeaders(self, version: bytes, code: bytes, reason: bytes,
                     headers: list[tuple[bytes, bytes]], streamID: int) -> None:
        """Twisted drops headers for a stream `h2` has closed; also for one it has forgotten."""
        try:
            super().writeHeaders(version, code, reason, headers, streamID)
        except h2.exceptions.StreamIDTooLowError:
            pass

    # -- the send loop -----------------------------------------------------------------------

    def _wake(self) -> None:
        """Schedule one send for the end of this turn, so that all writes of the turn share it."""
        if (self._send_call is None and self._consumerBlocked is None
                and self._stillProducing):
            self._send_call = self._reactor.callLater(0, self._sendPrioritisedData)

    def _sendPrioritisedData(self, *args: object) -> None:
        """Send frames from all ready streams, round-robin, up to the budget, in one write.

        Named as Twisted's loop so that the call `H2Connection.__init__` schedules lands here.
        """
        self._send_call = None
        if not self._stillProducing or self._consumerBlocked is not None:
            return  # connectionLost, or resumeProducing wakes us
        conn = self.conn
        ready = self._ready
        queues = self._outboundStreamQueues
        queued = self._queued
        max_frame = conn.max_outbound_frame_size
        low_water = self.stream_buffer_limit // 2
        budget = self.send_budget
        whole = self._whole
        finished: list[int] = []
        drained: list[int] = []
        while ready and budget > 0 and conn.outbound_flow_control_window > 0:
            stream_id, _ = ready.popitem(last=False)
            queue = queues[stream_id]
            if not queue:
                continue
            if queue[0] is _END_STREAM_SENTINEL:
                queue.popleft()
                conn.end_stream(stream_id)
                finished.append(stream_id)
                continue
            window = conn.local_flow_control_window(stream_id)
            if window <= 0:
                # The connection window is open (loop condition): the stream's own is not.
                self._window_blocked.add(stream_id)
                continue
            room = min(window, max_frame)
            parts: list[bytes] = []
            size = 0
            while queue and size < room:
                chunk = queue[0]
                if chunk is _END_STREAM_SENTINEL:
                    break
                if size + len(chunk) <= room:
                    queue.popleft()
                    parts.append(chunk)
                    size += len(chunk)
                else:
                    cut = room - size
                    parts.append(chunk[:cut])
                    queue[0] = chunk[cut:]
                    size = room
            end = len(queue) == 1 and queue[0] is _END_STREAM_SENTINEL
            if end:
                queue.popleft()
                finished.append(stream_id)
            conn.send_data(stream_id, parts[0] if len(parts) == 1 else b"".join(parts),
                           end_stream=end)
            budget -= size
            left = queued[stream_id] - size
            queued[stream_id] = left
            if whole and stream_id in whole:
                self._release_whole(stream_id, size)
            if queue:
                ready[stream_id] = None  # to the back of the rotation
            if left <= low_water and left + size > low_water:
                drained.append(stream_id)
        sent = self.send_budget - budget
        if sent:
            self._unsent -= sent
            self._progress_at = self._reactor.seconds()
        out = conn.data_to_send()
        if out:
            self.resetTimeout()
            if self._bufferedControlFrames:
                # Control frames held back while the transport was paused go first.
                self._flushBufferedControlData()
            transport: Any = self.transport
            transport.write(out)
        for stream_id in finished:
            if stream_id in self.streams:  # a failed write may have lost the connection
                self._requestDone(stream_id)
        for stream_id in drained:
            # Below the low-water mark: a producer paused by the buffer limit may go on. Done
            # after the write, since a producer may write (and re-enter) as it resumes.
            stream = self.streams.get(stream_id)
            if stream is not None:
                stream.windowUpdated()
        self._resume_if_drained()
        if ready and conn.outbound_flow_control_window > 0:
            self._wake()

    def _release_whole(self, stream_id: int, size: int) -> None:
        """`size` bytes of the stream's queue have left (or were dropped): what responses
        written whole had queued goes first."""
        held = self._whole[stream_id]
        if held > size:
            self._whole[stream_id] = held - size
            self.whole.held -= size
        else:
            del self._whole[stream_id]
            self.whole.held -= held

    def _resume_if_drained(self) -> None:
        """Once the connection has drained to half of `unsent_limit`, producers paused by it
        get a chance to go on (each resumes if its own window has room)."""
        if self._full and self._unsent <= self.unsent_limit // 2 and self._stillProducing:
            self._full = False
            for stream in list(self.streams.values()):
                stream.windowUpdated()

    # -- the stall watch ---------------------------------------------------------------------

    def _waiting(self) -> None:
        """Data starts waiting (nothing did): the stall watch counts from now."""
        self._progress_at = self._reactor.seconds()
        if self._stall_call is None and self.timeOut:
            self._stall_call = self._reactor.callLater(self.timeOut, self._check_stall)

    def _check_stall(self) -> None:
        """Close the connection as idle when data has waited `timeOut` seconds with nothing
        sent; look again when that could be; stop looking when nothing waits."""
        self._stall_call = None
        if not self._stillProducing or not (self._unsent or self._consumerBlocked is not None):
            return
        idle = self._reactor.seconds() - self._progress_at
        if idle < self.timeOut:
            self._stall_call = self._reactor.callLater(self.timeOut - idle, self._check_stall)
            return
        self.setTimeout(None)  # Twisted's idle timer: this close is the one
        self.timeoutConnection()

    # -- events that unblock sending ---------------------------------------------------------

    def pauseProducing(self) -> None:
        """The transport's buffer is full: what is in it waits too (the stall watch)."""
        if self._consumerBlocked is None and not self._unsent:
            self._waiting()
        super().pauseProducing()

    def resumeProducing(self) -> None:
        """The transport drained: flush held control frames (Twisted), then send data again."""
        self._progress_at = self._reactor.seconds()
        super().resumeProducing()
        if self._ready or self._full:
            self._wake()

    def _handleWindowUpdate(self, event: Any) -> None:
        """A stream's update brings it back into the rotation; the connection's wakes the loop
        (its streams never left it). Either may let paused producers go on (Twisted's check)."""
        stream_id = event.stream_id
        if stream_id:
            stream = self.streams.get(stream_id)
            if stream is None:
                return  # a late WINDOW_UPDATE for a stream already done: harmless
            if stream_id in self._window_blocked:
                self._window_blocked.discard(stream_id)
                self._ready[stream_id] = None
            if self._ready:
                self._wake()
            stream.windowUpdated()
        else:
            if self._ready:
                self._wake()
            for stream in list(self.streams.values()):
                stream.windowUpdated()

    def _handlePriorityUpdate(self, event: Any) -> None:
        """Priorities are not honoured (the send loop is round-robin), so PRIORITY frames are
        ignored. Twisted kept a tree entry for every stream one names, opened or not, and the
        tree raises on its 1001st: a PRIORITY flood dropped the connection with a traceback."""


    def dataReceived(self, data: bytes) -> None:
        """Twisted does not look at SETTINGS; a new INITIAL_WINDOW_SIZE changes every stream's
        window, so window-blocked streams get another look and their producers a chance."""
        super().dataReceived(data)
        if not self._stillProducing:
            return
        initial = self.conn.remote_settings.initial_window_size
        if initial != self._initial_window:
            self._initial_window = initial
            for stream_id in self._window_blocked:
                self._ready[stream_id] = None
            self._window_blocked.clear()
            if self._ready:
                self._wake()
            for stream in list(self.streams.values()):
                stream.windowUpdated()

    # -- stream and connection ends ----------------------------------------------------------

    def _requestDone(self, streamID: int) -> None:
        stream = self.streams.get(streamID)
        if stream is not None and stream.producer is not None and not stream.hasStreamingProducer:
            # A pull producer (a static file) still registered: the stream was reset or the
            # connection lost under it. Twisted leaves it running, and its next step calls
            # `request.unregisterProducer()` on a request whose channel is gone (AttributeError,
            # a traceback per file). Stopped here, as HTTP/1.1 stops it.
            stream.producer.stopProducing()
        self._ready.pop(streamID, None)
        self._window_blocked.discard(streamID)
        self._unsent -= self._queued.pop(streamID, 0)  # what a reset stream had queued
        if streamID in self._whole:
            self.whole.held -= self._whole.pop(streamID)
        super()._requestDone(streamID)
        if self._full and self._stillProducing:
            self._wake()  # the send turn resumes the producers it paused, if drained

    def connectionLost(self, reason: Failure = connectionDone,
                       _cancelTimeouts: bool = True) -> None:
        super().connectionLost(reason, _cancelTimeouts=_cancelTimeouts)
        for call in (self._send_call, self._stall_call):
            if call is not None and call.active():
                call.cancel()
        self._send_call = self._stall_call = None
