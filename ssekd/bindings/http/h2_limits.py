"""HTTP/2 with the http binding's `Limits`: what one client may make the daemon do.

`LimitedH2Connection` is the connection the http binding serves HTTP/2 with: our
`BatchingH2Connection` (h2_sending.py, the data path) with these limits on top, where Twisted
applies none:

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
  read is never handed to the site (no render, no subscription);
* what a client has not taken: the connection holds at most `h2-unsent-bytes` (the data path
  pauses producers there) and a response written whole (no producer) that would take it past
  that, or the process past `process-unsent-bytes`, is refused when its headers go out: `503`
  with `Retry-After` and no body instead (the process's bound spares responses of at most
  `unsent.SMALL` bytes), and what is written to it is dropped; one that
  announced no length is cut with RST_STREAM ENHANCE_YOUR_CALM when a write would pass a bound
  (unsent.py says why).

And it bounds the work one connection can cause at a time: `h2` gets a read one header block
(one new stream) at a time, at most `BLOCKS_PER_TURN` per reactor turn, the rest waiting with
reading paused; a connection sent away reads at most `LINGER_BYTES` more.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import h2.errors
import h2.events
import h2.exceptions
import h2.settings
from twisted.internet.error import ConnectionLost
from twisted.internet.interfaces import IDelayedCall, ITCPTransport
from twisted.internet.protocol import connectionDone
from twisted.python.failure import Failure

from ssekd.bindings.http.channel import H2_CONTROL_WINDOW, H2_RESET_WINDOW, BodyRoutes, Limits
from ssekd.bindings.http.h2_sending import BatchingH2Connection
from ssekd.bindings.http.header_blocks import HeaderBlockWatch
from ssekd.bindings.http.unsent import SMALL, announced_length, refusal_headers, replaced_by_refusal

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



class LimitedH2Connection(BatchingH2Connection):
    """A `BatchingH2Connection` that holds a client to the http binding's `Limits` (module
    docstring)."""

    def __init__(self, reactor: Any = None, limits: Limits | None = None,
                 routes: BodyRoutes | None = None) -> None:
        super().__init__(reactor)
        self.limits = limits or Limits()
        self.unsent_limit = self.limits.h2_unsent_bytes
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
        #: Streams whose response was refused for what the client has not taken (a `503` went
        #: instead): what is written to them is dropped.
        self._refused: set[int] = set()

    # -- bytes arriving ----------------------------------------------------------------------

    def dataReceived(self, data: bytes) -> None:
        """Arms the header block deadline while a block is incomplete (`HeaderBlockWatch`),
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
        """The header block deadline: armed while a block is incomplete."""
        if self._blocks.pending:
            if self._block_deadline is None:
                self._block_deadline = self._reactor.callLater(self.limits.header_timeout,
                                                               self._block_too_slow)
        elif self._block_deadline is not None:
            self._block_deadline.cancel()
            self._block_deadline = None

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

    # -- responses the client would not take ------------------------------------------------

    def writeHeaders(self, version: bytes, code: bytes, reason: bytes,
                     headers: list[tuple[bytes, bytes]], streamID: int) -> None:
        """A response without a producer whose announced length would pass a bound goes out as
        a `503` (module docstring)."""
        stream = self.streams.get(streamID)
        if stream is not None and stream.producer is None \
                and stream._request.method != b"HEAD":
            size = announced_length(headers)
            if size and not self._room_for(size):
                self._refused.add(streamID)
                code, headers = b"503", refusal_headers(headers)
                replaced_by_refusal(stream._request)
        super().writeHeaders(version, code, reason, headers, streamID)

    def writeDataToStream(self, streamID: int, data: bytes) -> None:
        """Dropped for a refused response; a write without a producer that would pass a bound
        (its length was not announced) cuts the stream."""
        if self._refused and streamID in self._refused:
            return
        stream = self.streams.get(streamID)
        if stream is not None and stream.producer is None and data \
                and not self._room_for(len(data)):
            self.conn.reset_stream(streamID, h2.errors.ErrorCodes.ENHANCE_YOUR_CALM)
            self._requestDone(streamID)
            self._wake()  # the RST_STREAM goes with the next send
            return
        super().writeDataToStream(streamID, data)

    def _room_for(self, size: int) -> bool:
        """Whether a response written whole may queue `size` more bytes: within the
        connection's bound (or the only thing it holds) and, unless `SMALL`, the process's."""
        if self._unsent and self._unsent + size > self.unsent_limit:
            return False
        return size <= SMALL or self.whole.fits(size, self.limits.process_unsent_bytes)

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
        """`_refuse` for a stream whose request Twisted holds but has not handed on yet (its
        answered event too: `BodyRoutes.refused`)."""
        self._refuse(stream_id, status)
        if self.routes is not None:
            stream = self.streams[stream_id]
            self.routes.refused(stream._request, int(status[:3]), stream.command, stream.path,
                                b"HTTP/2")
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
        self._body_left.pop(streamID, None)
        self._bodiless.discard(streamID)
        self._unread.discard(streamID)
        self._refused.discard(streamID)
        super()._requestDone(streamID)
        if self._stillProducing and not self._stream_closed(streamID):
            # Answered before the client finished sending (a body not read): ask it to stop,
            # without error (RFC 9113 §8.1). The next send turn writes the RST_STREAM.
            self.conn.reset_stream(streamID, h2.errors.ErrorCodes.NO_ERROR)
            self._wake()

    def connectionLost(self, reason: Failure = connectionDone,
                       _cancelTimeouts: bool = True) -> None:
        super().connectionLost(reason, _cancelTimeouts=_cancelTimeouts)
        if self._block_deadline is not None and self._block_deadline.active():
            self._block_deadline.cancel()
        self._block_deadline = None
        if self._backlog_call is not None and self._backlog_call.active():
            self._backlog_call.cancel()
        self._backlog_call = None
        self._backlog = b""
