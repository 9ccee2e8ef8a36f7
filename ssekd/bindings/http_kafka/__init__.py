"""http-kafka binding (kind proxy): the write path, and reads of a topic's live values over HTTP
(docs/write-path.md).

Routes `when: [{method, path}]` with `with.capability`:

- `produce`: the request becomes a record of `topic` (`key`, `overrides`, `acks`), answered once
  the broker acknowledged it - `204`, or with `reply-to` the reply carrying the same correlation
  id, or with `Prefer: respond-async` and `async` a `202` with a `location` to poll
  (`produce.Producing`);
- `fetch`: the latest values of `topic` the route's `filters` take, from the cache the SSE
  streams use, as a JSON array (`merge`) or one value, with an `ETag`, `If-None-Match` and
  `Prefer: wait=N` (`fetch.Fetching`).

Options: Zilla's `idempotency.header` and `correlation.headers` (`reply-to`, `correlation-id`),
and ssekd's `max-wait`, `ack-timeout`, `idempotency.window` and `internal-topics` (the topics a
name taken from the request may not be: `ssekd.bindings.kafka.topic_names`, as for sse-kafka).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ssekd.bindings.http.roles import HttpBinding
from ssekd.bindings.http_kafka.fetch import DEFAULT_CONTENT_TYPES, Fetching, FetchWith
from ssekd.bindings.http_kafka.headers import HeaderCopy
from ssekd.bindings.http_kafka.locations import CORRELATION, LocationSigner, LocationTemplate
from ssekd.bindings.http_kafka.produce import (
    DEFAULT_IDEMPOTENCY_MAX_LENGTH,
    ProduceWith,
    Producing,
    Settings,
)
from ssekd.bindings.http_kafka.proxy import HttpKafkaProxy, HttpKafkaRoute, When
from ssekd.bindings.http_kafka.replay import DEFAULT_WINDOW, MAX_BYTES, Replays
from ssekd.bindings.http_kafka.waits import KafkaExit
from ssekd.bindings.kafka.producer import ACKS, DEFAULT_ACKS
from ssekd.bindings.kafka.roles import KafkaCache
from ssekd.bindings.kafka.topic_names import INTERNAL_TOPICS_OPTION, InternalTopics
from ssekd.config.errors import ConfigError, ConfigIssue
from ssekd.config.model import Binding
from ssekd.daemon_secret import daemon_secret
from ssekd.patterns import Pattern, reference_problems
from ssekd.spi.binding import BindingType, BuildContext, Exit, KindSpec

__all__ = ["BINDING"]

DEFAULT_IDEMPOTENCY_HEADER = "idempotency-key"
DEFAULT_REPLY_TO_HEADER = "zilla:reply-to"
DEFAULT_CORRELATION_HEADER = "zilla:correlation-id"
DEFAULT_MAX_WAIT = 30.0
DEFAULT_ACK_TIMEOUT = 10.0

#: `with` keys of each capability (the schema lists them all; `_build` refuses a mix).
PRODUCE_KEYS = frozenset({"capability", "topic", "acks", "key", "overrides", "reply-to",
                          "correlation-id", "async", "request-headers"})
FETCH_KEYS = frozenset({"capability", "topic", "filters", "merge", "content-types"})


def _settings(options: Mapping[str, Any]) -> Settings:
    headers = (options.get("correlation") or {}).get("headers") or {}
    return Settings(
        idempotency_header=str((options.get("idempotency") or {}).get(
            "header", DEFAULT_IDEMPOTENCY_HEADER)).lower(),
        idempotency_max_length=int((options.get("idempotency") or {}).get(
            "max-length", DEFAULT_IDEMPOTENCY_MAX_LENGTH)),
        reply_to_header=str(headers.get("reply-to", DEFAULT_REPLY_TO_HEADER)),
        correlation_header=str(headers.get("correlation-id", DEFAULT_CORRELATION_HEADER)),
        max_wait=float(options.get("max-wait", DEFAULT_MAX_WAIT)),
        ack_timeout=float(options.get("ack-timeout", DEFAULT_ACK_TIMEOUT)),
        internal_topics=InternalTopics.of(options.get("internal-topics", ())),
    )


def _templates(w: Mapping[str, Any]) -> list[str]:
    """Every `with` value that may hold `${params.x}` or `${guarded[...]...}`."""
    out = [str(w.get("topic", ""))]
    if "key" in w:
        out.append(str(w["key"]))
    out += [str(v) for v in (w.get("overrides") or {}).values()]
    out += [str(v) for v in (w.get("async") or {}).values()]
    for f in w.get("filters") or ():
        out += [str(f["key"])] if "key" in f else []
        out += [str(v) for v in (f.get("headers") or {}).values()]
    return out


def _route_with(binding: Binding, i: int, w: Mapping[str, Any], settings: Settings,
                issues: list[ConfigIssue], ctx: BuildContext,
                guards: tuple[str, ...] = ()) -> ProduceWith | FetchWith:
    base: tuple[str | int, ...] = ("bindings", binding.name, "routes", i, "with")
    capability = w["capability"]
    allowed = PRODUCE_KEYS if capability == "produce" else FETCH_KEYS
    for extra in sorted(set(w) - allowed):
        other = "fetch" if capability == "produce" else "produce"
        issues.append(ctx.issue(base + (extra,),
                                f"`{extra}` belongs to capability {other}, not {capability}"))
    if capability == "fetch":
        filters = tuple((None if "key" not in f else str(f["key"]),
                         tuple((str(n), str(v)) for n, v in (f.get("headers") or {}).items()))
                        for f in w.get("filters") or ())
        return FetchWith(str(w["topic"]), filters, "merge" in w,
                         tuple(str(t).lower() for t in w.get("content-types",
                                                             DEFAULT_CONTENT_TYPES)))
    async_headers = tuple((str(n).lower(), str(v)) for n, v in (w.get("async") or {}).items())
    if async_headers and "reply-to" not in w:
        issues.append(ctx.issue(base + ("async",),
                                "`async` needs `reply-to`: the answer a client polls for is "
                                "the reply on that topic"))
    overrides = tuple((str(n), str(v)) for n, v in (w.get("overrides") or {}).items())
    correlation_header = str(w.get("correlation-id", settings.correlation_header))
    copying = w.get("request-headers") or {}
    rule = HeaderCopy.for_route(
        "reply-to" in w, None if "copy" not in copying else [str(n) for n in copying["copy"]],
        [str(n) for n in copying.get("never", ())],
        [*(n for n, _ in overrides), settings.reply_to_header, correlation_header])
    return ProduceWith(
        topic=str(w["topic"]), acks=str(w.get("acks", DEFAULT_ACKS)),
        key=None if "key" not in w else str(w["key"]),
        overrides=overrides,
        reply_to=None if "reply-to" not in w else str(w["reply-to"]),
        async_headers=async_headers,
        correlation_header=correlation_header,
        headers=rule,
        locations=tuple(LocationTemplate.compile(v) for _, v in async_headers
                        if CORRELATION in v),
        guards=guards)


def _build(ctx: BuildContext, binding: Binding) -> HttpKafkaProxy:
    settings = _settings(binding.options)
    issues: list[ConfigIssue] = []
    base: tuple[str | int, ...] = ("bindings", binding.name)
    if binding.exit is not None:
        issues.append(ctx.issue(base + ("exit",),
                                "an http-kafka binding-level exit is never used: each route "
                                "names its own exit and a request no route matches is 404; "
                                "remove it or add a route for it"))
    if settings.ack_timeout > settings.max_wait:
        issues.append(ctx.issue(base + ("options", "ack-timeout"),
                                f"expected at most max-wait ({settings.max_wait:g} s): a write "
                                f"waits for its acknowledgement within the time a request may "
                                f"wait; got {settings.ack_timeout:g}"))
    routes = []
    for i, r in enumerate(binding.routes):
        assert r.exit is not None  # the schema requires it
        whens = tuple(When(None if "method" not in w else str(w["method"]).upper(),
                           None if "path" not in w else Pattern.compile(str(w["path"])))
                      for w in r.when)
        w = r.with_ or {}
        if "capability" not in w:
            issues.append(ctx.issue(base + ("routes", i),
                                    "expected `with` (capability and topic): an http-kafka "
                                    "route says what it does with a request"))
            continue
        patterns = tuple(x.path for x in whens if x.path is not None)
        if len(patterns) == len(whens):
            issues += [ctx.issue(base + ("routes", i, "with"), problem)
                       for problem in reference_problems(_templates(w), patterns,
                                                         ctx.config.guards)]
        routes.append(HttpKafkaRoute(whens, r.exit, _route_with(binding, i, w, settings,
                                                                issues, ctx,
                                                                tuple(sorted(r.guarded))),
                                     r.guarded))
    if issues:
        raise ConfigError(issues)
    exits = {name: ctx.exit(name, KafkaExit) for name in binding.exits}
    guards = {g: ctx.guard(g) for r in binding.routes for g in r.guarded}
    idempotency = binding.options.get("idempotency") or {}
    replays = Replays(ctx.reactor, float(idempotency.get("window", DEFAULT_WINDOW)),
                      max_bytes=int(idempotency.get("max-bytes", MAX_BYTES)))
    secret = binding.options.get("location-secret")
    signer = LocationSigner(binding.name, daemon_secret() if secret is None
                            else str(secret).encode("utf-8"))
    producing = Producing(binding.name, settings, ctx.reactor, ctx.events, replays, signer)
    fetching = Fetching(binding.name, settings, ctx.reactor, ctx.events)
    return HttpKafkaProxy(binding.name, tuple(routes), exits, settings, ctx.events, guards,
                          producing, fetching)


def produced_topics(binding: Binding) -> list[tuple[str, str | None]]:
    """(topic, reply-to topic) of each produce route whose names are literal: what `make run`
    starts the demo command service for (`KindSpec.produces`)."""
    found: list[tuple[str, str | None]] = []
    for r in binding.routes:
        w = r.with_ or {}
        if w.get("capability") != "produce" or "${" in str(w.get("topic", "${")):
            continue
        reply = w.get("reply-to")
        pair = (str(w["topic"]), None if reply is None or "${" in str(reply) else str(reply))
        if pair not in found:
            found.append(pair)
    return found


_HEADERS = {"type": "object", "additionalProperties": {"type": "string"}}
_HEADER_NAME = {"type": "string", "pattern": "^:?[!#$%&'*+.^_`|~0-9A-Za-z-]+$",
                "x-expected": "a header name"}

OPTIONS = {
    "type": "object", "additionalProperties": False,
    "description": "Maps HTTP requests to Kafka: a `produce` route writes the request as a "
                   "record and answers once the broker acknowledged it (with the reply from "
                   "`reply-to`, or `202` and a `location` to poll); a `fetch` route answers the "
                   "latest values of a topic from the cache the SSE streams use. The first "
                   "route whose `when` matches the method and path wins; none: `404`. Bodies "
                   "are bounded by the http binding's `limits.body-bytes` (`413`).",
    "properties": {
        "idempotency": {
            "type": "object", "additionalProperties": False,
            "description": "How a repeated write is recognised.",
            "properties": {
                "header": {"type": "string", "minLength": 1,
                           "default": DEFAULT_IDEMPOTENCY_HEADER,
                           "description": "The request header with the idempotency key (a new "
                                          "UUID when absent). It starts the correlation id "
                                          "(`<key>-<md5 of the record>`) and `${idempotencyKey}` "
                                          "in `with.key`; the same request sent again with the "
                                          "same key is not written again. A key is visible "
                                          "ASCII (`!` to `~`), at most `max-length` "
                                          "characters: anything else is `400` (an empty one "
                                          "counts as none)."},
                "max-length": {"type": "integer", "minimum": 16, "maximum": 4096,
                               "default": DEFAULT_IDEMPOTENCY_MAX_LENGTH,
                               "x-ssekd-addition": True,
                               "description": "Characters an idempotency key may have at most "
                                              "(a UUID has 36); a longer one is `400`. It "
                                              "bounds what each remembered write costs."},
                "max-bytes": {"type": "integer", "minimum": 65536, "default": MAX_BYTES,
                              "x-ssekd-addition": True,
                              "description": "Bytes the table of remembered writes may hold "
                                             "(each costs its correlation id and ~400 bytes); "
                                             "beyond it, and beyond 100,000 writes, the oldest "
                                             "are forgotten before their `window` ends."},
                "window": {"type": "number", "exclusiveMinimum": 0, "default": DEFAULT_WINDOW,
                           "x-ssekd-addition": True,
                           "description": "Seconds a write is remembered by its topic and "
                                          "correlation id "
                                          "after the broker answered: a repeat within it gets "
                                          "the first write's outcome. Beyond it (or after a "
                                          "restart) a write with `reply-to` is still known by "
                                          "its reply on the reply topic."}}},
        "correlation": {
            "type": "object", "additionalProperties": False,
            "description": "The Kafka headers of request-reply.",
            "properties": {"headers": {
                "type": "object", "additionalProperties": False,
                "description": "Header names.",
                "properties": {
                    "reply-to": {"type": "string", "minLength": 1,
                                 "default": DEFAULT_REPLY_TO_HEADER,
                                 "description": "Carries the route's `reply-to` topic on the "
                                                "record, for the service that answers."},
                    "correlation-id": {"type": "string", "minLength": 1,
                                       "default": DEFAULT_CORRELATION_HEADER,
                                       "description": "Carries the correlation id on the "
                                                      "record; the reply must carry it too."}}}}},
        "max-wait": {"type": "number", "exclusiveMinimum": 0, "default": DEFAULT_MAX_WAIT,
                     "x-ssekd-addition": True,
                     "description": "Seconds a request is held at most: waiting for its reply "
                                    "(then `504`; the write stands), for `Prefer: wait=N`, or "
                                    "for a topic's cache to load (then `503`). Must be less "
                                    "than the http binding's `limits.idle-timeout`."},
        "ack-timeout": {"type": "number", "exclusiveMinimum": 0,
                        "default": DEFAULT_ACK_TIMEOUT, "x-ssekd-addition": True,
                        "description": "Seconds a write waits for the broker's "
                                       "acknowledgement before the request is answered `503` "
                                       "with `Retry-After`. The write is not taken back: the "
                                       "same request again (same idempotency key) waits for "
                                       "it instead of writing twice. At most `max-wait`."},
        "internal-topics": INTERNAL_TOPICS_OPTION,
        "location-secret": {
            "type": "string", "minLength": 32, "x-ssekd-addition": True,
            "x-ssekd-default": "the daemon's own secret, made at start and shared by its workers",
            "description": "The key of the MAC an async location carries (`${correlationId}` "
                           "in `async` values stands for `<correlation id>.<tag>`): a GET of a "
                           "location answers only for the path params it was issued for and, "
                           "on a guarded route, the same identity; anything else is `404`. "
                           "Give every daemon behind one balancer the same value (from "
                           "`${{ env.NAME }}`) so each accepts the others' locations; by "
                           "default a location is good on the daemon that issued it, until "
                           "it stops (the same request again, same idempotency key, gets the "
                           "reply)."},
    },
}

WHEN = {"type": "object", "additionalProperties": False, "properties": {
    "method": {"type": "string", "pattern": "^[A-Za-z]+$", "x-expected": "an HTTP method",
               "description": "The request method (any, when absent)."},
    "path": {"type": "string", "pattern": "^/", "x-expected": "a path starting with /",
             "description": "Pattern for the request path, query string left out: `*` matches "
                            "anything, `{name}` captures a segment for `${params.name}`."},
}}

WITH = {
    "type": "object", "additionalProperties": False, "required": ["capability", "topic"],
    "description": "What a matching request does. Values may use `${params.name}` and "
                   "`${guarded['guard'].identity}`; `key` and `overrides` also "
                   "`${idempotencyKey}`, `async` values `${correlationId}`.",
    "properties": {
        "capability": {"enum": ["produce", "fetch"],
                       "description": "`produce`: write the request as a record; `fetch`: "
                                      "answer the topic's latest values."},
        "topic": {"type": "string", "minLength": 1, "description": "The topic."},
        "acks": {"enum": sorted(ACKS), "default": DEFAULT_ACKS,
                 "description": "produce: what the broker acknowledges before the answer. "
                                "`in_sync_replicas` uses the idempotent producer; "
                                "`leader_only` and `none` cannot."},
        "key": {"type": "string", "x-ssekd-default": "no key",
                "description": "produce: the record's key."},
        "overrides": {**_HEADERS, "x-ssekd-default": "none",
                      "description": "produce: Kafka headers added after the request's own. "
                                     "A request header of the same name is never copied, so "
                                     "a client cannot pre-empt an override (an identity)."},
        "request-headers": {
            "type": "object", "additionalProperties": False, "x-ssekd-addition": True,
            "x-ssekd-default": "Zilla's: every header with `reply-to`, `content-type` without",
            "description": "produce: which request headers the record carries. Never, "
                           "whatever is listed: the connection's own headers, credentials "
                           "(`authorization`, `cookie`, the headers the http binding's "
                           "`authorization` reads), the overrides' names, the reply-to and "
                           "correlation-id headers and `zilla:` names. `if-match` always "
                           "goes, carrying its etag.",
            "properties": {
                "copy": {"type": "array", "items": _HEADER_NAME,
                         "description": "Copy these headers only (pseudo-headers such as "
                                        "`:path` included). By default a route with "
                                        "`reply-to` copies `:method`, `:scheme`, "
                                        "`:authority`, `:path` and every header but those "
                                        "whose names say they hold a secret (`x-api-key`, "
                                        "`*token*`, `*auth*`, `*session*`, ...); one without "
                                        "copies `content-type`."},
                "never": {"type": "array", "items": _HEADER_NAME,
                          "description": "Headers never to copy."}}},
        "reply-to": {"type": "string", "minLength": 1, "x-ssekd-default": "no reply (`204`)",
                     "description": "produce: the topic the answer comes from: the first "
                                    "record there with the same correlation id; its `:status` "
                                    "header is the status, its other headers and value the "
                                    "response."},
        "correlation-id": {"type": "string", "minLength": 1,
                           "x-ssekd-default": "`correlation.headers.correlation-id`",
                           "description": "produce: the Kafka header carrying the correlation "
                                          "id for this route (record and reply)."},
        "async": {**_HEADERS, "x-ssekd-default": "none",
                  "description": "produce: response headers of the `202` a request with "
                                 "`Prefer: respond-async` gets once its write is acknowledged, "
                                 "e.g. `location: /items/${params.id};${correlationId}`. A GET "
                                 "of that location (another `when` of the route) answers the "
                                 "reply, or `202` again - after `Prefer: wait=N` seconds at "
                                 "most. Needs `reply-to`. In a location, `${correlationId}` "
                                 "stands for the correlation id and a tag binding it to the "
                                 "path's params and the requester (`location-secret`)."},
        "filters": {"type": "array", "x-ssekd-default": "every record",
                    "description": "fetch: a record is in the answer when any filter takes it.",
                    "items": {"type": "object", "additionalProperties": False, "properties": {
                        "key": {"type": "string",
                                "description": "The record's key must equal this."},
                        "headers": {**_HEADERS,
                                    "description": "Each named header must be present with "
                                                   "this value; with `key`, all must match."}}}},
        "content-types": {
            "type": "array", "x-ssekd-addition": True,
            "items": {"type": "string", "pattern": r"^[a-zA-Z0-9!#$&^_.+*-]+/[a-zA-Z0-9!#$&^_.+*-]+$",
                      "x-expected": "a media type such as application/json (* for any part)"},
            "default": list(DEFAULT_CONTENT_TYPES),
            "description": "fetch: the media types a value is served as, from its record's "
                           "`content-type` header (`*` stands for any characters); any other "
                           "is served as `application/octet-stream`, so that what a writer "
                           "stored as `text/html` never runs as a page of this origin. Every "
                           "answer also carries `X-Content-Type-Options: nosniff` and a "
                           "`Content-Security-Policy` that allows nothing."},
        "merge": {"type": "object", "additionalProperties": False,
                  "required": ["content-type"], "x-ssekd-default": "one value",
                  "description": "fetch: answer a JSON array of every key's latest value, "
                                 "instead of one value.",
                  "properties": {
                      "content-type": {"const": "application/json",
                                       "description": "The merged answer's type."},
                      "patch": {"type": "object", "additionalProperties": False,
                                "required": ["initial", "path"],
                                "description": "Zilla's JSON-patch form of the same merge "
                                               "(values appended to an empty array).",
                                "properties": {
                                    "initial": {"const": "[]", "description": "Start value."},
                                    "path": {"const": "/-", "description": "Append."}}}}},
    },
}

BINDING = BindingType("http-kafka", {
    "proxy": KindSpec(role=HttpBinding, build=_build, exit=Exit.REQUIRED,
                      exit_roles=(KafkaCache,), options=OPTIONS, when=WHEN, with_=WITH,
                      produces=produced_topics),
})
