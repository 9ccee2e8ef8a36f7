"""One upstream event stream shared by every stream of the sse client that asks for its URL.

`Feed` holds ONE upstream connection for a URL however many browsers follow it, as the Kafka path
holds one consumer: events are read once (`reader.EventReader`), kept in a bounded `Ring`, and
written to each subscriber - the same bytes object to all of them, so the sse server frames it
once per batch.

Upstream trouble never reaches the browsers as an error: a refused connection, a status other
than 200, a response that is not `text/event-stream`, a line over 1 MiB, bytes that are not
UTF-8, silence longer than `idle_timeout` (the upstream's keepalives count), or the end of the
response are each one event line and a new attempt after a delay - the upstream's `retry:` (else
the binding's `retry`), doubled after each attempt that brought no event, up to `max_backoff`.
The new request carries `Last-Event-ID`: the id of the last event read, so nothing is lost or
repeated across the gap when the upstream honours it (ssekd and Zilla do).

Each subscriber is a cursor into the ring. At the tail it is written to as events arrive; one
whose client reads slowly is paused by the sse server (backpressure) and only its cursor stays
behind - nothing is buffered for it here. When it resumes it catches up from the ring; if the ring
has moved past its cursor meanwhile, its stream is ended and the browser reconnects with its last
id, which resumes from the ring (or, when that id is older than the ring, from the ring's start
with a comment saying events may be missing). A stream without an id starts at the ring's start,
as a Kafka stream starts at what the cache holds.

When the sse client checks the events of the URL (`options.requests`), an `content.EventGate`
stands between the reader and the ring: an event it refuses never enters the ring.

A feed whose last subscriber left keeps its connection and ring for `linger` seconds, so a page
reload resumes from the ring, then closes.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from twisted.internet.defer import CancelledError
from twisted.internet.protocol import Protocol
from twisted.python.failure import Failure
from twisted.web.client import ResponseDone

from ssekd.bindings.http.roles import HttpClientBinding
from ssekd.bindings.sse.content import EventContent, EventGate
from ssekd.bindings.sse.reader import Event, EventReader, Retry, UpstreamError
from ssekd.bindings.sse.wire import comment, retry_field
from ssekd.spi.stream import EventSink
from ssekd.telemetry.redact import redact_uri

CONNECTED = "BINDING_SSE_UPSTREAM_CONNECTED"
FAILED = "BINDING_SSE_UPSTREAM_FAILED"


@dataclass(frozen=True)
class FeedSettings:
    """How a feed reads its upstream and what it keeps (the sse client's options)."""

    #: milliseconds before reconnecting when the upstream sent no `retry:`
    retry: int = 2000
    #: longest wait between attempts, in seconds
    max_backoff: float = 30.0
    #: seconds without a byte from the upstream before it is given up as stalled
    idle_timeout: float = 60.0
    #: events kept for resuming, and their bytes at most
    history: int = 1000
    history_bytes: int = 16 * 1024 * 1024
    #: seconds a feed without subscribers stays open
    linger: float = 30.0


@dataclass(frozen=True)
class Entry:
    """An event in the ring: its position, the last event id as of it, its bytes."""

    seq: int
    last_id: str | None
    data: bytes


class Ring:
    """The last `max_events` events (and at most `max_bytes` of them), by position; the newest
    position of each last-event id, to find where a reconnecting browser left off."""

    def __init__(self, max_events: int, max_bytes: int) -> None:
        self.max_events = max_events
        self.max_bytes = max_bytes
        self.entries: deque[Entry] = deque()
        self.next_seq = 0
        self.bytes = 0
        self._by_id: dict[str, int] = {}

    @property
    def first_seq(self) -> int:
        return self.entries[0].seq if self.entries else self.next_seq

    def append(self, last_id: str | None, data: bytes) -> Entry:
        entry = Entry(self.next_seq, last_id, data)
        self.next_seq += 1
        self.entries.append(entry)
        self.bytes += len(data)
        if last_id is not None:
            self._by_id[last_id] = entry.seq
        while self.entries and (len(self.entries) > self.max_events
                                or (self.bytes > self.max_bytes and len(self.entries) > 1)):
            old = self.entries.popleft()
            self.bytes -= len(old.data)
            if old.last_id is not None and self._by_id.get(old.last_id) == old.seq:
                del self._by_id[old.last_id]
        return entry

    def after(self, last_id: str) -> int | None:
        """The position just after the newest event whose last id is `last_id`, if held."""
        seq = self._by_id.get(last_id)
        return None if seq is None else seq + 1

    def get(self, seq: int) -> Entry:
        return self.entries[seq - self.first_seq]


class Subscriber:
    """One stream following a feed: the `StreamHandle` the sse server drives."""

    __slots__ = ("closed", "feed", "next_seq", "paused", "sink")

    def __init__(self, feed: Feed, sink: EventSink, next_seq: int) -> None:
        self.feed = feed
        self.sink = sink
        self.next_seq = next_seq
        self.paused = False
        self.closed = False

    def pause(self) -> None:
        self.paused = True

    def resume(self) -> None:
        self.paused = False
        self.feed.catch_up(self)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.feed.remove(self)


class _Body(Protocol):
    """Receives one upstream response body for its feed; `attempt` tells a stale one apart."""

    def __init__(self, feed: Feed, attempt: int) -> None:
        self.feed = feed
        self.attempt = attempt

    def stop(self) -> None:
        """Stop reading: Agent's body transport drops the connection."""
        transport: Any = self.transport
        if transport is not None:
            transport.stopProducing()

    def dataReceived(self, data: bytes) -> None:
        self.feed.body_data(self.attempt, data)

    def connectionLost(self, reason: Failure = ResponseDone()) -> None:  # type: ignore[assignment]
        self.feed.body_lost(self.attempt, reason)


class Feed:
    """One upstream URL, its connection, its ring and its subscribers (module docstring)."""

    def __init__(self, http: HttpClientBinding, target: str, clock: Any,
                 settings: FeedSettings, emit: Callable[[str, str], None],
                 on_closed: Callable[[Feed], None], last_id: str | None = None,
                 content: EventContent | None = None) -> None:
        self.http = http
        self.target = target
        self.url = http.origin + target
        #: The URL as events show it (`ssekd.telemetry.redact`): no token, whatever the route
        #: passes on.
        self.logged_url = http.origin + redact_uri(target)
        self.clock = clock
        self.settings = settings
        self.emit = emit
        self.on_closed = on_closed
        self.ring = Ring(settings.history, settings.history_bytes)
        self.subscribers: dict[Subscriber, None] = {}
        #: the last event id read (sent upstream as Last-Event-ID on reconnect)
        self.last_id = last_id
        #: `retry:` from the upstream (ms), sent on to every stream
        self.retry: int | None = None
        #: numbers the attempts (each one request); a report from an older one is stale
        self.attempts = 0
        self.failures = 0
        self.closed = False
        self._request: Any = None  # the Deferred of the request in flight
        self._body: _Body | None = None  # the response being read
        self._reader = EventReader()
        self._events_this_attempt = 0
        self._timer: Any = None  # idle watchdog, or the reconnect delay
        self._linger: Any = None
        #: when the last subscriber left (the clock's seconds), for choosing a feed to close
        self.left_at = 0.0
        #: checks each event before the ring takes it, when the client checks this URL's events
        self.gate = None if content is None else EventGate(
            content, clock, emit, self._publish, self._skipped, self.logged_url,
            settings.history)

    # -- subscribers -----------------------------------------------------------------------

    def subscribe(self, sink: EventSink, last_id: str | None, first: bool) -> Subscriber:
        """A new stream; `first`: the feed was created for it (and asked upstream from its id)."""
        self._cancel_linger()
        ring = self.ring
        start = ring.first_seq
        note = None
        if last_id is not None and not first:
            after = ring.after(last_id)
            if after is not None:
                start = after
            else:
                note = (f"last event id {last_id[:80]} is not among the {len(ring.entries)} "
                        f"events this relay holds; events before the oldest held may be missing")
        elif first:
            start = ring.next_seq
        sub = Subscriber(self, sink, start)
        self.subscribers[sub] = None
        if self.retry is not None:
            sink.write(retry_field(self.retry))
        if note is not None:
            sink.write(comment(note))
        self.catch_up(sub)
        return sub

    def remove(self, sub: Subscriber) -> None:
        self.subscribers.pop(sub, None)
        if not self.subscribers and not self.closed:
            self.left_at = self.clock.seconds()
            self._cancel_linger()
            self._linger = self.clock.callLater(self.settings.linger, self.close)

    def catch_up(self, sub: Subscriber) -> None:
        """Write what `sub` has not had yet from the ring, until it is paused or at the tail."""
        ring = self.ring
        if sub.next_seq < ring.first_seq:
            # the ring moved past it while its client read nothing: the browser reconnects
            # with its last id and gets the rest from the ring, or a comment saying what is lost
            sub.closed = True
            self.remove(sub)
            sub.sink.write(comment("this stream fell behind the relay's history; reconnect"))
            sub.sink.end()
            return
        while not sub.paused and not sub.closed and sub.next_seq < ring.next_seq:
            entry = ring.get(sub.next_seq)
            sub.next_seq += 1
            sub.sink.write(entry.data)

    def _skipped(self, event_id: str | None) -> None:
        """An event the gate refused: its id still counts as read (module docstring)."""
        if event_id is not None:
            self.last_id = event_id

    def _publish(self, event: Event) -> None:
        if event.id is not None:
            self.last_id = event.id
        entry = self.ring.append(self.last_id, event.data)
        data = entry.data
        seq = entry.seq
        for sub in list(self.subscribers):
            if sub.next_seq == seq and not sub.paused:
                sub.next_seq = seq + 1
                sub.sink.write(data)
            elif sub.next_seq < self.ring.first_seq:
                self.catch_up(sub)  # ends it: it fell out of the ring while paused

    # -- the upstream connection ------------------------------------------------------------

    def start(self) -> None:
        self._connect()

    def _connect(self) -> None:
        self._timer = None
        if self.closed:
            return
        self.attempts += 1
        attempt = self.attempts
        self._reader = EventReader()
        self._events_this_attempt = 0
        headers = {"Accept": "text/event-stream", "Cache-Control": "no-cache"}
        if self.last_id:
            headers["Last-Event-ID"] = self.last_id
        self._arm_idle()
        try:
            d = self.http.get(self.target, headers)
        except Exception as e:  # a URL the client cannot send, say: still only this feed
            self._failed(attempt, f"{type(e).__name__}: {e}")
            return
        self._request = d
        d.addCallbacks(self._response, self._request_failed, callbackArgs=(attempt,),
                       errbackArgs=(attempt,))

    def _response(self, response: Any, attempt: int) -> None:
        self._request = None
        if attempt != self.attempts or self.closed:
            stale = _Body(self, -1)
            response.deliverBody(stale)
            stale.stop()
            return
        ctype = (response.headers.getRawHeaders(b"content-type") or [b""])[0]
        media = ctype.split(b";")[0].strip().lower()
        why = None
        if response.code != 200:
            why = f"status {response.code}"
        elif media != b"text/event-stream":
            why = f"content type {ctype[:80].decode('latin-1') or 'none'}, not text/event-stream"
        # the body's transport arrives with makeConnection, inside deliverBody
        body = _Body(self, attempt if why is None else -1)
        response.deliverBody(body)
        if why is not None:
            body.stop()
            self._failed(attempt, why)
            return
        self._body = body
        self.emit(CONNECTED, f"GET {self.logged_url}" + (
            f" from Last-Event-ID {self.last_id[:80]}" if self.last_id else ""))
        self._arm_idle()

    def _request_failed(self, reason: Failure, attempt: int) -> None:
        self._request = None
        if attempt != self.attempts or self.closed:
            return
        if reason.check(CancelledError):
            why = f"no response in {self.settings.idle_timeout:g} s"
        else:
            why = _describe(reason)
        self._failed(attempt, why)

    def body_data(self, attempt: int, data: bytes) -> None:
        if attempt != self.attempts or self.closed:
            return
        self._arm_idle()
        try:
            items = self._reader.feed(data)
        except UpstreamError as e:
            self._drop(attempt, str(e))
            return
        for item in items:
            if isinstance(item, Retry):
                self.retry = item.ms
                line = retry_field(item.ms)
                for sub in list(self.subscribers):
                    sub.sink.write(line)
            else:
                self._events_this_attempt += 1
                if self.gate is not None:
                    self.gate.event(item)
                else:
                    self._publish(item)

    def body_lost(self, attempt: int, reason: Failure) -> None:
        if attempt != self.attempts or self.closed:
            return
        why = "the upstream ended the stream" if reason.check(ResponseDone) \
            else _describe(reason)
        self._failed(attempt, why)

    def _drop(self, attempt: int, why: str) -> None:
        """Stop reading this response (its connection closes) and try again later."""
        body, self._body = self._body, None
        self._failed(attempt, why)  # first: the loss reported by stopProducing is then stale
        if body is not None:
            body.stop()

    def _failed(self, attempt: int, why: str) -> None:
        """Attempt `attempt` is over: say why and schedule the next one."""
        if attempt != self.attempts or self.closed:
            return
        self.attempts += 1  # whatever the old attempt still reports is stale from now on
        self._body = None
        self._cancel_timer()
        if self._events_this_attempt:
            self.failures = 0
        base = (self.retry if self.retry is not None else self.settings.retry) / 1000.0
        delay = min(self.settings.max_backoff, base * (2 ** self.failures))
        self.failures += 1
        self.emit(FAILED, f"GET {self.logged_url}: {why}; again in {delay:g} s")
        self._timer = self.clock.callLater(delay, self._connect)

    def _arm_idle(self) -> None:
        self._cancel_timer()
        self._timer = self.clock.callLater(self.settings.idle_timeout, self._idle, self.attempts)

    def _idle(self, attempt: int) -> None:
        self._timer = None
        if attempt != self.attempts or self.closed:
            return
        request = self._request
        if request is not None:
            self._request = None
            request.cancel()  # fails it with CancelledError: reported by _request_failed
            return
        self._drop(attempt, f"nothing from the upstream for {self.settings.idle_timeout:g} s")

    def _cancel_timer(self) -> None:
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = None

    def _cancel_linger(self) -> None:
        if self._linger is not None and self._linger.active():
            self._linger.cancel()
        self._linger = None

    def close(self) -> None:
        """Stop for good: the connection, the timers; subscribers left are ended."""
        if self.closed:
            return
        self.closed = True
        self._cancel_timer()
        self._cancel_linger()
        if self.gate is not None:
            self.gate.close()
        request, self._request = self._request, None
        body, self._body = self._body, None
        if request is not None:
            request.cancel()
        if body is not None:
            body.stop()
        for sub in list(self.subscribers):
            sub.closed = True
            sub.sink.end()
        self.subscribers.clear()
        self.on_closed(self)


def _describe(reason: Failure) -> str:
    """A failure in a few words for an event line (never a traceback)."""
    value = reason.value
    reasons = getattr(value, "reasons", None)  # twisted.web's ResponseFailed & co wrap others
    if reasons:
        value = getattr(reasons[0], "value", value)
    text = str(value) or type(value).__name__
    return f"{type(value).__name__}: {text}"[:300]
