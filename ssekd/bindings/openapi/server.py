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

from typing import Any

from ssekd.bindings.openapi.requests import RequestChecks
from ssekd.bindings.openapi.security import guarding
from ssekd.bindings.openapi.servers import BaseUrl, base_urls
from ssekd.bindings.openapi.spec import OpenapiSpec, read_specs
from ssekd.bindings.specs.routes import exit_of, unknown_specs
from ssekd.bindings.specs.serving import authorize, tcp_server, tls_server
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


def compose_server(ctx: ComposeContext, binding: Binding) -> Composition:
    name = binding.name
    specs = read(ctx, binding)
    issues: list[ConfigIssue] = []
    for i, route in enumerate(binding.routes):
        issues += unknown_specs(ctx, binding, i, route, specs)
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
                exit_name, guarded = exit_of(binding, spec.label, op,
                                             lambda m: spec.issue(op.spec_path, m))
                checks.add(spec, op, urls)
            except ConfigError as e:
                issues.extend(e.issues)
                continue
            if guard is not None:
                authorize(authorization, guarded, guard)
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
    composition.bindings[name] = tcp_server({u.host for u in used}, secure, http_name, tls_name)
    if any(secure.values()):
        composition.bindings[tls_name] = tls_server(binding.vault, http_name)
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
