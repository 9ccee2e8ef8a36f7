"""The http-kafka route an HTTP operation and the Kafka operation it is paired with make, by
Zilla's rules (its asyncapi proxy's http-kafka composition), for any composite that pairs HTTP
requests with Kafka operations: the asyncapi proxy (HTTP operations of an AsyncAPI spec) and the
openapi-asyncapi proxy (operations of an OpenAPI spec).

The HTTP side is described without the spec it came from (`HttpOperation`: method, path, an
async location, whether the answer is an array); the Kafka side is an operation of an AsyncAPI
spec, read by `kafka_operation` (errors at the spec's lines). `http_kafka_route` makes the route:

- the Kafka operation receives: `fetch` of its topic; with `merge` when the HTTP answer is an
  array; filtered by key `${params.<last>}` when the path has a parameter (`GET /pets/{id}`: the
  latest value of key `id`), else the topic's latest value;
- it sends: `produce` to its topic, `acks: in_sync_replicas`, key `${params.<last>}` when the
  path has a parameter, else `${idempotencyKey}`; `reply-to` its reply channel's topic, the
  correlation header its message's `correlationId` names (`$message.header#/<name>`); and when
  the HTTP operation has an async location, `async: {location: ...}` (`{correlationId}` ->
  `${correlationId}`, `{x}` -> `${params.x}`) and a second `when`: the GET of that location.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ssekd.bindings.asyncapi.spec import PARAMETER, Operation, Spec
from ssekd.config.errors import ConfigError

#: The `acks` of every route Zilla composes.
ACKS = "in_sync_replicas"
#: The capture of an async location that the correlation id fills.
CORRELATION_ID = "correlationId"
#: Where an AsyncAPI `correlationId.location` names a header.
_HEADER_LOCATION = re.compile(r"^\$message\.header#/(.+)$")

Path_ = tuple[str | int, ...]


class PairingError(ValueError):
    """Why an HTTP operation and a Kafka operation cannot make a route; `part` says which part
    of the Kafka operation is at fault (`topic`: its channel's address, `reply`: its reply), so
    that the caller says it at that line of its spec."""

    def __init__(self, part: str, message: str) -> None:
        super().__init__(message)
        self.part = part


@dataclass(frozen=True)
class HttpOperation:
    """The HTTP side of a pairing, as its spec says it."""

    method: str
    #: The path, `{name}` capturing a segment (`/pets/{id}`).
    path: str
    #: Where a client polls for the reply of an async write (`/customer;cid={correlationId}`),
    #: the path of the GET that the route also takes; None: the write is answered at once.
    location: str | None = None
    #: Whether the answer of a read is a JSON array of every key's value (`merge`).
    merged: bool = False

    @property
    def parameters(self) -> list[str]:
        return PARAMETER.findall(self.path)


@dataclass(frozen=True)
class KafkaOperation:
    """The Kafka side of a pairing: an AsyncAPI operation on a channel whose address is a
    topic."""

    key: str
    action: str
    topic: str
    #: The topic of its `reply` channel.
    reply_to: str | None = None
    #: The Kafka header its message's `correlationId` is in.
    correlation_header: str | None = None


def kafka_operation(spec: Spec, op: Operation) -> KafkaOperation:
    """Operation `op` of the Kafka spec `spec`, as a pairing uses it."""
    topic = op.channel.address
    if not isinstance(topic, str) or not topic:
        raise ConfigError([spec.issue(op.channel.path + ("address",),
                                      f"channel {op.channel.key!r} of Kafka operation "
                                      f"{op.key!r}: expected its address, the topic")])
    reply_to = None
    reply = op.data.get("reply")
    if reply is not None:
        reply_map = spec.mapping(reply, op.path + ("reply",), "a reply")
        ref = (reply_map.get("channel") or {}).get("$ref") \
            if isinstance(reply_map.get("channel"), Mapping) else None
        if not isinstance(ref, str) or not ref.startswith("#/channels/"):
            raise ConfigError([spec.issue(op.path + ("reply",),
                                          f"Kafka operation {op.key!r}: expected reply: "
                                          f"{{channel: {{$ref: '#/channels/<name>'}}}}")])
        channel = spec.channel(ref.split("/", 2)[2], op.path + ("reply", "channel"))
        if not isinstance(channel.address, str) or not channel.address:
            raise ConfigError([spec.issue(channel.path + ("address",),
                                          f"reply channel {channel.key!r} of Kafka operation "
                                          f"{op.key!r}: expected its address, the topic")])
        reply_to = channel.address
    return KafkaOperation(op.key, op.action, topic, reply_to,
                          _correlation_header(spec, op))


def _correlation_header(spec: Spec, op: Operation) -> str | None:
    """The header of the first message's `correlationId` location (Zilla reads the first)."""
    messages = op.data.get("messages")
    if isinstance(messages, list) and messages:
        message, _ = spec.resolve(messages[0], op.path + ("messages", 0))
    elif op.channel.messages:
        message = op.channel.messages[0].data
    else:
        return None
    found = correlation_location(spec, message, op.path)
    if found is None:
        return None
    m = _HEADER_LOCATION.match(found)
    return m.group(1) if m else None


def correlation_location(spec: Spec, message: Any, at: Path_) -> str | None:
    """A message's `correlationId.location` (refs followed), or None."""
    if not isinstance(message, Mapping) or message.get("correlationId") is None:
        return None
    correlation, _ = spec.resolve(message["correlationId"], at)
    location = correlation.get("location") if isinstance(correlation, Mapping) else None
    return location if isinstance(location, str) else None


def as_template(text: str) -> str:
    """A path as an http-kafka value: `{correlationId}` the correlation id, `{x}` a param."""
    text = text.replace("{" + CORRELATION_ID + "}", "${correlationId}")
    return PARAMETER.sub(lambda m: m.group(0) if m.group(1) == CORRELATION_ID
                         else "${params." + m.group(1) + "}", text)


def http_kafka_route(http: HttpOperation, kafka: KafkaOperation, exit_name: str,
                     prefix: str = "") -> dict[str, Any]:
    """The http-kafka route (`when`, `exit`, `with`) that serves `http` with `kafka`: see the
    module docstring. `prefix` is put before the paths (a server's pathname). Raises
    `PairingError` when they cannot be paired (a topic parameter the path lacks, an async
    location without a reply topic): the caller says it at the spec's line."""
    params = http.parameters
    topic = kafka.topic
    for name in PARAMETER.findall(topic):
        if name not in params:
            raise PairingError("topic", f"topic {topic!r} has parameter {{{name}}}, which the path "
                             f"{http.path!r} cannot supply"
                             + (f" (its parameters: {', '.join(params)})" if params else ""))
    when: list[dict[str, Any]] = [{"method": http.method.upper(), "path": prefix + http.path}]
    with_: dict[str, Any]
    last = params[-1] if params else None
    if kafka.action == "receive":
        with_ = {"capability": "fetch", "topic": as_template(topic)}
        if http.merged:
            with_["merge"] = {"content-type": "application/json",
                              "patch": {"initial": "[]", "path": "/-"}}
        if last is not None:
            with_["filters"] = [{"key": "${params." + last + "}"}]
        return {"when": when, "exit": exit_name, "with": with_}
    with_ = {"capability": "produce", "topic": as_template(topic), "acks": ACKS,
             "key": "${idempotencyKey}" if last is None else "${params." + last + "}"}
    if kafka.reply_to is not None:
        with_["reply-to"] = as_template(kafka.reply_to)
    if kafka.correlation_header is not None:
        with_["correlation-id"] = kafka.correlation_header
    if http.location is not None:
        if kafka.reply_to is None:
            raise PairingError("reply", f"the reply of {http.method.upper()} {http.path} is polled at "
                             f"{http.location!r}, but Kafka operation {kafka.key!r} has no "
                             f"reply channel: give it one (reply: {{channel: ...}})")
        if "{" + CORRELATION_ID + "}" not in http.location:
            raise PairingError("reply", f"the async location {http.location!r} has no {{correlationId}}: "
                             f"a client could not tell its reply from another's")
        with_["async"] = {"location": prefix + as_template(http.location)}
        when.append({"method": "GET", "path": prefix + http.location})
    return {"when": when, "exit": exit_name, "with": with_}
