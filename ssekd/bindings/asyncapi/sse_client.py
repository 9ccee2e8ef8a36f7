"""The asyncapi client of an SSE spec: the sse client (under the binding's own name, what an
asyncapi server's operations exit to), http client and tcp client (and tls client, for `https`)
that relay the event streams of one upstream, the spec's operations' events checked against
their message payloads.

- Which upstream: the one URL of `options.specs.<label>.servers` (every spec of the binding
  the same), else the spec's one `http`/`https` server. A URL given need not be a server the
  spec declares: the spec's servers are where the API is served (by an asyncapi server), the URL
  where the events come from (Zilla's example points it at `${{env.SSE_SERVER_HOST}}`). The
  request path goes upstream as it came, so the URL has no path of its own.
- sse client: a route per SSE operation (the `x-zilla-sse` operation binding), its path the
  spec servers' pathnames and the operation's channel address (`{name}` a segment), exit the
  http client; a path no operation has is `404`, never relayed. `options.requests`: the same
  paths, each with a `json` model of its channel's message payloads (JSON Schema, `$ref`s
  resolved, `anyOf` the messages when there are several) in an inline catalog the client
  composes, `<binding>.payloads`. A channel whose messages' content type (the message's own,
  else the spec's `defaultContentType`) is not JSON, or whose payload is in another schema
  format, or a message without payload, is relayed unchecked.
- tls client (`https`): trusts the binding's `vault` when it has one, else the system's CA
  certificates; the server name is the URL's host.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from ssekd.bindings.asyncapi.http_operations import SSE_BINDING
from ssekd.bindings.asyncapi.payloads import JSON_SCHEMA_DRAFT, json_payloads
from ssekd.bindings.asyncapi.server import sse_operations
from ssekd.bindings.asyncapi.spec import DEFAULT_PORTS, Channel, Path_, Spec
from ssekd.bindings.specs.serving import tls_client
from ssekd.config.errors import ConfigError, ConfigIssue
from ssekd.config.model import Binding
from ssekd.config.origin import OperationOrigin, Origin, SpecRef
from ssekd.spi.compose import ComposeContext, Composition

SCHEMES = ("http", "https")


def relays_sse(binding: Binding, specs: Mapping[str, Spec]) -> bool:
    """Whether an asyncapi client stands for an SSE relay rather than a Kafka client: the URLs
    it names are `http`/`https`, or, naming none, its specs' servers are."""
    schemes: set[str] = set()
    for label, spec in specs.items():
        urls = binding.options["specs"][label].get("servers")
        if urls:
            schemes |= {urlsplit(str(u)).scheme.lower() for u in urls}
            continue
        try:
            schemes |= {s.protocol for s in spec.servers().values()}
        except ConfigError:
            return False  # the Kafka composition reports the spec's servers as it always did
    return bool(schemes) and schemes <= set(SCHEMES)


def compose_sse_client(ctx: ComposeContext, binding: Binding,
                       specs: Mapping[str, Spec]) -> Composition:
    name = binding.name
    issues: list[ConfigIssue] = []
    upstream = None
    try:
        upstream = _upstream(ctx, binding, specs)
    except ConfigError as e:
        issues.extend(e.issues)
    sse_name = name
    http_name, tls_name, tcp_name = (f"{name}.http_client", f"{name}.tls_client",
                                     f"{name}.tcp_client")
    catalog = f"{name}.payloads"
    composition = Composition(bindings={})
    routes: list[dict[str, Any]] = []
    requests: list[dict[str, Any]] = []
    subjects: dict[str, dict[str, Any]] = {}
    origins: dict[int, OperationOrigin] = {}
    taken: dict[str, str] = {}
    for spec in specs.values():
        try:
            operations = sse_operations(spec)
            prefixes = sorted({s.pathname.rstrip("/") for s in spec.servers().values()
                               if s.protocol in SCHEMES}) or [""]
        except ConfigError as e:
            issues.extend(e.issues)
            continue
        if not operations:
            issues.append(spec.issue(("operations",), f"no operation has the {SSE_BINDING} "
                                                      f"binding: binding {name!r} has nothing "
                                                      f"to relay"))
            continue
        for op in operations:
            address = op.channel.address
            if not isinstance(address, str) or not address.startswith("/"):
                issues.append(spec.issue(op.channel.path + ("address",),
                                         f"channel {op.channel.key!r} of SSE operation "
                                         f"{op.key!r}: expected an address that is a path "
                                         f"(starting with /), got {address!r}"))
                continue
            paths = [prefix + address for prefix in prefixes]
            index = len(routes)
            routes.append({"when": [{"path": p} for p in paths], "exit": http_name})
            composition.where[("bindings", name, "routes", index)] = spec.where(op.path)
            origins[index] = OperationOrigin(SpecRef(spec.label, spec.data), op.key,
                                             op.channel.key)
            try:
                schema = payload_schema(spec, op.channel)
            except ConfigError as e:
                issues.extend(e.issues)
                continue
            if schema is None:
                continue
            subject = f"{spec.label}.{op.channel.key}"
            subjects[subject] = {"schema": json.dumps(schema)}
            composition.where[("catalogs", catalog, "options", "subjects", subject)] = \
                spec.where(op.channel.path + ("messages",))
            for p in paths:
                if p in taken:
                    continue  # an earlier operation's route takes the path first
                taken[p] = op.key
                composition.where[("bindings", name, "options", "requests", len(requests))] = \
                    spec.where(op.channel.path + ("messages",))
                requests.append({"path": p, "content": {
                    "model": "json", "catalog": {catalog: [{"subject": subject}]}}})
    if issues or upstream is None:
        raise ConfigError(issues)
    scheme, host, port, where = upstream
    sse: dict[str, Any] = {"type": "sse", "kind": "client", "routes": routes}
    if requests:
        sse["options"] = {"requests": requests}
    composition.bindings[sse_name] = sse
    secure = scheme == "https"
    composition.bindings[http_name] = {"type": "http", "kind": "client",
                                       "exit": tls_name if secure else tcp_name}
    if secure:
        composition.bindings[tls_name] = tls_client(binding.vault, tcp_name, {"sni": [host]})
    composition.bindings[tcp_name] = {"type": "tcp", "kind": "client",
                                      "options": {"host": host, "port": port}}
    composition.where[("bindings", tcp_name, "options", "host")] = where
    composition.where[("bindings", tcp_name, "options", "port")] = where
    if subjects:
        composition.catalogs[catalog] = {"type": "inline", "options": {"subjects": subjects}}
    composition.origins[name] = Origin(name, "client", routes=origins)
    composition.sources += [s.source.watch for s in specs.values() if s.source.watch]
    checked = f"{len(requests)} checked against their payloads" if requests else "none checked"
    composition.summary = (f"asyncapi client {name}: relays {len(routes)} SSE operation(s) "
                           f"({checked}) from {scheme}://{host}:{port}, of "
                           + ", ".join(f"{s.label} ({s.file})" for s in specs.values()))
    return composition


def _upstream(ctx: ComposeContext, binding: Binding, specs: Mapping[str, Spec]
              ) -> tuple[str, str, int, tuple[Any, int | None]]:
    """(scheme, host, port, where it is said) of the one upstream."""
    found: dict[tuple[str, str, int], tuple[Any, int | None]] = {}
    issues: list[ConfigIssue] = []
    for label, spec in specs.items():
        urls = binding.options["specs"][label].get("servers")
        if urls:
            for i, url in enumerate(urls):
                path: Path_ = spec.option_path + ("servers", i)
                parts = urlsplit(str(url))
                scheme = parts.scheme.lower()
                try:
                    port = parts.port or DEFAULT_PORTS.get(scheme, 0)
                except ValueError:
                    port = -1
                if scheme not in SCHEMES or not parts.hostname or port <= 0:
                    issues.append(ctx.issue(path, f"expected the URL of an SSE upstream such "
                                                  f"as http://sse-server:8001, got {url!r}"))
                    continue
                if parts.path.strip("/") or parts.query:
                    issues.append(ctx.issue(path, f"{url}: an upstream URL without a path: "
                                                  f"the request's path goes upstream as it "
                                                  f"came"))
                    continue
                issue = ctx.issue(path, "")
                found.setdefault((scheme, parts.hostname, port), (issue.file, issue.line))
            continue
        try:
            servers = [s for s in spec.servers().values() if s.protocol in SCHEMES]
        except ConfigError as e:
            issues.extend(e.issues)
            continue
        for server in servers:
            address = server.address()
            if address is None:
                issues.append(spec.issue(server.path + ("host",),
                                         f"server {server.key!r}: a host variable has no "
                                         f"default; name the upstream with a URL in "
                                         f"options.specs.{label}.servers"))
                continue
            found.setdefault((server.protocol, *address), spec.where(server.path))
    if issues:
        raise ConfigError(issues)
    if len(found) != 1:
        said = ", ".join(f"{s}://{h}:{p}" for s, h, p in found) or "none"
        raise ConfigError([ctx.issue(("bindings", binding.name, "options", "specs"),
                                     f"binding {binding.name!r} relays events from one "
                                     f"upstream; its specs name {said}: give each upstream "
                                     f"its own asyncapi client, or name one URL in "
                                     f"servers")])
    [((scheme, host, port), where)] = found.items()
    return scheme, host, port, where


def payload_schema(spec: Spec, channel: Channel) -> dict[str, Any] | None:
    """The JSON Schema an event of `channel` must satisfy (standing alone: references
    resolved), or None when its messages cannot be checked as JSON (module docstring)."""
    schema = json_payloads(spec, [(m.data, m.path) for m in channel.messages])
    if schema is None:
        return None
    if not isinstance(schema, Mapping):
        return {"$schema": JSON_SCHEMA_DRAFT, "allOf": [schema]}
    return {"$schema": JSON_SCHEMA_DRAFT, **schema}
