"""The HTTP operations of an AsyncAPI spec: operations with the `http` operation binding (its
`method`) on a channel whose address is a path, as Zilla's asyncapi.http.kafka.proxy example
writes them. The server routes their requests, the proxy pairs them with Kafka operations.

A `send` operation with a `reply` channel is a write whose reply is polled: the client that
asks `Prefer: respond-async` gets `202` and a location. The location is the `format` of the
header the operation's message names as its `correlationId` (`$message.header#/CorrelId`, as
the example writes it), else the reply channel's address; it must have `{correlationId}`. A
GET of it is served by the write's route, so an operation that receives from the reply channel
(the example's `getVerifiedCustomer`) is that poll, not an operation paired on its own.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from ssekd.bindings.asyncapi.http_kafka import (
    CORRELATION_ID,
    HttpOperation,
    correlation_location,
)
from ssekd.bindings.asyncapi.spec import Channel, Operation, Spec, read_specs
from ssekd.config.errors import ConfigError, ConfigIssue
from ssekd.spi.compose import ComposeContext

HTTP_BINDING = "http"
#: The SSE binding: an operation with it is an event stream, not a request.
SSE_BINDING = "x-zilla-sse"
METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS")
_HEADER = re.compile(r"^\$message\.header#/(.+)$")


def http_operations(spec: Spec) -> list[Operation]:
    """The operations of `spec` with the `http` binding (and not the SSE one)."""
    return [op for op in spec.operations().values()
            if HTTP_BINDING in op.bindings and SSE_BINDING not in op.bindings]


def http_operation(spec: Spec, op: Operation) -> HttpOperation:
    """`op` as the HTTP side of a pairing; ConfigError at the spec's line when its method,
    path or reply cannot be served."""
    binding, path = spec.resolve(op.bindings.get(HTTP_BINDING),
                                 op.bindings_path + (HTTP_BINDING,))
    method = binding.get("method") if isinstance(binding, Mapping) else None
    if not isinstance(method, str) or method.upper() not in METHODS:
        raise ConfigError([spec.issue(path + ("method",) if isinstance(binding, Mapping)
                                      else path,
                                      f"HTTP operation {op.key!r}: expected method, one of "
                                      f"{', '.join(METHODS)}; got {method!r}")])
    address = channel_path(spec, op.channel, op.key)
    location = None
    if op.action == "send" and op.data.get("reply") is not None:
        reply = reply_channel(spec, op)
        location = _header_format(spec, op) or channel_path(spec, reply, op.key)
        if "{" + CORRELATION_ID + "}" not in location:
            raise ConfigError([spec.issue(reply.path + ("address",),
                                          f"the reply of HTTP operation {op.key!r} is polled "
                                          f"at {location!r}, which has no {{correlationId}}: "
                                          f"a client could not tell its reply from another's")])
    return HttpOperation(method.upper(), address, location, _array(spec, op))


def channel_path(spec: Spec, channel: Channel, op_key: str) -> str:
    address = channel.address
    if not isinstance(address, str) or not address.startswith("/"):
        raise ConfigError([spec.issue(channel.path + ("address",),
                                      f"channel {channel.key!r} of HTTP operation {op_key!r}: "
                                      f"expected an address that is a path (starting with /), "
                                      f"got {address!r}")])
    return address


def reply_channel(spec: Spec, op: Operation) -> Channel:
    reply = spec.mapping(op.data["reply"], op.path + ("reply",), "a reply")
    channel = reply.get("channel")
    ref = channel.get("$ref") if isinstance(channel, Mapping) else None
    if not isinstance(ref, str) or not ref.startswith("#/channels/") or ref.count("/") != 2:
        raise ConfigError([spec.issue(op.path + ("reply",),
                                      f"operation {op.key!r}: expected reply: {{channel: "
                                      f"{{$ref: '#/channels/<name>'}}}}")])
    return spec.channel(ref.split("/", 2)[2], op.path + ("reply", "channel"))


def polls(spec: Spec) -> dict[str, str]:
    """Reply channel key -> the HTTP send operation whose reply is polled there."""
    found: dict[str, str] = {}
    for op in http_operations(spec):
        if op.action == "send" and op.data.get("reply") is not None:
            found.setdefault(reply_channel(spec, op).key, op.key)
    return found


def messages_of(spec: Spec, op: Operation) -> list[tuple[Mapping[str, object], tuple[str | int, ...]]]:
    """The operation's messages (its own list, else its channel's), refs followed."""
    listed = op.data.get("messages")
    if isinstance(listed, list):
        out = []
        for i, item in enumerate(listed):
            message, at = spec.resolve(item, op.path + ("messages", i))
            if isinstance(message, Mapping):
                out.append((message, at))
        return out
    return [(m.data, m.path) for m in op.channel.messages]


def _header_format(spec: Spec, op: Operation) -> str | None:
    """The `format` of the header a message's `correlationId` is in, when it is a path."""
    for message, at in messages_of(spec, op):
        location = correlation_location(spec, message, at)
        m = _HEADER.match(location or "")
        if m is None:
            continue
        headers, headers_at = spec.resolve(message.get("headers"), at + ("headers",))
        properties = headers.get("properties") if isinstance(headers, Mapping) else None
        if not isinstance(properties, Mapping) or m.group(1) not in properties:
            continue
        header, _ = spec.resolve(properties[m.group(1)],
                                 headers_at + ("properties", m.group(1)))
        form = header.get("format") if isinstance(header, Mapping) else None
        if isinstance(form, str) and form.startswith("/"):
            return form
    return None


def _array(spec: Spec, op: Operation) -> bool:
    """Whether a message of the channel has an array payload (a read answers all values)."""
    for message in op.channel.messages:
        payload, _ = spec.resolve(message.data.get("payload"), message.path + ("payload",))
        if isinstance(payload, Mapping) and payload.get("type") == "array":
            return True
    return False


def check(spec: Spec, ops: list[Operation]) -> list[ConfigIssue]:
    """Every problem of these HTTP operations (method, path, reply), all at once."""
    issues: list[ConfigIssue] = []
    for op in ops:
        try:
            http_operation(spec, op)
        except ConfigError as e:
            issues.extend(e.issues)
    return issues


def streams(specs: Mapping[str, Spec]) -> bool:
    """Whether these specs have an SSE operation: then an asyncapi proxy of them is, under its
    own name, the sse-kafka binding, and its http-kafka binding is `<name>.http_kafka`."""
    try:
        return any(SSE_BINDING in op.bindings
                   for spec in specs.values() for op in spec.operations().values())
    except ConfigError:
        return False  # the proxy says what is wrong with its spec


def http_kafka_name(proxy: str, specs: Mapping[str, Spec]) -> str:
    """The name of the http-kafka binding an asyncapi proxy of `specs` composes."""
    return f"{proxy}.http_kafka" if streams(specs) else proxy


def http_exit(ctx: ComposeContext, exit_name: str) -> str:
    """Where a server sends the HTTP operations it routes to `exit_name`: the http-kafka
    binding of an asyncapi proxy, else the exit itself (an http-kafka binding written by hand)."""
    target = ctx.config.bindings.get(exit_name)
    if target is None or target.type != "asyncapi" or target.kind != "proxy":
        return exit_name
    try:
        return http_kafka_name(exit_name, read_specs(ctx, target))
    except ConfigError:
        return exit_name  # the proxy says what is wrong with its specs
