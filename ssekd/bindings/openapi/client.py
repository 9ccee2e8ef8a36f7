"""The openapi client: the http client (under the binding's own name, what an openapi server's
routes exit to), and the tls (for an `https` URL) and tcp clients that carry its requests to the
spec's upstream.

The upstream is the URL `options.specs.<label>.servers` names (as given: Zilla's example calls
`http://openapi-mock:5000`, which its spec does not list), else the spec's one server. One client
calls one upstream: every spec of the binding must name the same. An `https` upstream is checked
against the binding's vault's trust, or the system's CAs without a vault.
"""

from __future__ import annotations

from typing import Any

from ssekd.bindings.openapi.requests import RequestChecks
from ssekd.bindings.openapi.server import read
from ssekd.bindings.openapi.servers import BaseUrl, base_urls
from ssekd.bindings.openapi.spec import OpenapiSpec, Operation
from ssekd.bindings.specs.serving import tls_client
from ssekd.config.errors import ConfigError, ConfigIssue
from ssekd.config.model import Binding
from ssekd.config.origin import Origin
from ssekd.spi.compose import ComposeContext, Composition


def compose_client(ctx: ComposeContext, binding: Binding) -> Composition:
    name = binding.name
    specs = read(ctx, binding)
    issues: list[ConfigIssue] = []
    upstreams: dict[tuple[str, str, int], BaseUrl] = {}
    operations: list[tuple[OpenapiSpec, Operation]] = []
    for spec in specs.values():
        try:
            urls = base_urls(ctx, binding, spec, ("specs", spec.label))
            operations += [(spec, op) for op in spec.operations().values()]
        except ConfigError as e:
            issues.extend(e.issues)
            continue
        for url in urls:
            upstreams.setdefault((url.scheme, url.host, url.port), url)
            if url.pathname:
                issues.append(ctx.issue(("bindings", name, "options", "specs", spec.label,
                                         "servers"),
                                        f"{url.scheme}://{url.host}:{url.port}{url.pathname}: "
                                        f"an upstream URL with a path is not supported (the "
                                        f"request's path goes upstream as it came); expected "
                                        f"scheme, host and port"))
    if issues:
        raise ConfigError(issues)
    if len(upstreams) != 1:
        said = ", ".join(f"{s}://{h}:{p}" for s, h, p in upstreams)
        raise ConfigError([ctx.issue(("bindings", name, "options", "specs"),
                                     f"binding {name!r} calls {len(upstreams)} upstreams "
                                     f"({said}); one client calls one: give each its own "
                                     f"openapi client")])
    [url] = upstreams.values()
    tcp, tls = f"{name}.tcp_client", f"{name}.tls_client"
    composition = Composition(bindings={})
    checks = RequestChecks(name)
    for spec, op in operations:
        checks.add_responses(spec, op, [url])
    options: dict[str, Any] = {}
    checks.compose(options, composition, name)
    composition.bindings[name] = {"type": "http", "kind": "client",
                                  "exit": tls if url.secure else tcp}
    if options:
        composition.bindings[name]["options"] = options
    if url.secure:
        composition.bindings[tls] = tls_client(binding.vault, tcp, {"alpn": ["http/1.1"]})
    composition.bindings[tcp] = {"type": "tcp", "kind": "client",
                                 "options": {"host": url.host, "port": url.port}}
    composition.where[("bindings", tcp, "options")] = url.where
    composition.origins[name] = Origin(name, "client")
    composition.sources += [s.text.source.watch for s in specs.values() if s.text.source.watch]
    composition.summary = (f"openapi client {name}: {len(operations)} operation(s) of "
                           + ", ".join(f"{s.label} ({s.text.file})" for s in specs.values())
                           + f" to {url.scheme}://{url.host}:{url.port}"
                           + checks.summary("response"))
    return composition
