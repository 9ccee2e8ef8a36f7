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
  queues grow without bound - and resumed once its queue has drained to half that.

It also applies the http binding's `Limits` to HTTP/2, where Twisted applies none:

* SETTINGS advertise `h2-streams` as MAX_CONCURRENT_STREAMS and `header-bytes` as
  MAX_HEADER_LIST_SIZE, and `h2`'s HPACK decoder refuses a bigger header list (the connection
  ends with GOAWAY: HPACK state cannot be kept after skipping a block); a header block whose
  frames announce more than `HPACK_EXPANSION` times `header-bytes` ends it before `h2` buffers
  it (`h2` holds up to 64 CONTINUATION frames, 1 MiB, per connection);
* a stream over `h2-streams` gets RST_STREAM REFUSED_STREAM and the connection goes on (RFC 9113
  §5.1.2: a stream error; `h2` would end the connection, see `AdvertisedSettings`);
* more than `h2-control-frames` frames the daemon must answer (SETTINGS and PING, each
  acknowledged, and refused streams, each reset) in `H2_CONTROL_WINDOW` seconds end the
  connection with GOAWAY ENHANCE_YOUR_CALM (SETTINGS and PING floods). Twisted bounds only the
  answers it holds while the transport is paused (17 KiB, then an abort without GOAWAY), so a
  client that reads its answers could flood for ever, and one that does not gets no GOAWAY;
* a request with more than `header-count` headers gets `431` on its stream;
* a header block (HEADERS and its CONTINUATION frames) must be complete `header-timeout` seconds
  after it starts, else GOAWAY: `HeaderBlockWatch` follows frame boundaries to know;
* bodies as on HTTP/1.1 (`channel.py`): a route that takes none gets its request at the first
  body byte (or at once if `content-length` announces one) and the stream is reset once
  answered; other bodies are counted as DATA arrives and the stream gets `413` and a reset the
  moment the body crosses `body-bytes`;
* more than `h2-resets` client RST_STREAMs in `H2_RESET_WINDOW` seconds end the connection with
  GOAWAY ENHANCE_YOUR_CALM (rapid reset, CVE-2023-44487). A stream opened and reset in the same
  read is never handed to the site (no render, no subscription), and writes to a stream the
  client reset are dropped quietly.

And it bounds the work one connection can cause at a time: `h2` gets a read one header block
(one new stream) at a time, at most `BLOCKS_PER_TURN` per reactor turn, the rest waiting with
reading paused; a connection sent away reads at most `LINGER_BYTES` more; and a pull producer
(a static file) still registered on a stream that ends is stopped (Twisted leaves it running,
and it raised once its request had lost its channel).

`SwitchingChannelProtocol` is the Site's protocol: HTTP/1.1 until TLS says ALPN chose `h2`, then
this connection class (Twisted's own switch always builds its own class); `h2_connection` builds
one for cleartext h2c.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from typing import Any

import h2.errors
import h2.events
import h2.exceptions
import h2.settings
from twisted.internet.error import ConnectionLost
from twisted.internet.interfaces import IDelayedCall, ITCPTransport
from twisted.internet.protocol import connectionDone
from twisted.python.failure import Failure
from twisted.web import http
from twisted.web._http2 import _END_STREAM_SENTINEL, H2Connection

from ssekd.bindings.http.channel import H2_CONTROL_WINDOW, H2_RESET_WINDOW, BodyRoutes, Limits
from ssekd.bindings.http.header_blocks import HeaderBlockWatch

#: Payload bytes one reactor turn may send before it yields to the reactor (reads, other
#: connections, timers); the rest goes on the next turn.
SEND_BUDGET = 256 * 1024

#: Bytes queued for one stream before its producer is paused.
STREAM_BUFFER_LIMIT = 64 * 1024
#: Seconds a connection sent away with GOAWAY stays half-open, so the peer reads the GOAWAY.
LINGER_SECONDS = 2.0
#: Bytes read and dropped while it lingers; then reading stops. A peer that reads our GOAWAY
#: stops sending long before; one that floods on would have the reactor read it at full speed
#: (measured: a CONTINUATION flood made it drop 1 GB a second, and other clients waited).
LINGER_BYTES = 64 * 1024
#: Header blocks (new streams) handed to `h2` in one reactor turn. A read can hold thousands
#: (a HEADERS frame for a stream like the last takes a dozen bytes), and each costs `h2` and
#: Twisted ~0.1 ms even when the stream is refused, an SSE stream's render and first catch-up
#: a few ms: the rest of the read waits for the next turn, so other connections are served in
#: between (measured with 1,000 streams opened at once: at 20 a turn other clients' events
#: were up to 100 ms late, at 5 not noticeably).
BLOCKS_PER_TURN = 5
#: How many times `header-bytes` a header block's HPACK bytes may be: a header list within the
#: limit encodes to less (each field counts 32 bytes more than its name and value, and Huffman
#: codes take at most 30 bits per byte).
HPACK_EXPANSION = 4


class AdvertisedSettings(h2.settings.Settings):
    """The server's SETTINGS, as sent; but `h2` is shown no MAX_CONCURRENT_STREAMS of its own.

    `h2` checks that setting on every new stream and ends the whole connection (GOAWAY
    PROTOCOL_ERROR) when a client opens one too many, taking the client's other streams with
    it; RFC 9113 §5.1.2 makes that a stream error. So `BatchingH2Connection` refuses the stream
    itself, with REFUSED_STREAM (which tells the client it may retry). The SETTINGS frame still
    advertises the limit: `h2` writes the settings' stored values, not this property."""

    @property
    def max_concurrent_streams(self) -> int:
        return 2**31 - 1

    @max_concurrent_streams.setter
    def max_concurrent_streams(self, value: int) -> None:
        self[h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS] = value


class BatchingH2Connection(H2Connection):
    """An `H2Connection` whose data path sends many frames per reactor turn (module docstring)."""

    send_budget = SEND_BUDGET
    stream_buffer_limit = STREAM_BUFFER_LIMIT

    def __init__(self, reactor: Any = None, limits: Limits | None = None,
                 routes: BodyRoutes | None = None) -> None:
        super().__init__(reactor)
        self.limits = limits or Limits()
        #: Says which requests may carry a body; None: all may (within `limits.body_bytes`).
        self.routes = routes
        # Our SETTINGS, sent by `connectionMade`; as initial values they hold from the start.
        self.conn.local_settings = AdvertisedSettings(client=False, initial_values={
            h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: self.limits.h2_streams,
            h2.settings.SettingCodes.MAX_HEADER_LIST_SIZE: self.limits.header_bytes,
        })
        self.conn.decoder.max_header_list_size = self.limits.header_bytes
        self._blocks = HeaderBlockWatch()
        self._block_deadline: IDelayedCall | None = None
        self._gone = False  # our GOAWAY is sent: input is dropped until the socket closes
        self._dropped = 0  # bytes dropped since then
        #: Bytes read but not yet handed to `h2` (a burst of header blocks: `_hand_on`), and
        #: where header blocks start in them.
        self._backlog = b""
        self._backlog_starts: list[int] = []
        self._backlog_call: IDelayedCall | None = None
        #: When the client's recent stream resets came (at most `h2_resets` + 1 kept).
        self._resets: deque[float] = deque()
        #: Frames the client made us answer, by read: (when, how many), and their sum.
        self._answers: deque[tuple[float, int]] = deque()
        self._answer_count = 0
        #: Bytes each stream's body may still bring, for streams whose route takes a body.
        self._body_left: dict[int, int] = {}
        #: Streams whose route takes no body and whose request waits for END_STREAM.
        self._bodiless: set[int] = set()
        #: Streams handed on before their body came: what else arrives for them is dropped.
        self._unread: set[int] = set()
        #: Streams with queued data that may send now, in round-robin order (the OrderedDict
        #: gives O(1) pop from the front, append at the back and removal from the middle).
        self._ready: OrderedDict[int, None] = OrderedDict()
        #: Streams with queued data whose own flow-control window is exhausted.
        self._window_blocked: set[int] = set()
        #: Bytes queued per stream (Twisted recomputes this from the queue on every write).
        self._queued: dict[int, int] = {}
        self._send_call: IDelayedCall | None = None
        self._initial_window = self.conn.remote_settings.initial_window_size

    # -- writes from streams -----------------------------------------------------------------

    def writeDataToStream(self, streamID: int, data: bytes) -> None:
        """Queue `data` for the stream and make sure a send is scheduled for this turn.

        A stream already forgotten (reset by the client) takes nothing: the write is dropped."""
        queue = self._outboundStreamQueues.get(streamID)
        if not data or queue is None:
            return
        queue.append(data)
        self._queued[streamID] = self._queued.get(streamID, 0) + len(data)
        if streamID not in self._window_blocked:
            self._ready[streamID] = None
            self._wake()
        if self.remainingOutboundWindow(streamID) <= 0:
            self.streams[streamID].flowControlBlocked()

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
        what is queued. H2Stream pauses its producer at <= 0 and resumes it above."""
        try:
            window = min(self.conn.local_flow_control_window(streamID), self.stream_buffer_limit)
        except h2.exceptions.StreamClosedError:
            # Reset by the client in the read being handled: `h2` has closed it, Twisted will
            # forget it when it reaches the reset. No room: the producer stays paused.
            return 0
        return int(window - self._queued.get(streamID, 0))

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
            if queue:
                ready[stream_id] = None  # to the back of the rotation
            if left <= low_water and left + size > low_water:
                drained.append(stream_id)
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
        if ready and conn.outbound_flow_control_window > 0:
            self._wake()

    # -- events that unblock sending ---------------------------------------------------------

    def resumeProducing(self) -> None:
        """The transport drained: flush held control frames (Twisted), then send data again."""
        super().resumeProducing()
        if self._ready:
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
        window, so window-blocked streams get another look and their producers a chance.

        Also arms the header block deadline while a block is incomplete (`HeaderBlockWatch`),
        bounds a header block's bytes and the frames the client makes us answer, and hands
        `h2` the bytes one header block at a time."""
        if self._gone:
            # after our GOAWAY: dropped unread while the close lingers, up to LINGER_BYTES
            self._dropped += len(data)
            if self._dropped > LINGER_BYTES:
                transport: Any = self.transport
                transport.pauseProducing()  # stop reading; the close comes when it lingered
            return
        blocks = self._blocks
        answered = blocks.answered
        starts = blocks.feed(data)
        if blocks.block_bytes > HPACK_EXPANSION * self.limits.header_bytes:
            self._go_away(h2.errors.ErrorCodes.ENHANCE_YOUR_CALM, "header block too big")
            return
        if not self._count_answers(blocks.answered - answered):
            return
        if self._backlog:
            # a burst before these bytes waits for its turn: they queue behind it
            self._backlog_starts += [len(self._backlog) + start for start in starts]
            self._backlog += data
            return
        self._hand_on(data, starts)

    def _hand_on(self, data: bytes, starts: list[int]) -> None:
        """Give `h2` one header block (one new stream) per call, with the frames after it up to
        the next one (a RST_STREAM that follows its HEADERS in a read stays with it, so the
        stream is never handed on), so that a stream over the limit is refused and closed
        before `h2` counts its open streams again (see HeaderBlockWatch); and at most
        `BLOCKS_PER_TURN` of them per reactor turn: the rest waits, with reading paused, for
        the next turn (`_hand_on_backlog`)."""
        start = 0
        for n, end in enumerate([*starts, len(data)]):
            if n == BLOCKS_PER_TURN and end < len(data):
                self._backlog = data[start:]
                self._backlog_starts = [e - start for e in starts[n:]]
                transport: Any = self.transport
                transport.pauseProducing()
                self._backlog_call = self._reactor.callLater(0, self._hand_on_backlog)
                break
            if end > start:
                super().dataReceived(data[start:end])
                if not self._stillProducing:
                    return
            start = end
        self._after_read()

    def _hand_on_backlog(self) -> None:
        self._backlog_call = None
        data, starts = self._backlog, self._backlog_starts
        self._backlog, self._backlog_starts = b"", []
        self._hand_on(data, starts)
        if not self._backlog and self._stillProducing:
            transport: Any = self.transport
            transport.resumeProducing()

    def _after_read(self) -> None:
        """The header block deadline, and a new INITIAL_WINDOW_SIZE (dataReceived)."""
        if self._blocks.pending:
            if self._block_deadline is None:
                self._block_deadline = self._reactor.callLater(self.limits.header_timeout,
                                                               self._block_too_slow)
        elif self._block_deadline is not None:
            self._block_deadline.cancel()
            self._block_deadline = None
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

    # -- requests arriving -------------------------------------------------------------------

    def _requestReceived(self, event: Any) -> None:
        """A request head: checked against the limits before Twisted makes it a request."""
        stream_id = event.stream_id
        if not self._stillProducing or self._stream_closed(stream_id):
            return  # after our GOAWAY; or reset in this same read: nobody will read an answer
        if len(self.streams) >= self.limits.h2_streams:
            self.conn.reset_stream(stream_id, h2.errors.ErrorCodes.REFUSED_STREAM)
            self._count_answers(1)
            return
        headers = event.headers
        if sum(1 for name, _ in headers if not name.startswith(b":")) > self.limits.header_count:
            self._refuse(stream_id, b"431")
            return
        super()._requestReceived(event)
        if event.stream_ended is not None:
            return  # no body
        stream = self.streams[stream_id]
        length = stream._request.requestHeaders.getRawHeaders(b"content-length", [b"0"])[0]
        announced = int(length) if length.isdigit() else 0
        if self.routes is not None and not self.routes.takes_body(
                stream._request, stream.command, stream.path):
            if announced:
                self._hand_on_unread(stream_id)
            else:
                self._bodiless.add(stream_id)  # until its first body byte
        elif announced > self.limits.body_bytes:
            self._refuse_stream(stream_id, b"413")
        else:
            self._body_left[stream_id] = self.limits.body_bytes

    def _requestDataReceived(self, event: Any) -> None:
        """Body bytes: counted against the limit, or not read at all."""
        stream_id = event.stream_id
        if not self._stillProducing:
            return
        if (stream_id not in self.streams or stream_id in self._unread
                or self._stream_closed(stream_id)):
            # not handed on, or reset later in this same read (Twisted forgets it there)
            self._drop(event)
            return
        data = event.data or b""
        if stream_id in self._bodiless:
            if data:
                self._hand_on_unread(stream_id)
                self._drop(event)
                return
        else:
            left = self._body_left.get(stream_id)
            if left is not None:
                left -= len(data)
                if left < 0:
                    self._refuse_stream(stream_id, b"413")
                    self._drop(event)
                    return
                self._body_left[stream_id] = left
        super()._requestDataReceived(event)

    def _requestEnded(self, event: Any) -> None:
        stream_id = event.stream_id
        self._bodiless.discard(stream_id)
        self._body_left.pop(stream_id, None)
        if not self._stillProducing or stream_id not in self.streams:
            return
        if stream_id in self._unread:
            self._unread.discard(stream_id)  # handed on already
            return
        if self._stream_closed(stream_id):
            return  # reset later in this same read: Twisted forgets it when it gets there
        super()._requestEnded(event)

    def _requestAborted(self, event: Any) -> None:
        """A stream reset: forget it (if Twisted knows it), and count the client's resets."""
        if not self._stillProducing:
            return
        if event.stream_id in self.streams:
            super()._requestAborted(event)
        if event.remote_reset and self._stillProducing:
            now = self._reactor.seconds()
            resets = self._resets
            resets.append(now)
            while resets[0] <= now - H2_RESET_WINDOW:
                resets.popleft()
            if len(resets) > self.limits.h2_resets:
                self._go_away(h2.errors.ErrorCodes.ENHANCE_YOUR_CALM, "too many stream resets")

    # -- refusing ----------------------------------------------------------------------------

    def _count_answers(self, n: int) -> bool:
        """Count `n` frames the client made us answer; over `h2-control-frames` in the last
        `H2_CONTROL_WINDOW` seconds: GOAWAY ENHANCE_YOUR_CALM, and False."""
        if not n:
            return True
        now = self._reactor.seconds()
        answers = self._answers
        answers.append((now, n))
        self._answer_count += n
        while answers[0][0] <= now - H2_CONTROL_WINDOW:
            self._answer_count -= answers.popleft()[1]
        if self._answer_count > self.limits.h2_control_frames:
            self._go_away(h2.errors.ErrorCodes.ENHANCE_YOUR_CALM, "too many control frames")
            return False
        return True

    def _stream_closed(self, stream_id: int) -> bool:
        """`h2` has closed (or already forgotten) the stream: `h2` parses a whole read before
        Twisted handles its events, so a HEADERS and the RST_STREAM after it in the same read
        reach Twisted as a request for a stream that no longer exists."""
        stream = self.conn.streams.get(stream_id)
        return stream is None or bool(stream.closed)

    def _refuse(self, stream_id: int, status: bytes) -> None:
        """Answer `status` on a stream Twisted does not know, and stop it."""
        self.conn.send_headers(stream_id, [(b":status", status), (b"content-length", b"0")],
                               end_stream=True)
        if not self._stream_closed(stream_id):
            # the client may still be sending a body: ask it to stop (RFC 9113 §8.1)
            self.conn.reset_stream(stream_id, h2.errors.ErrorCodes.NO_ERROR)

    def _refuse_stream(self, stream_id: int, status: bytes) -> None:
        """`_refuse` for a stream whose request Twisted holds but has not handed on yet."""
        self._refuse(stream_id, status)
        self.streams[stream_id].connectionLost(Failure(ConnectionLost("request refused")))
        self._requestDone(stream_id)

    def _hand_on_unread(self, stream_id: int) -> None:
        """The request goes to the site now, as if it had no body; its body is dropped and the
        stream reset once the answer is complete (see `_requestDone`)."""
        self._bodiless.discard(stream_id)
        self._unread.add(stream_id)
        self.streams[stream_id].requestComplete()

    def _drop(self, event: Any) -> None:
        """Body bytes nobody reads. They still count against the connection's flow-control
        window, which is handed back; the stream's own window is not, so a client still sending
        on an open stream stops once that window is used up."""
        size = event.flow_controlled_length or 0
        if not size:
            return
        if self._stream_closed(event.stream_id):
            self.conn.acknowledge_received_data(size, event.stream_id)  # only the connection's
        else:
            self.conn.increment_flow_control_window(size)

    def _block_too_slow(self) -> None:
        self._block_deadline = None
        self._go_away(h2.errors.ErrorCodes.ENHANCE_YOUR_CALM, "request head too slow")

    def _go_away(self, code: h2.errors.ErrorCodes, why: str) -> None:
        """GOAWAY with `code`, then close: streams end now, timers stay (as Twisted's timeout
        does), so a peer that does not read the GOAWAY is still timed out."""
        if not self._stillProducing:
            return
        self.conn.close_connection(error_code=code)
        transport: Any = self.transport
        transport.write(self.conn.data_to_send())
        self._gone = True
        if ITCPTransport.providedBy(transport):
            # A lingering close: closing a socket with unread input sends RST, and a peer that
            # receives RST drops what it had not read yet, our GOAWAY among it. So close our
            # side only, read and drop what still comes, and close for good a little later.
            transport.loseWriteConnection()
            self._reactor.callLater(LINGER_SECONDS, transport.loseConnection)
        else:
            transport.loseConnection()
        self.connectionLost(Failure(ConnectionLost(why)), _cancelTimeouts=False)

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
        self._queued.pop(streamID, None)
        self._body_left.pop(streamID, None)
        self._bodiless.discard(streamID)
        self._unread.discard(streamID)
        super()._requestDone(streamID)
        if self._stillProducing and not self._stream_closed(streamID):
            # Answered before the client finished sending (a body not read): ask it to stop,
            # without error (RFC 9113 §8.1). The next send turn writes the RST_STREAM.
            self.conn.reset_stream(streamID, h2.errors.ErrorCodes.NO_ERROR)
            self._wake()

    def connectionLost(self, reason: Failure = connectionDone,
                       _cancelTimeouts: bool = True) -> None:
        super().connectionLost(reason, _cancelTimeouts=_cancelTimeouts)
        if self._send_call is not None and self._send_call.active():
            self._send_call.cancel()
        self._send_call = None
        if self._block_deadline is not None and self._block_deadline.active():
            self._block_deadline.cancel()
        self._block_deadline = None
        if self._backlog_call is not None and self._backlog_call.active():
            self._backlog_call.cancel()
        self._backlog_call = None
        self._backlog = b""


def h2_connection(site: Any) -> BatchingH2Connection:
    """A connection set up as Twisted's ALPN switch sets one up, on the site's reactor, with the
    http binding's limits and routes when the site is its `HttpSite` (any Twisted Site works)."""
    h2 = BatchingH2Connection(site.reactor, getattr(site, "limits", None),
                              getattr(site, "root", None))
    # Twisted's attributes for these are untyped (set by its factories), hence Any
    wired: Any = h2
    wired.site = site
    wired.factory = site
    wired.requestFactory = site.requestFactory
    wired.timeOut = site.timeOut
    wired.callLater = site.reactor.callLater
    return h2


class SwitchingChannelProtocol(http._GenericHTTPChannelProtocol):
    """Twisted's HTTP/1.1-or-HTTP/2 proxy protocol, switching to `BatchingH2Connection`.

    Twisted's switch builds the module-global `H2Connection`; this one makes the same moves
    (release the transport's producer slot, stop the HTTP/1.1 timeout, connect the HTTP/2
    connection, register it as the transport's producer) with our class, before the base class
    sees the data and finds the protocol already decided.
    """

    def dataReceived(self, data: bytes) -> None:
        if self._negotiatedProtocol is None:
            old: Any = self._channel
            if getattr(old.transport, "negotiatedProtocol", None) == b"h2":
                network_producer = old._networkProducer
                network_producer.unregisterProducer()
                old.setTimeout(None)
                h2: Any = h2_connection(self._site)
                h2.requestFactory = self._requestFactory
                h2.factory = self._factory
                h2.timeOut = self._timeOut
                if self._callLater is not None:
                    h2.callLater = self._callLater
                self._channel = h2
                h2.makeConnection(old.transport)
                network_producer.registerProducer(h2, True)
                self._negotiatedProtocol = b"h2"  # type: ignore[assignment]
        super().dataReceived(data)
