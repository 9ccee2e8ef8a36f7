"""The asyncapi server: the tcp (and tls), http and sse bindings that serve a spec's SSE and HTTP
operations on its servers.

- tcp: one listener for every port of the servers used (`options.specs.<label>.servers`, else
  all of the spec's `http`/`https` servers). It listens on the servers' address when it is
  `localhost` or an IP address (all servers alike), else on every interface, as Zilla does.
- tls, for `https` servers: keys from the binding's `vault`, ALPN `h2` and `http/1.1`.
- http: cross-origin access (as Zilla's), the authorization of the guards the operations'
  security maps to, and a route per SSE operation: `:path` is the server's pathname and the
  operation's channel address, `:method` GET.
- sse: one per exit of the SSE operations; an operation goes to the exit of the first route
  whose `when` matches it (spec, operation id or glob, tag), else to the binding's `exit`.
- HTTP operations (the `http` operation binding, `ssekd.bindings.asyncapi.http_operations`):
  an http route each, `:method` the binding's method, straight to the exit's http-kafka binding
  (`http_exit`: an asyncapi proxy's, or the exit itself); a write whose reply is polled also
  routes the GET of its location. The spec's payload schemas and path parameters become the
  http binding's `options.requests` (`ssekd.bindings.asyncapi.requests`).

An operation is an SSE operation when it has the `x-zilla-sse` operation binding.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ssekd.bindings.asyncapi.http_kafka import HttpOperation
from ssekd.bindings.asyncapi.http_operations import (
    HTTP_BINDING,
    SSE_BINDING,
    http_exit,
    http_operation,
    http_operations,
)
from ssekd.bindings.asyncapi.requests import RequestChecks
from ssekd.bindings.asyncapi.security import guarding
from ssekd.bindings.asyncapi.spec import (
    Operation,
    SelectedServer,
    Spec,
    read_specs,
    select_servers,
)
from ssekd.bindings.specs.routes import exit_of, unknown_specs
from ssekd.bindings.specs.serving import authorize, tcp_server, tls_server
from ssekd.config.errors import ConfigError, ConfigIssue
from ssekd.config.model import Binding
from ssekd.config.origin import Origin, ServerOrigin, SpecRef
from ssekd.spi.compose import ComposeContext, Composition


def sse_operations(spec: Spec) -> list[Operation]:
    return [op for op in spec.operations().values() if SSE_BINDING in op.bindings]


def compose_server(ctx: ComposeContext, binding: Binding) -> Composition:
    name = binding.name
    specs = read_specs(ctx, binding)
    issues: list[ConfigIssue] = []
    used: list[tuple[Spec, SelectedServer]] = []
    operations: list[tuple[Spec, Operation, HttpOperation | None]] = []
    for spec in specs.values():
        try:
            used += [(spec, s) for s in select_servers(ctx, binding, spec, ("http", "https"))]
            found = sse_operations(spec)
            requests = http_operations(spec)
        except ConfigError as e:
            issues.extend(e.issues)
            continue
        if not found and not requests:
            issues.append(spec.issue(("operations",), f"no operation has the {SSE_BINDING} "
                                                      f"or the {HTTP_BINDING} binding: binding "
                                                      f"{name!r} has nothing to serve"))
        streaming = {op.key for op in found}
        for op in spec.operations().values():
            if op.key in streaming:
                operations.append((spec, op, None))
            elif op in requests:
                try:
                    operations.append((spec, op, http_operation(spec, op)))
                except ConfigError as e:
                    issues.extend(e.issues)
    for i, written in enumerate(binding.routes):
        issues += unknown_specs(ctx, binding, i, written, specs)
    if issues:
        raise ConfigError(issues)
    secure: dict[int, bool] = {}
    for spec, s in used:
        if secure.setdefault(s.port, s.scheme == "https") != (s.scheme == "https"):
            issues.append(_at(ctx, spec, s, f"port {s.port} is both an http and an https "
                                            f"server's: give them different ports"))
    if any(secure.values()) and binding.vault is None:
        issues.append(ctx.issue(("bindings", name), f"binding {name!r} serves https "
                                                    f"(port {min(p for p, s in secure.items() if s)}): "
                                                    f"give it a vault with the server's key"))
    composition = Composition(bindings={}, summary="")
    http_name, tls_name = f"{name}.http_server", f"{name}.tls_server"
    routes: list[dict[str, Any]] = []
    authorization: dict[str, dict[str, Any]] = {}
    exits: dict[str, None] = {}
    #: (spec, operation, exit, [(method, path)], guarded, streams): one http route each
    routed: list[tuple[Spec, Operation, str, list[tuple[str, str]], dict[str, list[str]],
                       bool]] = []
    taken: set[tuple[str, str]] = set()
    checks = RequestChecks(name)
    served = 0  # HTTP operations served (a poll may share its write's route)
    for spec, op, http in operations:
        try:
            exit_name, guarded = exit_of(binding, spec.label, op,
                                         lambda m: spec.issue(op.path, m))
            guard = guarding(ctx, binding, spec, op)
            path = _path(spec, op) if http is None else http.path
        except ConfigError as e:
            issues.extend(e.issues)
            continue
        if guard is not None:
            # checked here as well as by the stream's route: a server whose exit is not an
            # asyncapi proxy still serves the operation only as its spec says
            authorize(authorization, guarded, guard)
        prefixes = sorted({s.server.pathname.rstrip("/") for sp, s in used if sp is spec}) \
            or [""]
        if http is None:
            exits[exit_name] = None
            routed.append((spec, op, exit_name, [("GET", p + path) for p in prefixes],
                           guarded, True))
            continue
        checks.add(spec, op, http, prefixes)
        wanted = [(http.method, p + path) for p in prefixes]
        if http.location is not None:  # the GET of the async location: the write's route
            wanted += [("GET", p + http.location) for p in prefixes]
        wanted = [w for w in wanted if w not in taken]
        taken.update(wanted)
        served += 1
        if wanted:
            routed.append((spec, op, http_exit(ctx, exit_name), wanted, guarded, False))
    if issues:
        raise ConfigError(issues)
    sse_names = {e: f"{name}.sse_server" if len(exits) == 1 else f"{name}.sse_server.{e}"
                 for e in exits}
    for i, (spec, op, exit_name, paths, guarded, stream) in enumerate(routed):
        route: dict[str, Any] = {
            "when": [{"headers": {":path": p, ":method": m}} for m, p in paths],
            "exit": sse_names[exit_name] if stream else exit_name}
        if guarded:
            route["guarded"] = guarded
        routes.append(route)
        composition.where[("bindings", http_name, "routes", i)] = spec.where(op.path)
    http_options: dict[str, Any] = {"access-control": {"policy": "cross-origin"}}
    if authorization:
        http_options["authorization"] = authorization
    checks.compose(http_options, composition, http_name)
    composition.bindings[name] = tcp_server({s.host for _, s in used}, secure, http_name,
                                            tls_name)
    if any(secure.values()):
        composition.bindings[tls_name] = tls_server(binding.vault, http_name)
    composition.bindings[http_name] = {"type": "http", "kind": "server",
                                       "options": http_options, "routes": routes}
    for exit_name, sse_name in sse_names.items():
        composition.bindings[sse_name] = {"type": "sse", "kind": "server", "exit": exit_name}
        # an exit that cannot stream (found once its neighbour is composed) is the config's
        said = [("bindings", name, "routes", i, "exit") for i, r in enumerate(binding.routes)
                if r.exit == exit_name] + [("bindings", name, "exit")] * (binding.exit == exit_name)
        if said:
            issue = ctx.issue(said[0], "")
            composition.where[("bindings", sse_name, "exit")] = (issue.file, issue.line)
    for spec, s in used:
        composition.where.setdefault(("bindings", name, "options", "port"),
                                     _where(ctx, spec, s))
    composition.origins[name] = Origin(name, "server", servers=tuple(
        ServerOrigin(SpecRef(spec.label, spec.data), s.server.key, s.port) for spec, s in used))
    composition.sources += [s.source.watch for s in specs.values() if s.source.watch]
    ports = ", ".join(f"{'https' if secure[p] else 'http'} {p}" for p in sorted(secure))
    streamed = sum(1 for r in routed if r[5])
    counted = [f"{streamed} SSE operation(s)"] if streamed or not served else []
    counted += [f"{served} HTTP operation(s)"] if served else []
    composition.summary = (f"asyncapi server {name}: {' and '.join(counted)} of "
                           f"{_named(specs)} on {ports}{checks.summary('request')}")
    return composition


def _named(specs: Mapping[str, Spec]) -> str:
    return ", ".join(f"{s.label} ({s.file})" for s in specs.values())


def _at(ctx: ComposeContext, spec: Spec, server: SelectedServer, message: str) -> ConfigIssue:
    if server.option_path is not None:
        return ctx.issue(server.option_path, message)
    return spec.issue(server.server.path, message)


def _where(ctx: ComposeContext, spec: Spec,
           server: SelectedServer) -> tuple[Any, int | None]:
    if server.option_path is not None:
        issue = ctx.issue(server.option_path, "")
        return issue.file, issue.line
    return spec.where(server.server.path)


def _path(spec: Spec, op: Operation) -> str:
    address = op.channel.address
    if not isinstance(address, str) or not address.startswith("/"):
        raise ConfigError([spec.issue(op.channel.path + ("address",),
                                      f"channel {op.channel.key!r} of SSE operation "
                                      f"{op.key!r}: expected an address that is a path "
                                      f"(starting with /), got {address!r}")])
    method = op.bindings.get(SSE_BINDING)
    if isinstance(method, Mapping) and str(method.get("method", "GET")).upper() != "GET":
        raise ConfigError([spec.issue(op.bindings_path + (SSE_BINDING, "method"),
                                      f"SSE operation {op.key!r}: an event stream is opened "
                                      f"with GET, not {method.get('method')}")])
    return address
