"""The openapi server: the tcp (and tls) and http server bindings that serve a spec's operations
on its servers.

- tcp: one listener for every port of the URLs used (`options.specs.<label>.servers`, else the
  spec's `servers`), on their address when it is `localhost` or an IP address, else on every
  interface (as the asyncapi server does; Zilla always listens on every interface).
- tls, for `https` URLs: keys from the binding's `vault`, ALPN `h2` and `http/1.1`.
- http: cross-origin access (as Zilla's) and a route per operation and URL: `:path` is the URL's
  path and the operation's path (`{name}` parts capture a segment), `:method` its method. A
  request for any other path or method is `404`. The route exits to the exit of the first
  route of the binding whose `when` takes the operation (spec, operation id or glob, tag), else
  to the binding's `exit`: an openapi client, an openapi-asyncapi proxy, or any binding that
  answers HTTP requests. An operation's security requires the guard its schemes map to
  (`options.specs.<label>.security`, `ssekd.bindings.openapi.security`), which reads the token
  where the scheme says.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ssekd.bindings.asyncapi.server import ALPN, listen_host
from ssekd.bindings.asyncapi.spec import glob_match
from ssekd.bindings.openapi.requests import RequestChecks
from ssekd.bindings.openapi.security import guarding
from ssekd.bindings.openapi.servers import BaseUrl, base_urls
from ssekd.bindings.openapi.spec import OpenapiSpec, Operation, read_specs
from ssekd.config.errors import ConfigError, ConfigIssue
from ssekd.config.model import Binding
from ssekd.config.origin import Origin
from ssekd.spi.compose import ComposeContext, Composition

Path_ = tuple[str | int, ...]


def read(ctx: ComposeContext, binding: Binding) -> dict[str, OpenapiSpec]:
    """The OpenAPI specs of an openapi binding's `options.specs`."""
    base: Path_ = ("bindings", binding.name, "options", "specs")
    return {label: OpenapiSpec(spec) for label, spec in
            read_specs(ctx, binding.options["specs"], base, "openapi").items()}


def matches(when: Mapping[str, Any], label: str, operation: Operation) -> bool:
    """Whether a route's `when` item takes `operation` of spec `label`: every field it gives
    must match (`spec` the label, `operation` the id or a glob of it, `tag` one of its tags)."""
    if "spec" in when and when["spec"] != label:
        return False
    if "operation" in when and not glob_match(str(when["operation"]), operation.key):
        return False
    return "tag" not in when or str(when["tag"]) in operation.tags


def compose_server(ctx: ComposeContext, binding: Binding) -> Composition:
    name = binding.name
    specs = read(ctx, binding)
    issues: list[ConfigIssue] = []
    for i, route in enumerate(binding.routes):
        for j, when in enumerate(route.when):
            if "spec" in when and when["spec"] not in specs:
                issues.append(ctx.issue(("bindings", name, "routes", i, "when", j, "spec"),
                                        f"{when['spec']!r} is not a spec of binding {name!r}; "
                                        f"expected one of {', '.join(specs)}"))
    http_name, tls_name = f"{name}.http_server", f"{name}.tls_server"
    composition = Composition(bindings={})
    routes: list[dict[str, Any]] = []
    used: list[BaseUrl] = []
    authorization: dict[str, dict[str, Any]] = {}
    checks = RequestChecks(name)
    count = 0
    for spec in specs.values():
        try:
            urls = base_urls(ctx, binding, spec, ("specs", spec.label))
            operations = spec.operations()
        except ConfigError as e:
            issues.extend(e.issues)
            continue
        used += urls
        for op in operations.values():
            try:
                guard = guarding(ctx, binding, spec, op, ("specs", spec.label))
                exit_name, guarded = _exit_of(spec, op, binding)
                checks.add(spec, op, urls)
            except ConfigError as e:
                issues.extend(e.issues)
                continue
            if guard is not None:
                entry = authorization.setdefault(guard.guard, {"credentials": {}})
                for place, values in guard.credentials.items():
                    entry["credentials"].setdefault(place, {}).update(values)
                roles = guarded.setdefault(guard.guard, [])
                roles += [r for r in guard.roles if r not in roles]
            count += 1
            for url in urls:
                at = ("bindings", http_name, "routes", len(routes))
                composition.where[at] = spec.text.where(op.spec_path)
                composed: dict[str, Any] = {
                    "when": [{"headers": {":path": url.request_path(op.path),
                                          ":method": op.method}}],
                    "exit": exit_name}
                if guarded:
                    composed["guarded"] = guarded
                    composition.where[at + ("guarded",)] = spec.text.where(op.security_path)
                routes.append(composed)
    if issues:
        raise ConfigError(issues)
    secure: dict[int, bool] = {}
    for url in used:
        if secure.setdefault(url.port, url.secure) != url.secure:
            issues.append(ctx.issue(("bindings", name, "options", "specs"),
                                    f"port {url.port} is both an http and an https URL's: give "
                                    f"them different ports"))
    if any(secure.values()) and binding.vault is None:
        issues.append(ctx.issue(("bindings", name), f"binding {name!r} serves https: give it "
                                                    f"a vault with the server's key"))
    if issues:
        raise ConfigError(issues)
    composition.bindings[name] = _tcp(name, used, secure, http_name, tls_name)
    if any(secure.values()):
        composition.bindings[tls_name] = {"type": "tls", "kind": "server",
                                          "vault": binding.vault, "options": {"alpn": ALPN},
                                          "exit": http_name}
    options: dict[str, Any] = {"access-control": {"policy": "cross-origin"}}
    if authorization:
        options["authorization"] = authorization
    checks.compose(options, composition, http_name)
    composition.bindings[http_name] = {"type": "http", "kind": "server", "options": options,
                                       "routes": routes}
    for url in used:
        composition.where.setdefault(("bindings", name, "options", "port"),
                                     url.where)
    composition.origins[name] = Origin(name, "server")
    composition.sources += [s.text.source.watch for s in specs.values() if s.text.source.watch]
    ports = ", ".join(f"{'https' if secure[p] else 'http'} {p}" for p in sorted(secure))
    composition.summary = (f"openapi server {name}: {count} operation(s) of "
                           + ", ".join(f"{s.label} ({s.text.file})" for s in specs.values())
                           + f" on {ports}" + checks.summary("request"))
    return composition


def _tcp(name: str, used: list[BaseUrl], secure: Mapping[int, bool], http_name: str,
         tls_name: str) -> dict[str, Any]:
    ports = sorted(secure)
    tcp: dict[str, Any] = {"type": "tcp", "kind": "server",
                           "options": {"host": listen_host({u.host for u in used}),
                                       "port": ports}}
    plain = [p for p in ports if not secure[p]]
    tls = [p for p in ports if secure[p]]
    if plain and tls:
        tcp["routes"] = [{"when": [{"port": plain}], "exit": http_name},
                         {"when": [{"port": tls}], "exit": tls_name}]
    else:
        tcp["exit"] = tls_name if tls else http_name
    return tcp


def _exit_of(spec: OpenapiSpec, op: Operation,
             binding: Binding) -> tuple[str, dict[str, list[str]]]:
    """The exit of the first route whose `when` takes the operation (and that route's
    `guarded`), else the binding's exit."""
    for route in binding.routes:
        if route.exit is not None and any(matches(w, spec.label, op) for w in route.when):
            return route.exit, {g: list(roles) for g, roles in route.guarded.items()}
    if binding.exit is None:
        raise ConfigError([spec.issue(op.spec_path, f"no route of binding {binding.name!r} "
                                                    f"takes operation {op.key!r} and the "
                                                    f"binding has no exit")])
    return binding.exit, {}
