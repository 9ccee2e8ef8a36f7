"""The asyncapi proxy: an sse-kafka binding whose routes serve a spec's SSE operations from the
Kafka operations of another spec.

A route takes the SSE operations its `when` matches (spec, operation id or glob, tag; the first
route that takes an operation wins) and pairs each with the Kafka operation of `with.spec` of
the same id, or the one `with.operation` names. That operation must receive (ssekd reads the
topic). The sse-kafka route it makes:

- `when.path`: the SSE operation's channel address (`{name}` parts capture path segments);
- `with.topic`: the Kafka operation's channel address, its `{name}` parts from the path;
- `with.filters`: the SSE operation's `x-zilla-sse-kafka` binding's `filters` (`key`, `headers`),
  where `{identity}` is the identity of the guard the operation's security maps to and
  `{name}` a part of the path;
- `with.event.id`: from `x-zilla-sse-kafka.event.id` (an ssekd addition; Zilla always uses
  `${etag}`, the default);
- `guarded`: the guard the operation's security maps to, with its schemes' scopes as roles, and
  the route's own `guarded`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ssekd.bindings.asyncapi.http_kafka import (
    PairingError,
    http_kafka_route,
    kafka_operation,
)
from ssekd.bindings.asyncapi.http_operations import (
    HTTP_BINDING,
    SSE_BINDING,
    http_kafka_name,
    http_operation,
    http_operations,
    polls,
    reply_channel,
)
from ssekd.bindings.asyncapi.security import Guarding, guarding
from ssekd.bindings.asyncapi.server import sse_operations
from ssekd.bindings.asyncapi.spec import (
    DEFAULT_PORTS,
    PARAMETER,
    Operation,
    Spec,
    read_specs,
    select_servers,
)
from ssekd.bindings.specs.routes import matches, unknown_specs
from ssekd.config.errors import ConfigError, ConfigIssue
from ssekd.config.model import Binding, Route
from ssekd.config.origin import OperationOrigin, Origin, SpecRef
from ssekd.spi.compose import ComposeContext, Composition

SSE_KAFKA_BINDING = "x-zilla-sse-kafka"
HTTP_KAFKA_BINDING = "x-zilla-http-kafka"
_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")

Path_ = tuple[str | int, ...]
#: (spec, operation, Kafka spec, Kafka operation)
Pair = tuple[Spec, Operation, Spec, Operation]


def compose_proxy(ctx: ComposeContext, binding: Binding) -> Composition:
    name = binding.name
    specs = read_specs(ctx, binding)
    issues: list[ConfigIssue] = []
    #: label -> the path prefixes its servers serve the operations under (their pathnames)
    prefixes: dict[str, list[str]] = {}
    for spec in specs.values():
        try:
            servers = spec.servers()
            if binding.options["specs"][spec.label].get("servers") is not None:
                # the servers it names must be the spec's (the proxy listens nowhere)
                chosen = [s.server for s in select_servers(
                    ctx, binding, spec, tuple(DEFAULT_PORTS) + ("http", "https"))]
            else:
                chosen = list(servers.values())
        except ConfigError as e:
            issues.extend(e.issues)
            continue
        prefixes[spec.label] = sorted({s.pathname.rstrip("/") for s in chosen
                                       if s.protocol in ("http", "https")}) or [""]
    composition = Composition(bindings={})
    routes: list[dict[str, Any]] = []
    origins: dict[int, OperationOrigin] = {}
    http_name = http_kafka_name(name, specs)
    http_routes: list[dict[str, Any]] = []
    http_origins: dict[int, OperationOrigin] = {}
    taken: set[tuple[str, str]] = set()
    unpaired: dict[tuple[str, str], str] = {}
    for i, route in enumerate(binding.routes):
        try:
            pairs, requests, missing = _pairs(ctx, binding, specs, i, route)
        except ConfigError as e:
            issues.extend(e.issues)
            continue
        for label, key, text in missing:
            unpaired.setdefault((label, key), text)
        for spec, op, kafka, kafka_op in pairs:
            if (spec.label, op.key) in taken:
                continue  # an earlier route serves it (the first that matches wins)
            taken.add((spec.label, op.key))
            index = len(routes)
            base: Path_ = ("bindings", name, "routes", index)
            try:
                routes.append(_route(ctx, binding, route, spec, op, kafka, kafka_op, base,
                                     composition, prefixes.get(spec.label, [""])))
            except ConfigError as e:
                issues.extend(e.issues)
                continue
            origins[index] = OperationOrigin(SpecRef(spec.label, spec.data), op.key,
                                             op.channel.key)
        for spec, op, kafka, kafka_op in requests:
            if (spec.label, op.key) in taken:
                continue
            taken.add((spec.label, op.key))
            index = len(http_routes)
            try:
                made, origin = _http_route(ctx, binding, route, spec, op, kafka, kafka_op,
                                           ("bindings", http_name, "routes", index),
                                           composition, prefixes.get(spec.label, [""]))
            except ConfigError as e:
                issues.extend(e.issues)
                continue
            http_routes.append(made)
            http_origins[index] = origin
    unserved = [text for k, text in unpaired.items() if k not in taken]
    if issues:
        raise ConfigError(issues)
    if routes or http_name != name:
        composition.bindings[name] = {"type": "sse-kafka", "kind": "proxy", "routes": routes}
        composition.origins[name] = Origin(name, "proxy", routes=origins)
    if http_routes or http_name == name:
        composition.bindings[http_name] = {"type": "http-kafka", "kind": "proxy",
                                           "routes": http_routes}
        composition.origins[http_name] = Origin(name, "proxy", routes=http_origins)
    composition.sources += [s.source.watch for s in specs.values() if s.source.watch]
    said = [f"{len(routes)} SSE operation(s)"] if routes or http_name != name else []
    said += [f"{len(http_routes)} HTTP operation(s)"] if http_routes else []
    composition.summary = (f"asyncapi proxy {name}: {' and '.join(said)} paired with "
                           f"Kafka operations, from "
                           + ", ".join(f"{s.label} ({s.file})" for s in specs.values())
                           + (f"; not served, no Kafka operation of the same name: "
                              f"{', '.join(unserved)}" if unserved else ""))
    return composition


def _pairs(ctx: ComposeContext, binding: Binding, specs: Mapping[str, Spec], i: int,
           route: Route) -> tuple[list[Pair], list[Pair], list[tuple[str, str, str]]]:
    """The (spec, operation, Kafka spec, Kafka operation) pairs route `i` makes, of SSE and of
    HTTP operations, and the HTTP operations it takes that have no partner (Zilla leaves them
    unserved): (spec label, operation, what to say of it) each."""
    base: Path_ = ("bindings", binding.name, "routes", i)
    with_ = route.with_ or {}
    labels = ", ".join(specs)
    kafka = specs.get(str(with_.get("spec")))
    issues: list[ConfigIssue] = []
    if kafka is None:
        issues.append(ctx.issue(base + ("with", "spec"), f"{with_.get('spec')!r} is not a spec "
                                                         f"of binding {binding.name!r}; "
                                                         f"expected one of {labels}"))
    issues += unknown_specs(ctx, binding, i, route, specs)
    if issues or kafka is None:
        raise ConfigError(issues)
    found: list[tuple[Spec, Operation]] = []
    requests: list[tuple[Spec, Operation]] = []
    for spec in specs.values():
        if spec is kafka:
            continue
        polled = polls(spec)
        for op in sse_operations(spec):
            if any(matches(w, spec.label, op) for w in route.when or [{}]):
                found.append((spec, op))
        for op in http_operations(spec):
            if op.action == "receive" and op.channel.key in polled:
                continue  # the GET of a write's location: that write's route serves it
            if any(matches(w, spec.label, op) for w in route.when or [{}]):
                requests.append((spec, op))
    if not found and not requests:
        raise ConfigError([ctx.issue(base + ("when",),
                                     f"route {i} of binding {binding.name!r} takes no operation "
                                     f"with the {SSE_BINDING} or the {HTTP_BINDING} binding "
                                     f"(from the specs "
                                     f"{', '.join(s for s in specs if specs[s] is not kafka)})")])
    kafka_ops = kafka.operations()
    pairs = []
    missing: list[tuple[str, str, str]] = []
    known = ", ".join(kafka_ops) or "it has none"
    for spec, op in found:
        wanted = str(with_.get("operation") or op.key)
        kafka_op = kafka_ops.get(wanted)
        if kafka_op is None:
            if "operation" in with_:
                issues.append(ctx.issue(base + ("with", "operation"),
                                        f"{wanted!r} is not an operation of spec {kafka.label!r} "
                                        f"({kafka.file}); expected one of: {known}"))
            else:
                issues.append(spec.issue(op.path, f"SSE operation {op.key!r} has no Kafka "
                                                  f"operation of the same name in spec "
                                                  f"{kafka.label!r} ({kafka.file}; its "
                                                  f"operations: {known}); name its partner "
                                                  f"with with.operation in route {i} of "
                                                  f"binding {binding.name!r}"))
            continue
        if kafka_op.action != "receive":
            issues.append(kafka.issue(kafka_op.path + ("action",),
                                      f"Kafka operation {kafka_op.key!r} is "
                                      f"{kafka_op.action!r}, but SSE operation {op.key!r} "
                                      f"({spec.at(op.path)}) streams the records of its topic: "
                                      f"expected action: receive"))
            continue
        pairs.append((spec, op, kafka, kafka_op))
    paired: list[Pair] = []
    for spec, op in requests:
        wanted = str(with_.get("operation") or op.key)
        kafka_op = kafka_ops.get(wanted)
        if kafka_op is not None:
            paired.append((spec, op, kafka, kafka_op))
        elif "operation" in with_:
            issues.append(ctx.issue(base + ("with", "operation"),
                                    f"{wanted!r} is not an operation of spec {kafka.label!r} "
                                    f"({kafka.file}); expected one of: {known}"))
        else:
            # as Zilla: a route without with.operation pairs what has a partner of its name
            missing.append((spec.label, op.key, f"{op.key} ({spec.at(op.path)})"))
    if issues:
        raise ConfigError(issues)
    return pairs, paired, missing


def _http_route(ctx: ComposeContext, binding: Binding, route: Route, spec: Spec,
                op: Operation, kafka: Spec, kafka_op: Operation, base: Path_,
                composition: Composition,
                prefixes: list[str]) -> tuple[dict[str, Any], OperationOrigin]:
    """The http-kafka route of an HTTP operation and its Kafka partner, and what it serves."""
    if HTTP_KAFKA_BINDING in op.bindings:
        raise ConfigError([spec.issue(op.bindings_path + (HTTP_KAFKA_BINDING,),
                                      f"the {HTTP_KAFKA_BINDING} operation binding (keys, "
                                      f"filters and overrides from the request) is not "
                                      f"supported yet: remove it, or write the http-kafka "
                                      f"binding by hand")])
    http = http_operation(spec, op)
    partner = kafka_operation(kafka, kafka_op)
    assert route.exit is not None  # the schema requires it
    try:
        made = http_kafka_route(http, partner, route.exit, prefixes[0])
        for prefix in prefixes[1:]:
            made["when"] += http_kafka_route(http, partner, route.exit, prefix)["when"]
    except PairingError as e:
        at = kafka_op.channel.path + ("address",) if e.part == "topic" else kafka_op.path
        raise ConfigError([kafka.issue(at, f"HTTP operation {op.key!r} ({spec.at(op.path)}) "
                                           f"and Kafka operation {kafka_op.key!r}: "
                                           f"{e}")]) from None
    guard = guarding(ctx, binding, spec, op)
    guarded = {g: list(roles) for g, roles in route.guarded.items()}
    where = composition.where
    where[base] = spec.where(op.path)
    where[base + ("when",)] = spec.where(op.channel.path + ("address",))
    where[base + ("with",)] = spec.where(op.path)
    where[base + ("with", "topic")] = kafka.where(kafka_op.channel.path + ("address",))
    if guard is not None:
        roles = guarded.setdefault(guard.guard, [])
        roles += [r for r in guard.roles if r not in roles]
        where[base + ("guarded",)] = spec.where(op.path + ("security",))
    if guarded:
        made["guarded"] = guarded
    channels: tuple[str, ...] = ()
    operations: tuple[str, ...] = ()
    if http.location is not None:
        reply = reply_channel(spec, op)
        channels = (reply.key,)
        operations = tuple(o.key for o in http_operations(spec)
                           if o.action == "receive" and o.channel.key == reply.key)
    return made, OperationOrigin(SpecRef(spec.label, spec.data), op.key, op.channel.key,
                                 channels, operations)


def _route(ctx: ComposeContext, binding: Binding, route: Route, spec: Spec, op: Operation,
           kafka: Spec, kafka_op: Operation, base: Path_,
           composition: Composition, prefixes: list[str]) -> dict[str, Any]:
    path = op.channel.address
    if not isinstance(path, str) or not path.startswith("/"):
        raise ConfigError([spec.issue(op.channel.path + ("address",),
                                      f"channel {op.channel.key!r} of SSE operation {op.key!r}: "
                                      f"expected an address that is a path (starting with /), "
                                      f"got {path!r}")])
    captures = set(op.channel.parameters)
    for parameter in captures:
        if not PARAMETER.fullmatch(f"{{{parameter}}}"):
            raise ConfigError([spec.issue(op.channel.path + ("address",),
                                          f"parameter {{{parameter}}} of {path!r}: a path part "
                                          f"is captured by a name of letters, digits and _")])
    topic = kafka_op.channel.address
    topic_path = kafka_op.channel.path + ("address",)
    if not isinstance(topic, str) or not topic:
        raise ConfigError([kafka.issue(topic_path, f"channel {kafka_op.channel.key!r} of Kafka "
                                                   f"operation {kafka_op.key!r}: expected its "
                                                   f"address, the topic")])
    for parameter in kafka_op.channel.parameters:
        if parameter not in captures:
            raise ConfigError([kafka.issue(topic_path,
                                           f"topic address {topic!r} has parameter "
                                           f"{{{parameter}}}, which the SSE path {path!r} of "
                                           f"operation {op.key!r} ({spec.at(op.path)}) cannot "
                                           f"supply"
                                           + (f": the path has {', '.join(sorted(captures))}"
                                              if captures else ": the path has no parameter"))])
    guard = guarding(ctx, binding, spec, op)
    with_: dict[str, Any] = {"topic": PARAMETER.sub(r"${params.\1}", topic)}
    where = composition.where
    where[base] = spec.where(op.path)
    where[base + ("when",)] = spec.where(op.channel.path + ("address",))
    where[base + ("with",)] = spec.where(op.path)
    where[base + ("with", "topic")] = kafka.where(topic_path)
    extension, ext_path = spec.resolve(op.bindings.get(SSE_KAFKA_BINDING),
                                       op.bindings_path + (SSE_KAFKA_BINDING,))
    if extension is not None:
        with_.update(_extension(spec, op, extension, ext_path, captures, guard, base, where))
    out: dict[str, Any] = {"when": [{"path": prefix + path} for prefix in prefixes],
                           "exit": route.exit, "with": with_}
    guarded = {g: list(roles) for g, roles in route.guarded.items()}
    if guard is not None:
        roles = guarded.setdefault(guard.guard, [])
        roles += [r for r in guard.roles if r not in roles]
        where[base + ("guarded",)] = spec.where(op.path + ("security",))
    if guarded:
        out["guarded"] = guarded
    return out


def _extension(spec: Spec, op: Operation, extension: Any, path: Path_, captures: set[str],
               guard: Guarding | None, base: Path_,
               where: dict[Path_, Any]) -> dict[str, Any]:
    """`filters` and `event` of an `x-zilla-sse-kafka` operation binding, for sse-kafka's
    `with`."""
    if not isinstance(extension, Mapping):
        raise ConfigError([spec.issue(path, f"expected the {SSE_KAFKA_BINDING} binding as a "
                                            f"mapping (filters, event)")])
    unknown = sorted(set(extension) - {"filters", "event", "bindingVersion"})
    if unknown:
        raise ConfigError([spec.issue(path + (unknown[0],),
                                      f"unexpected property {unknown[0]!r} in "
                                      f"{SSE_KAFKA_BINDING} (expected one of: filters, event)")])
    out: dict[str, Any] = {}
    if "event" in extension:
        out["event"] = extension["event"]
        where[base + ("with", "event")] = spec.where(path + ("event",))
    if "filters" not in extension:
        return out
    filters = extension["filters"]
    where[base + ("with", "filters")] = spec.where(path + ("filters",))
    if not isinstance(filters, list):
        out["filters"] = filters  # the schema says what is expected, at this line
        return out
    issues: list[ConfigIssue] = []

    def resolved(value: Any, at: Path_) -> Any:
        if not isinstance(value, str):
            return value
        for name in _PLACEHOLDER.findall(value):
            if name == "identity" and guard is None:
                issues.append(spec.issue(at, f"{{identity}} in a filter of operation "
                                             f"{op.key!r}: the operation requires no security "
                                             f"that maps to a guard, so there is no identity"))
            elif name != "identity" and name not in captures:
                issues.append(spec.issue(at, f"{{{name}}} in a filter of operation {op.key!r} "
                                             f"is neither {{identity}} nor a parameter of its "
                                             f"path {op.channel.address!r}"))
        if guard is not None:
            value = value.replace("{identity}", f"${{guarded['{guard.guard}'].identity}}")
        return PARAMETER.sub(r"${params.\1}", value)

    composed = []
    for j, item in enumerate(filters):
        at = path + ("filters", j)
        where[base + ("with", "filters", j)] = spec.where(at)
        if not isinstance(item, Mapping):
            composed.append(item)
            continue
        entry: dict[str, Any] = {}
        for key, value in item.items():
            where[base + ("with", "filters", j, key)] = spec.where(at + (key,))
            if key == "headers" and isinstance(value, Mapping):
                entry[key] = {str(h): resolved(v, at + (key, h)) for h, v in value.items()}
            else:
                entry[key] = resolved(value, at + (key,))
        composed.append(entry)
    if issues:
        raise ConfigError(issues)
    out["filters"] = composed
    return out
