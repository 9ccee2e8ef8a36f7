"""The openapi-asyncapi proxy: an http-kafka binding whose routes serve an OpenAPI spec's
operations from the Kafka operations of an AsyncAPI spec.

A route takes the OpenAPI operations its `when` items match (spec, operationId or glob, tag) and
pairs each, as Zilla does, with the Kafka operation of `with.spec`:

- with `with.operation` a plain id: that operation, for every HTTP operation the route takes;
- else (no `with.operation`, a glob, or `with.tag`): the Kafka operation with the HTTP
  operation's own operationId among those `with` selects; failing that, the one of the HTTP
  operation whose `202` response names this operation's path as a location (the GET that
  answers an async request shares the request's Kafka operation).

An HTTP operation with no partner is left out (Zilla's rule: a spec pair need not be total);
a route that pairs none at all is an error, as is a `when` or `with` naming a spec the binding
does not have. The first route that takes an operation wins. Each pair becomes an http-kafka
route (`ssekd.bindings.openapi_asyncapi.http_kafka`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ssekd.bindings.asyncapi.spec import Operation as KafkaOperation
from ssekd.bindings.asyncapi.spec import Spec, glob_match
from ssekd.bindings.openapi.server import matches, refuse_security
from ssekd.bindings.openapi.spec import OpenapiSpec, Operation, read_specs
from ssekd.bindings.openapi_asyncapi.http_kafka import (
    EXTENSION,
    HttpSide,
    KafkaSide,
    http_kafka_route,
)
from ssekd.config.errors import ConfigError, ConfigIssue
from ssekd.config.model import Binding, Route
from ssekd.config.origin import Origin
from ssekd.spi.compose import ComposeContext, Composition

Path_ = tuple[str | int, ...]


def compose_proxy(ctx: ComposeContext, binding: Binding) -> Composition:
    name = binding.name
    base: Path_ = ("bindings", name, "options", "specs")
    issues: list[ConfigIssue] = []
    openapis: dict[str, OpenapiSpec] = {}
    asyncapis: dict[str, Spec] = {}
    try:
        openapis = {label: OpenapiSpec(s) for label, s in read_specs(
            ctx, binding.options["specs"]["openapi"], base + ("openapi",), "openapi").items()}
    except ConfigError as e:
        issues.extend(e.issues)
    try:
        asyncapis = read_specs(ctx, binding.options["specs"]["asyncapi"], base + ("asyncapi",),
                               "asyncapi")
    except ConfigError as e:
        issues.extend(e.issues)
    if issues:
        raise ConfigError(issues)
    composition = Composition(bindings={})
    routes: list[dict[str, Any]] = []
    taken: set[tuple[str, str]] = set()
    for i, route in enumerate(binding.routes):
        try:
            pairs = _pairs(ctx, binding, openapis, asyncapis, i, route)
        except ConfigError as e:
            issues.extend(e.issues)
            continue
        for spec, op, kafka, kafka_op in pairs:
            if (spec.label, op.key) in taken:
                continue  # an earlier route serves it
            taken.add((spec.label, op.key))
            try:
                refuse_security(spec, op, binding)
                topic = kafka_op.channel.address
                if not isinstance(topic, str) or not topic:
                    raise ConfigError([kafka.issue(kafka_op.channel.path + ("address",),
                                                   f"channel {kafka_op.channel.key!r} of Kafka "
                                                   f"operation {kafka_op.key!r}: expected its "
                                                   f"address, the topic")])
                http = _http_side(spec, op)
                side = KafkaSide(kafka_op.action, topic, _reply_topic(kafka, kafka_op))
            except ConfigError as e:
                issues.extend(e.issues)
                continue
            assert route.exit is not None
            out = http_kafka_route(http, side, route.exit)
            if route.guarded:
                out["guarded"] = {g: list(r) for g, r in route.guarded.items()}
            at: Path_ = ("bindings", name, "routes", len(routes))
            composition.where[at] = spec.text.where(op.spec_path)
            composition.where[at + ("with",)] = kafka.where(kafka_op.path)
            routes.append(out)
    if issues:
        raise ConfigError(issues)
    composition.bindings[name] = {"type": "http-kafka", "kind": "proxy", "routes": routes}
    composition.origins[name] = Origin(name, "proxy")
    composition.sources += [s.text.source.watch for s in openapis.values()
                            if s.text.source.watch]
    composition.sources += [s.source.watch for s in asyncapis.values() if s.source.watch]
    composition.summary = (f"openapi-asyncapi proxy {name}: {len(routes)} HTTP operation(s) "
                           f"paired with Kafka operations, from "
                           + ", ".join([f"{s.label} ({s.text.file})" for s in openapis.values()]
                                       + [f"{s.label} ({s.file})" for s in asyncapis.values()]))
    return composition


def _http_side(spec: OpenapiSpec, op: Operation) -> HttpSide:
    extension, at = spec.text.resolve(op.data.get(EXTENSION), op.spec_path + (EXTENSION,))
    if extension is not None and not isinstance(extension, Mapping):
        raise ConfigError([spec.issue(at, f"expected the {EXTENSION} extension as a mapping "
                                          f"(key, overrides, filters)")])
    accepted: dict[str, Any] = {}
    for response in op.responses:
        if response.status == "202":
            for header, value in response.headers.items():
                resolved = spec.text.deref(value, response.path + ("headers", header))
                if isinstance(resolved, Mapping):
                    accepted[str(header)] = resolved.get("schema")
    return HttpSide(op.method, op.path,
                    {r.status: [(c.media_type, c.schema) for c in r.content]
                     for r in op.responses},
                    accepted, extension)


def _reply_topic(kafka: Spec, op: KafkaOperation) -> str | None:
    reply = op.data.get("reply")
    if reply is None:
        return None
    reply, at = kafka.resolve(reply, op.path + ("reply",))
    channel = reply.get("channel") if isinstance(reply, Mapping) else None
    ref = channel.get("$ref") if isinstance(channel, Mapping) else None
    if not isinstance(ref, str) or not ref.startswith("#/channels/"):
        raise ConfigError([kafka.issue(at, f"operation {op.key!r}: expected reply: {{channel: "
                                           f"{{$ref: '#/channels/<name>'}}}}")])
    address = kafka.channel(ref.split("/", 2)[2], at + ("channel",)).address
    return address if isinstance(address, str) and address else None


def _selected(kafka_ops: Mapping[str, KafkaOperation],
              with_: Mapping[str, Any]) -> dict[str, KafkaOperation]:
    """The Kafka operations a bulk `with` may pair with (Zilla's `bulkCandidates`)."""
    if "tag" in with_:
        return {k: op for k, op in kafka_ops.items() if str(with_["tag"]) in op.tags}
    if "operation" in with_:
        return {k: op for k, op in kafka_ops.items()
                if glob_match(str(with_["operation"]), k)}
    return dict(kafka_ops)


def _pairs(ctx: ComposeContext, binding: Binding, openapis: Mapping[str, OpenapiSpec],
           asyncapis: Mapping[str, Spec], i: int,
           route: Route) -> list[tuple[OpenapiSpec, Operation, Spec, KafkaOperation]]:
    base: Path_ = ("bindings", binding.name, "routes", i)
    with_ = route.with_ or {}
    issues: list[ConfigIssue] = []
    kafka = asyncapis.get(str(with_.get("spec")))
    if kafka is None:
        issues.append(ctx.issue(base + ("with", "spec"),
                                f"{with_.get('spec')!r} is not an asyncapi spec of binding "
                                f"{binding.name!r}; expected one of {', '.join(asyncapis)}"))
    for j, when in enumerate(route.when):
        if "spec" in when and when["spec"] not in openapis:
            issues.append(ctx.issue(base + ("when", j, "spec"),
                                    f"{when['spec']!r} is not an openapi spec of binding "
                                    f"{binding.name!r}; expected one of {', '.join(openapis)}"))
    if issues or kafka is None:
        raise ConfigError(issues)
    kafka_ops = kafka.operations()
    bulk = "tag" in with_ or "operation" not in with_ or "*" in str(with_["operation"])
    candidates = _selected(kafka_ops, with_) if bulk else kafka_ops
    if not bulk and str(with_["operation"]) not in kafka_ops:
        raise ConfigError([ctx.issue(base + ("with", "operation"),
                                     f"{with_['operation']!r} is not an operation of spec "
                                     f"{kafka.label!r} ({kafka.file}); expected one of: "
                                     f"{', '.join(kafka_ops) or 'it has none'}")])
    pairs = []
    for spec in openapis.values():
        operations = spec.operations()
        for op in operations.values():
            if not any(matches(w, spec.label, op) for w in route.when or [{}]):
                continue
            partner = candidates.get(op.key if bulk else str(with_["operation"]))
            if partner is None and bulk:
                partner = _async_partner(op, operations, candidates)
            if partner is not None:
                pairs.append((spec, op, kafka, partner))
    if not pairs:
        raise ConfigError([ctx.issue(base, f"route {i} of binding {binding.name!r} pairs no "
                                           f"HTTP operation with a Kafka operation of spec "
                                           f"{kafka.label!r} ({kafka.file}): an operation is "
                                           f"paired with the one of its own operationId, or "
                                           f"with with.operation")])
    return pairs


def _async_partner(op: Operation, operations: Mapping[str, Operation],
                   candidates: Mapping[str, KafkaOperation]) -> KafkaOperation | None:
    """The Kafka operation of the HTTP operation whose `202` names `op`'s path as a location:
    the GET that answers an async request shares the request's Kafka operation."""
    for other in operations.values():
        if other is op:
            continue
        for response in other.responses:
            if response.status != "202":
                continue
            for header in response.headers.values():
                schema = header.get("schema") if isinstance(header, Mapping) else None
                if isinstance(schema, Mapping) and schema.get("format") == op.path:
                    found = candidates.get(other.key)
                    if found is not None:
                        return found
    return None
