"""The produce capability: a request becomes one Kafka record, answered once the broker has it.

The record: the body as its value (none - a tombstone - for a request without a body on a route
without `reply-to`), the route's `key` (`${params.x}`, `${idempotencyKey}`, an
identity), the request's headers as Kafka headers (`headers.forwarded`), the reply-to header when
the route has `reply-to`, the route's `overrides`, and last the correlation id
(`headers.correlation_id`). Then:

- without `reply-to`: `204` once the broker acknowledged the write;
- with `reply-to`, in sync: the reply on that topic carrying the same correlation id answers the
  request - its `:status`, its other headers, its value as the body; `504` when none comes
  within `max-wait` seconds (the write stands: the same request again gets the reply when it
  comes, without writing again);
- with `Prefer: respond-async` on a route with `async`: `202` with the `async` headers
  (`location` with `${correlationId}`) once acknowledged, unless the reply is already there;
  a `GET` of that location (the route's other `when`) answers the reply when it is there, else
  `202` again - after waiting up to `Prefer: wait=N` seconds (at most `max-wait`).

No acknowledgement within `ack-timeout` seconds: `503` with `Retry-After`, and the write is left
to finish (`replay.Replays`: the same request again waits for it rather than writing twice). A
write refused before it was sent (no broker reachable, `max-inflight-bytes` full) is `503` with
`Retry-After`; one librdkafka gave up: `503` when trying again may work, `413` for a record over
the broker's size limit, `404` for a topic the cluster does not have, else `400` (Zilla's answer
to a rejected write). A body the topic's write model refuses (a cache_client's
`topics[].value`, `ssekd.catalogs.writing`) is `400` with the reason, and nothing is written (Zilla
answers a bare `400`); while that model's schema is not resolved yet, `503` with `Retry-After`.
"""

from __future__ import annotations

import math
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from twisted.internet.defer import Deferred, TimeoutError
from twisted.python.failure import Failure
from twisted.web import http

from ssekd.bindings.http.roles import HttpContext
from ssekd.bindings.http_kafka.exchange import Exchange
from ssekd.bindings.http_kafka.headers import (
    HeaderCopy,
    IfMatchRefused,
    Prefer,
    correlation_id,
    forwarded,
    parse_if_match,
    parse_prefer,
    response_header,
    without_credentials,
)
from ssekd.bindings.http_kafka.locations import (
    CORRELATION,
    LocationSigner,
    LocationTemplate,
    param_names,
)
from ssekd.bindings.http_kafka.replay import Replays, State, Write
from ssekd.bindings.http_kafka.waits import KafkaExit, Replies, when_loaded
from ssekd.bindings.kafka.cache import SchemaUnavailable, TopicLimitReached
from ssekd.bindings.kafka.message import HEADERS, OFFSET, PARTITION, VALUE, Message, header
from ssekd.bindings.kafka.producer import Delivered, Record, WriteFailed, WriteRefused
from ssekd.bindings.kafka.topic_names import InternalTopics
from ssekd.bindings.kafka.topic_names import refusal as topic_refusal
from ssekd.bindings.kafka.write_models import RecordRefused, SchemaPending
from ssekd.daemon_secret import daemon_secret
from ssekd.patterns import Unresolvable, substitute
from ssekd.telemetry.events import EventLog

#: Characters an idempotency key may have, unless `idempotency.max-length` says otherwise.
DEFAULT_IDEMPOTENCY_MAX_LENGTH = 256
#: What an idempotency key is made of: visible ASCII (a UUID, a ULID, any token of RFC 9110).
_IDEMPOTENCY_KEY = re.compile(r"[!-~]+")
#: `Retry-After` when a topic's cache could not be read in time.
RETRY_AFTER_LOADING = 1.0


@dataclass(frozen=True)
class Settings:
    """The binding's options (`idempotency`, `correlation`, and ssekd's waits)."""

    idempotency_header: str = "idempotency-key"
    idempotency_max_length: int = DEFAULT_IDEMPOTENCY_MAX_LENGTH
    reply_to_header: str = "zilla:reply-to"
    correlation_header: str = "zilla:correlation-id"
    max_wait: float = 30.0
    ack_timeout: float = 10.0
    #: The cluster's own topics, which a topic taken from a request may not be.
    internal_topics: InternalTopics = field(default_factory=InternalTopics)


@dataclass(frozen=True)
class ProduceWith:
    """A produce route's `with`, compiled."""

    topic: str
    acks: str = "in_sync_replicas"
    key: str | None = None
    overrides: tuple[tuple[str, str], ...] = ()
    reply_to: str | None = None
    #: `async` response headers (name, template)
    async_headers: tuple[tuple[str, str], ...] = ()
    #: The Kafka header carrying the correlation id (the route's `correlation-id`, else the
    #: binding's `correlation.headers.correlation-id`).
    correlation_header: str = "zilla:correlation-id"
    #: The `async` values with `${correlationId}`, which a GET path is matched against.
    locations: tuple[LocationTemplate, ...] = field(default=())
    #: The guards of the route (`guarded`): a location binds their identities.
    guards: tuple[str, ...] = ()
    #: Which request headers the record carries (Zilla's rule unless `request-headers` says).
    headers: HeaderCopy = field(default_factory=lambda: HeaderCopy(None))

    def location_of(self, path: str) -> tuple[LocationTemplate, str, dict[str, str]] | None:
        """The location a GET path is, with its token and params, else None."""
        for template in self.locations:
            found = template.match(path)
            if found is not None:
                return template, *found
        return None

    def redact(self, uri: str) -> str:
        """`uri` with the token of a location of this route hidden (locations.py)."""
        for template in self.locations:
            uri = template.redact(uri)
        return uri


def topic_refused(topic: str, template: str, settings: Settings) -> str | None:
    """Why `topic`, made from a route's `topic` template, may not be written or read, else
    None: the rule sse-kafka applies too (`topic_names.refusal`; a name the request supplied
    may not be an internal topic)."""
    return topic_refusal(topic, "${" in template, settings.internal_topics)


class Producing:
    """Answers the requests of produce routes (one per http-kafka binding)."""

    def __init__(self, binding: str, settings: Settings, clock: Any, events: EventLog,
                 replays: Replays, signer: LocationSigner | None = None) -> None:
        self.binding = binding
        self.settings = settings
        self.clock = clock
        self.events = events
        self.replays = replays
        #: Makes and checks the tokens of async locations.
        self.signer = signer or LocationSigner(binding, daemon_secret())
        #: (reply topic, correlation header) -> its replies (made again for a new cache of the
        #: topic: one dropped while idle, then followed again)
        self._replies: dict[tuple[str, str], Replies] = {}

    # -- the request -------------------------------------------------------------------------

    def handle(self, exchange: Exchange, ctx: HttpContext, w: ProduceWith, exit_: KafkaExit,
               params: Mapping[str, str], headers: Mapping[str, str]) -> None:
        request: Any = exchange.request
        path = request.path.decode("latin-1")
        if request.method == b"GET" and w.locations:
            location = w.location_of(path)
            if location is not None:
                template, token, location_params = location
                correlation = self.signer.correlation(token, template.names, location_params,
                                                      _identities(ctx, w))
                if correlation is None:
                    self.events.emit(self.binding, "BINDING_HTTP_KAFKA_LOCATION_REFUSED",
                                     f"{w.redact(path)}: not a location issued for this path"
                                     f"{' and identity' if w.guards else ''}")
                    exchange.answer(http.NOT_FOUND)
                    return
                self._correlate(exchange, w, exit_, correlation,
                                parse_prefer(request.requestHeaders.getRawHeaders(b"prefer")),
                                params, ctx)
                return
        prefer = parse_prefer(request.requestHeaders.getRawHeaders(b"prefer"))
        if_match: str | None = None
        raw_if_match = request.getHeader(b"if-match")
        if raw_if_match is not None:
            try:
                if_match = parse_if_match(raw_if_match.decode("latin-1"))
            except IfMatchRefused as e:
                self.events.emit(self.binding, "BINDING_HTTP_KAFKA_IF_MATCH_REFUSED",
                                 f"{request.method.decode('latin-1')} {path}: {e}")
                exchange.text(http.BAD_REQUEST, str(e))
                return
        supplied = request.getHeader(self.settings.idempotency_header.encode("latin-1"))
        if supplied and not self._idempotency_key_ok(supplied):
            self.events.emit(self.binding, "BINDING_HTTP_KAFKA_IDEMPOTENCY_KEY_REFUSED",
                             f"{request.method.decode('latin-1')} {path}: {len(supplied)} "
                             f"bytes")
            exchange.text(http.BAD_REQUEST, f"{self.settings.idempotency_header} must be 1 to "
                          f"{self.settings.idempotency_max_length} characters of visible "
                          f"ASCII")
            return
        idempotency = supplied.decode("latin-1") if supplied else str(uuid.uuid4())
        identities = ctx.identities()
        values = {"idempotencyKey": idempotency}
        try:
            topic = substitute(w.topic, params, identities)
            key = None if w.key is None else \
                substitute(w.key, params, identities, values).encode("utf-8")
            overrides = [(n, substitute(v, params, identities, values).encode("utf-8"))
                         for n, v in w.overrides]
        except Unresolvable as e:
            self.events.emit(self.binding, "BINDING_HTTP_KAFKA_NO_ROUTE", f"{path}: {e}")
            exchange.answer(http.NOT_FOUND)
            return
        refused = topic_refused(topic, w.topic, self.settings)
        if refused is not None:
            self.events.emit(self.binding, "BINDING_HTTP_KAFKA_NO_ROUTE", f"{path}: {refused}")
            exchange.answer(http.NOT_FOUND)
            return
        pseudo = [(":method", headers[":method"]), (":scheme", headers[":scheme"]),
                  (":authority", headers[":authority"]),
                  (":path", without_credentials(headers[":path"], ctx.credential_query))]
        kafka_headers = forwarded(request, pseudo, if_match, w.headers, ctx.credential_headers)
        if w.reply_to is not None:
            kafka_headers.append((self.settings.reply_to_header, w.reply_to.encode("utf-8")))
        kafka_headers += overrides
        body = request.content.read() if request.content is not None else b""
        correlation = correlation_id(idempotency, key, kafka_headers, body)
        if w.reply_to is not None:
            # Zilla writes the correlation id only where a reply is to carry it back; without
            # one it still tells a repeat from a new write (`replay.Replays`)
            kafka_headers.append((w.correlation_header, correlation.encode("utf-8")))
        # Without a reply, a request without a body (a DELETE) is a tombstone, as in Zilla's
        # scripts (`data.null`): it deletes its key from a compacted topic. With a reply the
        # record is the command a service reads, and its value stays empty.
        value = body if body or w.reply_to is not None else None
        record = Record(topic, key, value, tuple(kafka_headers))
        respond_async = prefer.respond_async and bool(w.async_headers)
        began = self.clock.seconds()
        if w.reply_to is None:
            self._write(exchange, w, exit_, record, correlation, began, None, False, params, ctx)
            return
        # the reply topic is read before writing: a reply already there is a repeat's answer,
        # and once loaded the cache cannot miss the reply to come
        try:
            replies = self._replies_of(exit_, w.reply_to, w.correlation_header)
        except (TopicLimitReached, SchemaUnavailable) as e:
            self._unavailable(exchange, f"reply topic {w.reply_to}: {e}", RETRY_AFTER_LOADING)
            return
        loaded = exchange.hold(when_loaded(replies.cache, self.clock, self.settings.max_wait))

        def then(ok: bool | None) -> None:
            if not ok:
                self._unavailable(exchange, f"reply topic {w.reply_to} is not loaded yet",
                                  RETRY_AFTER_LOADING)
                return
            self._write(exchange, w, exit_, record, correlation, began, replies,
                        respond_async, params, ctx)

        loaded.addCallback(then).addErrback(exchange.failed)

    def _idempotency_key_ok(self, key: bytes) -> bool:
        """Whether a client's idempotency key may be used: what a remembered write costs is
        bounded by its length (`replay.Replays`), and it goes into Kafka keys and locations."""
        return len(key) <= self.settings.idempotency_max_length and \
            _IDEMPOTENCY_KEY.fullmatch(key.decode("latin-1")) is not None

    def _write(self, exchange: Exchange, w: ProduceWith, exit_: KafkaExit, record: Record,
               correlation: str, began: float, replies: Replies | None, respond_async: bool,
               params: Mapping[str, str], ctx: HttpContext) -> None:
        """Write `record` unless this correlation id was written to its topic already, then
        answer. The table knows a write by topic and correlation id: the id does not always
        name the topic (without a reply it hashes `content-type` alone, as Zilla's does, not
        `:path`), and the same key and body sent to two topics are two writes."""
        write = self.replays.get(_replay_key(record.topic, correlation))
        if write is None and replies is not None and replies.find(correlation) is not None:
            self._replayed(record.topic, correlation, "its reply is on the reply topic")
            self._after_ack(exchange, w, correlation, began, replies, respond_async, params,
                            ctx)
            return
        if write is None or write.state is State.FAILED:
            write = self._produce(exit_, record, w.acks, correlation)
        else:
            self._replayed(record.topic, correlation, f"the first write is {write.state.value}")
        acked = exchange.hold(self._within(write.acknowledged(), self.settings.ack_timeout))

        def delivered(_: Delivered) -> None:
            if replies is None:
                exchange.answer(http.NO_CONTENT)
                return
            self._after_ack(exchange, w, correlation, began, replies, respond_async, params,
                            ctx)

        def not_delivered(failure: Failure) -> None:
            if failure.check(TimeoutError):
                self.events.emit(self.binding, "BINDING_HTTP_KAFKA_ACK_TIMEOUT",
                                 f"{record.topic} {correlation}: no acknowledgement within "
                                 f"{self.settings.ack_timeout:g} s; the write may still happen")
                self._unavailable(exchange, "the broker has not acknowledged the write yet; "
                                  "send the same request again (same idempotency key) to "
                                  "learn its outcome", self.settings.ack_timeout)
                return
            if failure.check(RecordRefused):
                self.events.emit(self.binding, "BINDING_HTTP_KAFKA_RECORD_REFUSED",
                                 f"{record.topic}: {failure.value}")
                exchange.text(http.BAD_REQUEST, f"refused by the topic's model: "
                                                f"{failure.value}")
                return
            if failure.check(SchemaPending):
                pending: Any = failure.value
                self._unavailable(exchange, str(pending), pending.retry_after)
                return
            if failure.check(WriteRefused):
                refused: Any = failure.value
                self._unavailable(exchange, str(refused), refused.retry_after)
                return
            if failure.check(WriteFailed):
                self._answer_failed(exchange, failure.value)  # type: ignore[arg-type]
                return
            exchange.failed(failure)

        acked.addCallbacks(delivered, not_delivered).addErrback(exchange.failed)

    def _produce(self, exit_: KafkaExit, record: Record, acks: str, correlation: str) -> Write:
        entry = _replay_key(record.topic, correlation)
        write = self.replays.begin(entry)
        d = exit_.produce(record, acks)

        def settle(outcome: Delivered | Failure) -> None:
            self.replays.settle(entry, write, outcome)

        d.addBoth(settle)
        return write

    def _within(self, d: Deferred[Delivered], timeout: float) -> Deferred[Delivered]:
        """`d`'s outcome, or `TimeoutError` after `timeout` seconds - without cancelling the
        write itself (it goes on; `Replays` keeps it for a repeat)."""
        out: Deferred[Delivered] = Deferred()

        def expired() -> None:
            if not out.called:
                out.errback(Failure(TimeoutError()))

        timer = self.clock.callLater(timeout, expired)

        def relay(result: Delivered | Failure) -> None:
            if timer.active():
                timer.cancel()
            if not out.called:
                if isinstance(result, Failure):
                    out.errback(result)
                else:
                    out.callback(result)

        d.addBoth(relay)
        return out

    def _after_ack(self, exchange: Exchange, w: ProduceWith, correlation: str, began: float,
                   replies: Replies, respond_async: bool, params: Mapping[str, str],
                   ctx: HttpContext) -> None:
        if respond_async:
            held = replies.find(correlation)
            if held is not None:
                self._answer_reply(exchange, held, w.correlation_header)
            else:
                exchange.answer(http.ACCEPTED, self._async_headers(w, params, correlation, ctx))
            return
        left = max(0.0, self.settings.max_wait - (self.clock.seconds() - began))
        waited = exchange.hold(replies.wait(correlation, left))

        def replied(reply: Message | None) -> None:
            if reply is None:
                self.events.emit(self.binding, "BINDING_HTTP_KAFKA_REPLY_TIMEOUT",
                                 f"{w.reply_to} {correlation}: no reply within "
                                 f"{self.settings.max_wait:g} s")
                exchange.text(http.GATEWAY_TIMEOUT,
                              "written, but no reply came in time; send the same request again "
                              "(same idempotency key) for the reply")
                return
            self._answer_reply(exchange, reply, w.correlation_header)

        waited.addCallback(replied).addErrback(exchange.failed)

    # -- GET of an async location ------------------------------------------------------------

    def _correlate(self, exchange: Exchange, w: ProduceWith, exit_: KafkaExit, correlation: str,
                   prefer: Prefer, params: Mapping[str, str], ctx: HttpContext) -> None:
        assert w.reply_to is not None  # `async` needs `reply-to` (checked when built)
        try:
            replies = self._replies_of(exit_, w.reply_to, w.correlation_header)
        except (TopicLimitReached, SchemaUnavailable) as e:
            self._unavailable(exchange, f"reply topic {w.reply_to}: {e}", RETRY_AFTER_LOADING,
                              w)
            return
        wait = min(prefer.wait or 0.0, self.settings.max_wait)
        began = self.clock.seconds()
        loaded = exchange.hold(when_loaded(replies.cache, self.clock, self.settings.max_wait))

        def then(ok: bool | None) -> None:
            if not ok:
                self._unavailable(exchange, f"reply topic {w.reply_to} is not loaded yet",
                                  RETRY_AFTER_LOADING, w)
                return
            left = max(0.0, wait - (self.clock.seconds() - began))
            waited = exchange.hold(replies.wait(correlation, left))
            waited.addCallback(answer).addErrback(exchange.failed)

        def answer(reply: Message | None) -> None:
            if reply is None:
                exchange.answer(http.ACCEPTED, self._async_headers(w, params, correlation, ctx))
            else:
                self._answer_reply(exchange, reply, w.correlation_header)

        loaded.addCallback(then).addErrback(exchange.failed)

    # -- answers -------------------------------------------------------------------------------

    def _async_headers(self, w: ProduceWith, params: Mapping[str, str], correlation: str,
                       ctx: HttpContext) -> list[tuple[str, str]]:
        """The route's `async` headers (`location`), with the request's params and, for
        `${correlationId}`, the location token of this correlation id, these params and the
        requester (locations.py); a GET of the location gets them again with its `202`. A
        value whose references the request cannot fill is left out."""
        identities = _identities(ctx, w)
        out = []
        for name, template in w.async_headers:
            values = {} if CORRELATION not in template else {
                "correlationId": self.signer.token(correlation, param_names(template), params,
                                                   identities)}
            try:
                out.append((name, substitute(template, params, None, values)))
            except Unresolvable:
                continue
        return out

    def _answer_reply(self, exchange: Exchange, reply: Message, correlation_header: str) -> None:
        raw_status = header(reply, ":status")
        # a reply without one is 200, as Zilla answers it (its asyncapi.http.kafka.proxy
        # example's replies, written with kafkacat, carry none); a malformed one is the
        # service's mistake, not a status to guess
        status = 200 if raw_status is None else int(raw_status) \
            if raw_status.isdigit() and len(raw_status) == 3 else 0
        if not 200 <= status <= 599:
            self.events.emit(self.binding, "BINDING_HTTP_KAFKA_REPLY_INVALID",
                             f"partition {reply[PARTITION]} offset {reply[OFFSET]}: :status "
                             f"{raw_status!r} is not an HTTP status")
            exchange.text(http.BAD_GATEWAY, "the reply carried no valid :status")
            return
        headers: list[tuple[str, bytes]] = []
        for name, value in reply[HEADERS]:
            if name.startswith(":") or name == correlation_header or value is None:
                continue
            if response_header(name, value):
                headers.append((name, value))
        exchange.answer(status, headers, reply[VALUE] or b"")

    def _answer_failed(self, exchange: Exchange, failed: WriteFailed) -> None:
        if failed.retriable:
            self._unavailable(exchange, f"the broker did not take the write: {failed}",
                              self.settings.ack_timeout)
        elif failed.too_large:
            exchange.text(http.REQUEST_ENTITY_TOO_LARGE, f"the broker refused the record: "
                                                         f"{failed}")
        elif failed.unknown_topic:
            exchange.text(http.NOT_FOUND, "no such topic")
        else:
            exchange.text(http.BAD_REQUEST, f"the broker refused the record: {failed}")

    def _unavailable(self, exchange: Exchange, reason: str, retry_after: float,
                     w: ProduceWith | None = None) -> None:
        path = exchange.request.path.decode("latin-1")
        self.events.emit(self.binding, "BINDING_HTTP_KAFKA_UNAVAILABLE",
                         f"{exchange.request.method.decode('latin-1')} "
                         f"{path if w is None else w.redact(path)}: {reason}")
        exchange.text(http.SERVICE_UNAVAILABLE, reason,
                      [("retry-after", str(max(1, math.ceil(retry_after))))])

    def _replayed(self, topic: str, correlation: str, why: str) -> None:
        self.events.emit(self.binding, "BINDING_HTTP_KAFKA_REPLAYED",
                         f"{topic} {correlation}: not written again ({why})")

    def _replies_of(self, exit_: KafkaExit, topic: str, header: str) -> Replies:
        cache = exit_.topic(topic)
        key = (topic, header)
        replies = self._replies.get(key)
        if replies is None or replies.cache is not cache:
            replies = self._replies[key] = Replies(cache, header, self.clock)
        return replies


def _identities(ctx: HttpContext, w: ProduceWith) -> dict[str, str]:
    """The identities a location binds: those of the route's guards."""
    found = ctx.identities()
    return {g: found.get(g, "") for g in w.guards}


def _replay_key(topic: str, correlation: str) -> str:
    """What `replay.Replays` knows a write by (a topic name has no `/`)."""
    return f"{topic}/{correlation}"
