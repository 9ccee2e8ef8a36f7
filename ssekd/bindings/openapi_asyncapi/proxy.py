"""The openapi-asyncapi proxy: an http-kafka binding whose routes serve an OpenAPI spec's
operations from the Kafka operations of an AsyncAPI spec.

A route takes the OpenAPI operations its `when` items match (spec, operationId or glob, tag) and
pairs each, as Zilla does, with the Kafka operation of `with.spec`:

- with `with.operation` a plain id: that operation, for every HTTP operation the route takes;
- else (no `with.operation`, a glob, or `with.tag`): the Kafka operation with the HTTP
  operation's own operationId among those `with` selects. The GET of an async write's
  location (a `202` response header's `format`) is not paired on its own: the write's route
  answers it, as Zilla's does.

An HTTP operation with no partner is left out (Zilla's rule: a spec pair need not be total);
a route that pairs none at all is an error, as is a `when` or `with` naming a spec the binding
does not have. The first route that takes an operation wins. Each pair becomes an http-kafka
route (`ssekd.bindings.openapi_asyncapi.http_kafka`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ssekd.bindings.asyncapi.http_kafka import kafka_operation
from ssekd.bindings.asyncapi.spec import Operation as KafkaOperation
from ssekd.bindings.asyncapi.spec import Spec
from ssekd.bindings.openapi.security import guarding
from ssekd.bindings.openapi.spec import OpenapiSpec, Operation, read_specs
from ssekd.bindings.openapi_asyncapi.http_kafka import (
    EXTENSION,
    http_operation,
    unresolved_names,
)
from ssekd.bindings.openapi_asyncapi.http_kafka import (
    route as http_kafka_route,
)
from ssekd.bindings.specs.routes import glob_match, matches, unknown_specs
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
                guard = guarding(ctx, binding, spec, op, ("specs", "openapi", spec.label))
                extension = _extension(spec, op, guard is not None)
                out = http_kafka_route(op, kafka_operation(kafka, kafka_op), str(route.exit),
                                       extension, None if guard is None else guard.identity)
            except ConfigError as e:
                issues.extend(e.issues)
                continue
            except ValueError as e:
                issues.append(spec.issue(op.spec_path, f"operation {op.key!r} cannot be served "
                                                       f"by Kafka operation {kafka_op.key!r} "
                                                       f"({kafka.at(kafka_op.path)}): {e}"))
                continue
            guarded = {g: list(r) for g, r in route.guarded.items()}
            if guard is not None:
                roles = guarded.setdefault(guard.guard, [])
                roles += [r for r in guard.roles if r not in roles]
            if guarded:
                out["guarded"] = guarded
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


def _extension(spec: OpenapiSpec, op: Operation, guarded: bool) -> Mapping[str, Any] | None:
    """The operation's `x-zilla-http-kafka` extension (key, overrides, filters), checked."""
    extension, at = spec.text.resolve(op.data.get(EXTENSION), op.spec_path + (EXTENSION,))
    if extension is None:
        return None
    if not isinstance(extension, Mapping):
        raise ConfigError([spec.issue(at, f"expected the {EXTENSION} extension as a mapping "
                                          f"(key, overrides, filters)")])
    unknown = sorted(set(extension) - {"key", "overrides", "filters"})
    if unknown:
        raise ConfigError([spec.issue(at + (unknown[0],),
                                      f"unexpected property {unknown[0]!r} in {EXTENSION} "
                                      f"(expected key, overrides or filters)")])
    if not guarded and "identity" in unresolved_names(extension, op.templates):
        raise ConfigError([spec.issue(at, f"{{identity}} in {EXTENSION} of operation "
                                          f"{op.key!r}: the operation requires no security "
                                          f"that maps to a guard, so there is no identity")])
    wrong = unresolved_names(extension, [*op.templates, "identity"])
    if wrong:
        raise ConfigError([spec.issue(at, f"{{{wrong[0]}}} in {EXTENSION} of operation "
                                          f"{op.key!r} is neither {{identity}} nor a parameter "
                                          f"of its path {op.path!r}")])
    return extension


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
    issues += unknown_specs(ctx, binding, i, route, openapis, "an openapi spec")
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
        # the GET of an async write's location is the write's route's, as Zilla pairs it
        locations = {http_operation(op).location for op in operations.values()}
        for op in operations.values():
            if not any(matches(w, spec.label, op) for w in route.when or [{}]):
                continue
            if op.method == "GET" and op.path in locations:
                continue
            partner = candidates.get(op.key if bulk else str(with_["operation"]))
            if partner is not None:
                pairs.append((spec, op, kafka, partner))
    if not pairs:
        raise ConfigError([ctx.issue(base, f"route {i} of binding {binding.name!r} pairs no "
                                           f"HTTP operation with a Kafka operation of spec "
                                           f"{kafka.label!r} ({kafka.file}): an operation is "
                                           f"paired with the one of its own operationId, or "
                                           f"with with.operation")])
    return pairs
