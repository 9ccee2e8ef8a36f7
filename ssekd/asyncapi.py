"""An AsyncAPI 3.0 document for a config: what a client of its event streams can rely on.

A channel is a path that reaches an event stream through every binding on the way: from a tcp
listener's port (through a tls binding when there is one), an http route whose `:path`,
`:scheme` and `:method` let the request through to an sse binding, to the sse-kafka route that
takes the path. First match wins at every step, so a path an earlier route takes elsewhere (the
demo's static files, the health paths, this document) is not advertised, and a sse-kafka route
`/{topic}` reached only through an http route for `/events` is the channel `/events` of topic
`events`. `with` values are expanded with what the path captures (`{name}` for a part the path
leaves open), so no title says `${params.topic}`; a header or query value a route reads
(`${headers.name}`, `${query.name}`) is named in words, in the channel's description, and
for the query in the operation's http binding (its `query` schema). The routes of an sse client
an asyncapi client composed (an SSE spec's operations relayed from an upstream) end a path as an
sse-kafka route does; their channels are the spec's (below).

A channel's messages are the events a stream sends - a record (`event` absent, `data` the
record's value; the payload schema from the topic's model when the channel's topic is one with
a model, its `schemaFormat` the JSON Schema version the schema itself declares), `delete` for a
tombstone (`data` the base64url key), and `challenge` when the route is guarded by a JWT guard
with `challenge` (the client answers with a POST). Each channel has one `receive` operation,
secured by the route's guard (a bearer JWT) when it has one, and lists the servers (listener
ports) it is reached on.

Each http-kafka route's paths are channels too (`endpoints`), by the same rule: a path and method
that reaches the route through every binding on the way (an http route whose `:method` lets that
method through; a `when` without a method counts as a `POST` for a write, a `GET` for a fetch),
where no earlier route takes it first, on the servers it is reached on. A `produce` route's
operation is `send` (the request body becomes a record; with `reply-to`, the reply is the
operation's `reply`; its async location, a `GET` of the same route, is a `receive`), a `fetch`
route's is `receive`, each with the HTTP method as its `http` operation binding.

Schemas come from the catalogs through `schema_of`, so the daemon can serve what it holds (never
waiting on a registry on the reactor thread) while `ssekd asyncapi` may ask a registry.

A route or listener composed from an AsyncAPI spec (an asyncapi binding, `Binding.origin`) is
written as the spec says it: its channel, operation, messages and servers as they are in the
spec, under the spec's names, with the components they refer to (a name two specs both use for
different things gets the spec's label in front). That holds for the http-kafka routes of a
spec's HTTP operations too: a write whose reply is polled brings its reply channel and the
operation that receives from it.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jsonschema
import yaml

from ssekd.catalogs.catalog import Catalog, Schema
from ssekd.catalogs.models import ModelConfig
from ssekd.config.model import Binding, Config, Route
from ssekd.config.origin import OperationOrigin, Origin, ServerOrigin
from ssekd.event_ids import MAX_STREAM_TOPICS
from ssekd.patterns import (
    Pattern,
    RequestValues,
    Unresolvable,
    guard_references,
    request_references,
    substitute,
)

ASYNCAPI_VERSION = "3.0.0"
#: How the daemon or the command finds a model's schema: None when not (yet) known.
SchemaOf = Callable[[Catalog, ModelConfig], "Schema | None"]

_PARAM = re.compile(r"\{([A-Za-z0-9_-]+)\}")
_KEY = re.compile(r"[^A-Za-z0-9_.-]")
_CHALLENGE = {"type": "object", "required": ["method", "headers"], "properties": {
    "method": {"const": "POST"},
    "headers": {"type": "object", "properties": {
        "content-type": {"const": "application/x-challenge-response"}}}}}
#: sse-kafka's topic when a route's `with` names none (its default, as in Zilla).
DEFAULT_TOPIC = "${params.topic}"
#: The http server's own paths, answered before its routes (its `options.health` defaults).
_HEALTH_PATHS = ("/health/live", "/health/ready")
#: The JSON Schema version of each jsonschema validator, as `schemaFormat` writes it.
_JSON_SCHEMA_VERSIONS = {"Draft3Validator": "draft-03", "Draft4Validator": "draft-04",
                         "Draft6Validator": "draft-06", "Draft7Validator": "draft-07",
                         "Draft201909Validator": "2019-09", "Draft202012Validator": "2020-12"}


#: Listening addresses a client on this machine reaches as `localhost`, so that is the host
#: shown: every address, and IPv4's loopback, where the development configs (etc/) listen. A
#: client that tries `::1` first (curl, Chromium) is refused there and goes on to 127.0.0.1; a TLS
#: client sends `localhost` as its server name, which an IP address would not give it.
LOCALHOST_SHOWN = frozenset({"0.0.0.0", "::", "", "127.0.0.1"})  # noqa: S104 (only described)


@dataclass(frozen=True)
class Server:
    """One listening port, as a client reaches it."""

    key: str
    host: str
    port: int
    secure: bool
    binding: str
    #: The spec server it is, when an asyncapi server composed the listener.
    spec: ServerOrigin | None = None

    @property
    def url(self) -> str:
        return f"{'https' if self.secure else 'http'}://{self.host}:{self.port}"


@dataclass
class Channel:
    """A path that reaches an sse-kafka route's stream, and what it streams."""

    key: str
    address: str
    #: The sse-kafka binding and the index of its route that takes `address`.
    binding: str
    route: int
    #: The route's topic with the path's captures put in (`{name}` where the path leaves one
    #: open); "" for the route of a composed sse client (an upstream's events, not a topic).
    topic: str
    #: The topic exactly as configured, when no capture is left in it (models are looked up by it).
    literal_topic: str | None
    #: guard name -> roles, from the http route and the sse-kafka route together.
    guarded: dict[str, tuple[str, ...]]
    servers: list[Server] = field(default_factory=list)

    @property
    def parameters(self) -> list[str]:
        return _PARAM.findall(self.address)


def servers(config: Config) -> list[Server]:
    """Every port of every tcp server, `secure` when its connections go through a tls binding."""
    bindings = config.bindings
    found: list[Server] = []
    for b in bindings.values():
        if b.type != "tcp" or b.kind != "server":
            continue
        host = str(b.options.get("host", "0.0.0.0"))  # noqa: S104 (only described here)
        shown = "localhost" if host in LOCALHOST_SHOWN else host
        composed = b.origin.servers if isinstance(b.origin, Origin) else ()
        for port in _ports(b.options.get("port")):
            for exit_name in _tcp_exits(b, port):
                nxt = bindings.get(exit_name)
                secure = nxt is not None and nxt.type == "tls"
                specified = [o for o in composed if o.port == port]
                found += [Server(o.server, shown, port, secure, b.name, o) for o in specified]
                if not specified:
                    found.append(Server(_KEY.sub("_", f"{b.name}_{port}"), shown, port, secure,
                                        b.name))
                break
    return found


def channels(config: Config) -> list[Channel]:
    """Every path that reaches an sse-kafka route, in config order (see the module's doc)."""
    bindings = config.bindings
    found: dict[tuple[str, int, str], Channel] = {}
    for server in servers(config):
        listener = bindings[server.binding]
        for http in _http_servers(config, _tcp_exits(listener, server.port), server.secure):
            for address, sse_kafka, i, guarded in _stream_paths(config, http, server.secure):
                route = bindings[sse_kafka].routes[i]
                slot = (sse_kafka, i, address)
                channel = found.get(slot)
                if channel is None and _spec_relay(bindings[sse_kafka]):
                    # an upstream's events, described by the spec (`document`): no topic
                    channel = found[slot] = Channel("", address, sse_kafka, i, "", None,
                                                    {**guarded, **route.guarded})
                if channel is None:
                    spec = (route.with_ or {}).get("topic", DEFAULT_TOPIC)
                    template = ",".join(map(str, spec)) if isinstance(spec, list) else str(spec)
                    topic = ",".join(_expand(str(t), route, address) for t in spec) \
                        if isinstance(spec, list) else _expand(template, route, address)
                    # a model is looked up for one topic: a list has none
                    literal = None if "${" in template or isinstance(spec, list) else template
                    if literal is None and not _PARAM.search(topic) \
                            and request_references(template) == (set(), set()):
                        literal = topic  # every capture the topic uses is fixed by the path
                    channel = found[slot] = Channel(
                        "", address, sse_kafka, i, topic, literal,
                        {**guarded, **route.guarded})
                if server not in channel.servers:
                    channel.servers.append(server)
    result = sorted(found.values(), key=lambda c: (list(bindings).index(c.binding), c.route,
                                                   c.address))
    used: set[str] = set()
    for c in result:
        key = _KEY.sub("_", f"{c.binding}_{c.route}")
        n = 1
        while key in used:
            n += 1
            key = _KEY.sub("_", f"{c.binding}_{c.route}_{n}")
        used.add(key)
        c.key = key
    return result


def readiness_urls(config: Config) -> list[str]:
    """The readiness URL (`options.health` of an http server) on each plain port that has one:
    what a balancer would ask before sending a client."""
    urls: list[str] = []
    for server in servers(config):
        if server.secure:
            continue
        listener = config.bindings[server.binding]
        for http in _http_servers(config, _tcp_exits(listener, server.port), False):
            health = http.options.get("health")
            if isinstance(health, Mapping):
                urls.append(f"{server.url}{health.get('readiness', _HEALTH_PATHS[1])}")
                break
    return urls


def _tcp_exits(b: Binding, port: int) -> list[str]:
    """Where a tcp server's connections on `port` can go: the first route for that port (and
    those after it while a route matches only some peers, by `cidr`), else its `exit`."""
    exits: list[str] = []
    for route in b.routes:
        for when in route.when or [{}]:
            if "port" in when and port not in _ports(when["port"]):
                continue
            if route.exit:
                exits.append(route.exit)
            if "cidr" not in when:
                return exits
            break
    if b.exit:
        exits.append(b.exit)
    return exits


def _http_servers(config: Config, names: Sequence[str], secure: bool) -> Iterator[Binding]:
    """The http servers that connections handed to `names` reach (through a tls binding: any
    of its routes, by ALPN or server name, or its exit)."""
    for name in names:
        b = config.bindings.get(name)
        if b is None:
            continue
        if b.type == "http" and b.kind == "server":
            yield b
        elif b.type == "tls" and b.kind == "server" and secure:
            yield from _http_servers(config, [r.exit for r in b.routes if r.exit] +
                                     ([b.exit] if b.exit else []), secure)


def _stream_paths(config: Config, http: Binding, secure: bool
                  ) -> Iterator[tuple[str, str, int, dict[str, tuple[str, ...]]]]:
    """(address, sse-kafka binding, its route index, guards of the http route) for each path
    that this http server hands to an sse binding whose exit is an sse-kafka binding, and that
    no earlier route (or the server's own paths) takes first."""
    scheme = "https" if secure else "http"
    own = [Pattern.compile(p) for p in _own_paths(http)]
    earlier: list[Pattern | None] = []  # `:path` patterns of earlier conditions (None: any)
    routes: list[tuple[Route | None, str | None]] = [(r, r.exit) for r in http.routes]
    if http.exit:
        routes.append((None, http.exit))
    for route, exit_name in routes:
        whens = route.when if route is not None and route.when else [{}]
        for when in whens:
            headers = {str(k).lower(): str(v) for k, v in (when.get("headers") or {}).items()}
            if not _allows(headers.get(":scheme"), scheme) or \
                    not _allows(headers.get(":method"), "GET"):
                continue
            path = Pattern.compile(headers[":path"]) if ":path" in headers else None
            sse = config.bindings.get(exit_name or "")
            target = config.bindings.get(sse.exit or "") if sse is not None else None
            if sse is not None and sse.type == "sse" and sse.kind == "server" and \
                    target is not None and (target.type == "sse-kafka"
                                            or _spec_relay(target)):
                guarded = dict(route.guarded) if route is not None else {}
                for address, i in _sse_kafka_paths(target, path):
                    if not any(_covers(p, address) for p in own) and \
                            not any(_covers(p, address) for p in earlier):
                        yield address, target.name, i, guarded
            earlier.append(path)


def _spec_relay(b: Binding) -> bool:
    """Whether `b` is an sse client an asyncapi client composed: its routes are the spec's SSE
    operations (`Origin.routes`), written as the spec says them like a composed sse-kafka's."""
    return b.type == "sse" and b.kind == "client" and isinstance(b.origin, Origin) \
        and bool(b.origin.routes)


def _own_paths(http: Binding) -> list[str]:
    """Paths an http server answers itself, before its routes."""
    paths: list[str] = []
    document = http.options.get("asyncapi")
    if isinstance(document, Mapping) and "path" in document:
        paths.append(str(document["path"]))
    health = http.options.get("health")
    if isinstance(health, Mapping):
        paths += [str(health.get("liveness", _HEALTH_PATHS[0])),
                  str(health.get("readiness", _HEALTH_PATHS[1]))]
    return paths


def _sse_kafka_paths(b: Binding, http_path: Pattern | None) -> Iterator[tuple[str, int]]:
    """(address, route index) for each sse-kafka route path an http `:path` pattern lets
    through, where no earlier route of the binding takes every such path first."""
    earlier: list[Pattern] = []
    for i, route in enumerate(b.routes):
        for when in route.when:
            text = when.get("path")
            if not isinstance(text, str):
                continue
            pattern = Pattern.compile(text)
            address = _meet(http_path, pattern)
            if address is not None and not any(_covers(p, address) for p in earlier):
                yield address, i
            earlier.append(pattern)


@dataclass
class Endpoint:
    """A path and method that reaches an http-kafka route, and what the route does with it."""

    key: str
    address: str
    #: The method of the route's `when` (None: any).
    method: str | None
    #: The http-kafka binding, the index of its route and of the `when` that takes `address`.
    binding: str
    route: int
    when: int
    #: `produce` or `fetch`.
    capability: str
    #: The route's topic with the path's captures put in, and its reply-to topic.
    topic: str
    reply_to: str | None
    #: A `GET` of a produce route's async location: the reply to an earlier write.
    polls: bool
    #: A fetch that answers the latest value of every key its filters take (`merge`), not one.
    merged: bool
    #: guard name -> roles, from the http route and the http-kafka route together.
    guarded: dict[str, tuple[str, ...]]
    servers: list[Server] = field(default_factory=list)

    @property
    def sends(self) -> bool:
        """Whether a request here writes a record."""
        return self.capability == "produce" and not self.polls


def endpoints(config: Config) -> list[Endpoint]:
    """Every path and method that reaches an http-kafka route, in config order (see the
    module's doc)."""
    bindings = config.bindings
    found: dict[tuple[str, int, int, str], Endpoint] = {}
    for server in servers(config):
        listener = bindings[server.binding]
        for http in _http_servers(config, _tcp_exits(listener, server.port), server.secure):
            for address, target, i, j, guarded in _http_kafka_paths(config, http,
                                                                     server.secure):
                slot = (target, i, j, address)
                endpoint = found.get(slot)
                if endpoint is None:
                    route = bindings[target].routes[i]
                    w = route.with_ or {}
                    when = route.when[j]
                    method = str(when["method"]).upper() if "method" in when else None
                    capability = str(w["capability"])
                    reply_to = w.get("reply-to")
                    endpoint = found[slot] = Endpoint(
                        "", address, method, target, i, j, capability,
                        _expand(str(w.get("topic", "")), route, address),
                        None if reply_to is None else str(reply_to),
                        capability == "produce" and method == "GET" and "async" in w,
                        capability == "fetch" and "merge" in w, {**guarded, **route.guarded})
                if server not in endpoint.servers:
                    endpoint.servers.append(server)
    result = sorted(found.values(), key=lambda e: (list(bindings).index(e.binding), e.route,
                                                   e.when, e.address))
    used: set[str] = set()
    for e in result:
        key = base = _KEY.sub("_", f"{e.binding}_{e.route}" + (f"_{e.when}" if e.when else ""))
        n = 1
        while key in used:
            n += 1
            key = f"{base}_{n}"
        used.add(key)
        e.key = key
    return result


def _http_kafka_paths(config: Config, http: Binding, secure: bool
                      ) -> Iterator[tuple[str, str, int, int, dict[str, tuple[str, ...]]]]:
    """(address, http-kafka binding, route index, `when` index, guards of the http route) for
    each `when` of an http-kafka route that this http server hands a request to: its method
    passes an http route to that binding, and neither an earlier http route for that method
    (or the server's own paths) nor an earlier route of the binding takes the path first."""
    scheme = "https" if secure else "http"
    own = [Pattern.compile(p) for p in _own_paths(http)]
    routes: list[tuple[Route | None, str | None]] = [(r, r.exit) for r in http.routes]
    if http.exit:
        routes.append((None, http.exit))
    for target in config.bindings.values():
        if target.type != "http-kafka":
            continue
        taken: list[tuple[str | None, Pattern]] = []  # earlier `when`s of the binding
        for i, route in enumerate(target.routes):
            capability = (route.with_ or {}).get("capability")
            for j, kafka_when in enumerate(route.when):
                text = kafka_when.get("path")
                if capability not in ("produce", "fetch") or not isinstance(text, str):
                    continue
                method = str(kafka_when["method"]).upper() if "method" in kafka_when else None
                pattern = Pattern.compile(text)
                sent = method or ("POST" if capability == "produce" else "GET")
                shadowed = [p for m, p in taken if m is None or m == sent]
                taken.append((method, pattern))
                earlier: list[Pattern | None] = []
                for http_route, exit_name in routes:
                    for when in http_route.when if http_route and http_route.when else [{}]:
                        headers = {str(k).lower(): str(v)
                                   for k, v in (when.get("headers") or {}).items()}
                        if not _allows(headers.get(":scheme"), scheme) or \
                                not _allows(headers.get(":method"), sent):
                            continue
                        path = Pattern.compile(headers[":path"]) if ":path" in headers else None
                        address = _meet(path, pattern) if exit_name == target.name else None
                        if address is not None and \
                                not any(_covers(p, address) for p in [*own, *earlier,
                                                                      *shadowed]):
                            yield (address, target.name, i, j,
                                   dict(http_route.guarded) if http_route else {})
                        earlier.append(path)


def _samples(address: str) -> tuple[str, str]:
    """Two concrete paths of an address: its `{name}` parts filled two different ways."""
    return (_PARAM.sub("a", address).replace("*", ""),
            _PARAM.sub("zz-9", address).replace("*", "x/y"))


def _meet(outer: Pattern | None, inner: Pattern) -> str | None:
    """The address of the paths both patterns match: the narrower of the two, or None when they
    share none (as far as two samples of each tell; patterns here are paths with `{name}`
    segments and a trailing `*` at most)."""
    if outer is None:
        return inner.text
    if all(outer.match(s) is not None for s in _samples(inner.text)):
        return inner.text
    if all(inner.match(s) is not None for s in _samples(outer.text)):
        return outer.text
    return None


def _covers(pattern: Pattern | None, address: str) -> bool:
    """Whether `pattern` matches every path of `address` (so an earlier route takes them all)."""
    return pattern is None or all(pattern.match(s) is not None for s in _samples(address))


def _allows(pattern: str | None, value: str) -> bool:
    return pattern is None or Pattern.compile(pattern, ignore_case=True).match(value) is not None


def _expand(template: str, route: Route, address: str) -> str:
    """`template` with `${params.x}` from what `address` captures in the route's path (a part
    the address leaves open stays `{name}`), and a guard's identity named in words."""
    params: dict[str, str] = {}
    for when in route.when:
        text = when.get("path")
        captured = Pattern.compile(text).match(address) if isinstance(text, str) else None
        if captured is not None:
            params = captured
            break
    identities = {g: f"{{identity of guard {g}}}" for g in guard_references(template)}
    headers, query = request_references(template)
    request = RequestValues({h: f"{{header {h}}}" for h in headers},
                            {q: f"{{query {q}}}" for q in query})
    try:
        return substitute(template, params, identities, request=request)
    except Unresolvable:
        return template


def request_values(route: Route) -> tuple[list[str], list[str]]:
    """The request headers and query parameters a route's `with` reads (`${headers.name}`,
    `${query.name}`, sse-kafka's additions): a client must send them, or gets a `404`."""
    w = route.with_ or {}
    topic = w.get("topic", DEFAULT_TOPIC)
    texts = [str(t) for t in topic] if isinstance(topic, list) else [str(topic)]
    for f in w.get("filters") or ():
        texts += [str(f["key"])] if "key" in f else []
        texts += [str(v) for v in (f.get("headers") or {}).values()]
        for wanted in (f.get("value") or {}).values():
            texts += [str(v) for v in (wanted if isinstance(wanted, list) else [wanted])]
    headers: set[str] = set()
    query: set[str] = set()
    for text in texts:
        h, q = request_references(text)
        headers |= h
        query |= q
    return sorted(headers), sorted(query)


def held_schema(catalog: Catalog, model: ModelConfig) -> Schema | None:
    """What a catalog already holds for a model (the running daemon's view: no waiting)."""
    if model.schema_id is not None:
        return catalog.known_id(model.schema_id)
    assert model.subject is not None
    return catalog.peek(model.subject, model.version)


def fetched_schema(catalog: Catalog, model: ModelConfig) -> Schema | None:
    """The schema, asking the catalog and waiting (for the command line, never the reactor)."""
    if model.schema_id is not None:
        return catalog.known_id(model.schema_id)
    assert model.subject is not None
    return catalog.fetch_blocking(model.subject, model.version)


def document(config: Config, catalogs: Mapping[str, Catalog],
             schema_of: SchemaOf = held_schema) -> dict[str, Any]:
    """The AsyncAPI 3.0 document of `config`, as plain data (dump it as YAML or JSON)."""
    found = channels(config)
    docs_channels: dict[str, Any] = {}
    operations: dict[str, Any] = {}
    schemes: dict[str, Any] = {}
    from_specs = _FromSpecs()
    for c in found:
        route = config.bindings[c.binding].routes[c.route]
        origin = config.bindings[c.binding].origin
        if isinstance(origin, Origin) and c.route in origin.routes:
            from_specs.operation(origin.routes[c.route])
            continue
        models = _models(config, route.exit, c.literal_topic)
        messages = {"record": _record(models.get("value"), catalogs, schema_of),
                    "delete": copy.deepcopy(_DELETE)}
        security = []
        for guard_name, roles in c.guarded.items():
            guard = config.guards.get(guard_name)
            schemes[guard_name] = {
                "type": "http", "scheme": "bearer", "bearerFormat": "JWT",
                "description": f"A JWT checked by guard `{guard_name}`"
                               + (f" (issuer {guard.options['issuer']})"
                                  if guard and guard.options.get("issuer") else "")
                               + ". A browser's EventSource cannot set headers: where "
                                 "the http binding allows it, send it as a query "
                                 "parameter or cookie instead."}
            security.append({"$ref": f"#/components/securitySchemes/{guard_name}"})
            if guard is not None and guard.options.get("challenge"):
                messages["challenge"] = _challenge(guard.options["challenge"])
            if roles:
                messages["record"]["description"] += \
                    f" Needs the role(s) {', '.join(roles)} of guard `{guard_name}`."
        channel: dict[str, Any] = {
            "address": c.address,
            "title": f"{c.topic} as Server-Sent Events",
            "description": f"Records of Kafka topic `{c.topic}` as Server-Sent Events (route "
                           f"{c.route} of sse-kafka binding `{c.binding}`). Each event's `id` "
                           f"says where the stream is; a client that reconnects with it "
                           f"(`Last-Event-ID`) resumes exactly there.",
            "servers": [{"$ref": f"#/servers/{s.key}"} for s in c.servers],
            "messages": messages}
        if c.parameters:
            channel["parameters"] = {p: {"description": f"`{{{p}}}` of the path"
                                                        + (", the topic." if c.topic == f"{{{p}}}"
                                                           else ".")}
                                     for p in c.parameters}
        docs_channels[c.key] = channel
        operation: dict[str, Any] = {
            "action": "receive", "channel": {"$ref": f"#/channels/{c.key}"},
            "summary": f"Stream {c.topic}",
            "messages": [{"$ref": f"#/channels/{c.key}/messages/{m}"} for m in messages]}
        if isinstance((route.with_ or {}).get("topic"), list):
            _several_topics(channel, messages, route.with_ or {})
        headers, query = request_values(route)
        if headers or query:
            asked = [f"the header `{h}`" for h in headers] \
                + [f"the query parameter `{q}`" for q in query]
            channel["description"] += (f" The request must carry {' and '.join(asked)} (what "
                                       f"the stream reads; without it, or with a control "
                                       f"character in it, the answer is 404).")
        if query:
            operation["bindings"] = {"http": {
                "method": "GET", "bindingVersion": "0.3.0",
                "query": {"type": "object", "required": query, "properties": {
                    q: {"type": "string", "pattern": "^[^\\x00-\\x1f\\x7f]*$"}
                    for q in query}}}}
        if security:
            operation["security"] = security
        operations[f"receive_{c.key}"] = operation
    _http_kafka(config, docs_channels, operations, schemes, from_specs)
    doc: dict[str, Any] = {
        "asyncapi": ASYNCAPI_VERSION,
        "info": {"title": config.namespace, "version": "1.0.0",
                 "description": "Kafka topics served as Server-Sent Events by ssekd "
                                "(generated from its config)."},
        "defaultContentType": from_specs.content_type(not docs_channels)}
    listed: dict[str, Any] = {}
    for s in servers(config):
        if s.spec is not None:
            from_specs.server(s.spec)
            continue
        listed[s.key] = {"host": f"{s.host}:{s.port}",
                         "protocol": "https" if s.secure else "http",
                         "description": f"tcp binding `{s.binding}` (port {s.port})"
                                        + (" through TLS" if s.secure else "") + "."}
    components: dict[str, Any] = {"securitySchemes": schemes} if schemes else {}
    from_specs.merge(listed, docs_channels, operations, components)
    if listed:
        doc["servers"] = listed
    doc["channels"] = docs_channels
    doc["operations"] = operations
    if components:
        doc["components"] = components
    return doc


class _FromSpecs:
    """The parts of AsyncAPI specs that composed routes and listeners stand for, gathered per
    spec and written into the document as the specs say them."""

    def __init__(self) -> None:
        #: label -> (spec document, channel keys, operation keys, server keys)
        self.specs: dict[str, tuple[Mapping[str, Any], list[str], list[str], list[str]]] = {}

    def _of(self, label: str, document: Mapping[str, Any]
            ) -> tuple[Mapping[str, Any], list[str], list[str], list[str]]:
        return self.specs.setdefault(label, (document, [], [], []))

    def operation(self, origin: OperationOrigin) -> None:
        _, chans, ops, _ = self._of(origin.spec.label, origin.spec.document)
        for channel in (origin.channel, *origin.channels):
            if channel not in chans:
                chans.append(channel)
        for operation in (origin.operation, *origin.operations):
            if operation not in ops:
                ops.append(operation)

    def server(self, origin: ServerOrigin) -> None:
        _, _, _, keys = self._of(origin.spec.label, origin.spec.document)
        if origin.server not in keys:
            keys.append(origin.server)

    def content_type(self, only_specs: bool) -> str:
        """The spec's `defaultContentType` when the document is one spec's (messages without
        their own content type keep their meaning), else JSON."""
        types = {str(d.get("defaultContentType", "application/json"))
                 for d, chans, _, _ in self.specs.values() if chans}
        return types.pop() if only_specs and len(types) == 1 else "application/json"

    def merge(self, servers: dict[str, Any], channels: dict[str, Any],
              operations: dict[str, Any], components: dict[str, Any]) -> None:
        """Add each spec's parts; a name already taken by something else gets the spec's
        label in front, and the spec's references follow the new name."""
        for label, (document, chans, ops, server_keys) in self.specs.items():
            spec_channels = document.get("channels") or {}
            spec_operations = document.get("operations") or {}
            spec_servers = document.get("servers") or {}
            referred = set(server_keys)
            for key in chans:
                for ref in (spec_channels.get(key) or {}).get("servers") or ():
                    if isinstance(ref, Mapping) and str(ref.get("$ref", "")).startswith(
                            "#/servers/"):
                        referred.add(str(ref["$ref"]).split("/", 2)[2])
            wanted: list[tuple[dict[str, Any], str, str, Any]] = []
            for target, section, keys, source in (
                    (servers, "servers", sorted(referred), spec_servers),
                    (channels, "channels", chans, spec_channels),
                    (operations, "operations", ops, spec_operations)):
                wanted += [(target, f"#/{section}", k, source[k]) for k in keys if k in source]
            for section, entries in (document.get("components") or {}).items():
                if isinstance(entries, Mapping):
                    into = components.setdefault(section, {})
                    wanted += [(into, f"#/components/{section}", k, v)
                               for k, v in entries.items()]
            # A part is the same as one already there only once the references in it point
            # where they will: rename until no new clash appears (each round renames more).
            renames: dict[str, str] = {}
            for _ in range(len(wanted) + 1):  # a rename per round at least, or it is done
                found: dict[str, str] = {}
                for target, prefix, key, value in wanted:
                    name = _free(target, key, _renamed(copy.deepcopy(value), renames), label)
                    if name != key:
                        found[f"{prefix}/{key}"] = f"{prefix}/{name}"
                if found == renames:
                    break
                renames = found
            for target, prefix, key, value in wanted:
                name = renames.get(f"{prefix}/{key}", f"{prefix}/{key}").rsplit("/", 1)[1]
                target[name] = _renamed(copy.deepcopy(value), renames)
            for section in [k for k, v in components.items() if not v]:
                del components[section]


def _free(target: Mapping[str, Any], key: str, value: Any, label: str) -> str:
    """`key`, unless `target` holds something else under it: then `<label>_<key>` (with a
    number after it while that is taken too)."""
    if key not in target or target[key] == value:
        return key
    name, n = _KEY.sub("_", f"{label}_{key}"), 1
    while name in target and target[name] != value:
        n += 1
        name = _KEY.sub("_", f"{label}_{key}_{n}")
    return name


def _renamed(value: Any, renames: Mapping[str, str]) -> Any:
    """`value` with its `$ref`s pointing at the new names of renamed parts."""
    if isinstance(value, dict):
        ref = value.get("$ref")
        if isinstance(ref, str):
            for old, new in renames.items():
                if ref == old or ref.startswith(old + "/"):
                    value["$ref"] = new + ref[len(old):]
                    break
        for k, v in value.items():
            value[k] = _renamed(v, renames)
    elif isinstance(value, list):
        return [_renamed(v, renames) for v in value]
    return value


class _NoAliases(yaml.SafeDumper):
    """Every value written out in full: a reader of the document should not have to follow
    `&id001`/`*id001` anchors that PyYAML adds for objects it meets twice."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _http_kafka(config: Config, channels: dict[str, Any], operations: dict[str, Any],
                schemes: dict[str, Any], from_specs: _FromSpecs) -> None:
    """The channels and operations of the http-kafka routes (see the module docstring); a
    route composed from a spec's HTTP operation is that operation, as the spec says it."""
    for e in endpoints(config):
        route = config.bindings[e.binding].routes[e.route]
        origin = config.bindings[e.binding].origin
        if isinstance(origin, Origin) and e.route in origin.routes:
            from_specs.operation(origin.routes[e.route])
            continue
        w = route.with_ or {}
        security = []
        for guard_name in e.guarded:
            guard = config.guards.get(guard_name)
            issuer = guard.options.get("issuer") if guard is not None else None
            schemes.setdefault(guard_name, {
                "type": "http", "scheme": "bearer", "bearerFormat": "JWT",
                "description": f"A JWT checked by guard `{guard_name}`"
                               + (f" (issuer {issuer})" if issuer else "") + "."})
            security.append({"$ref": f"#/components/securitySchemes/{guard_name}"})
        messages = _http_kafka_messages(e.capability, e.topic, w, e.polls)
        channel: dict[str, Any] = {
            "address": e.address,
            "title": f"{e.topic} over HTTP ({e.capability})",
            "description": f"Route {e.route} of http-kafka binding `{e.binding}`"
                           + (f", {e.method}" if e.method else "") + ".",
            "servers": [{"$ref": f"#/servers/{s.key}"} for s in e.servers],
            "messages": messages}
        params = _PARAM.findall(e.address)
        if params:
            channel["parameters"] = {p: {"description": f"`{{{p}}}` of the path."}
                                     for p in params}
        channels[e.key] = channel
        operation: dict[str, Any] = {
            "action": "send" if e.sends else "receive",
            "channel": {"$ref": f"#/channels/{e.key}"},
            "summary": (f"Write a record to {e.topic}" if e.sends else
                        f"The reply to an earlier write to {e.topic}" if e.polls else
                        f"Read the latest values of {e.topic}"),
            "messages": [{"$ref": f"#/channels/{e.key}/messages/"
                                  f"{'request' if e.sends else 'reply'}"}]}
        if e.method is not None:
            operation["bindings"] = {"http": {"method": e.method}}
        if e.sends and "reply" in messages:
            operation["reply"] = {
                "channel": {"$ref": f"#/channels/{e.key}"},
                "messages": [{"$ref": f"#/channels/{e.key}/messages/reply"}]}
        if security:
            operation["security"] = security
        operations[f"{operation['action']}_{e.key}"] = operation


def _http_kafka_messages(capability: str, topic: str, w: Mapping[str, Any],
                         polls: bool) -> dict[str, Any]:
    if capability == "fetch":
        merged = "merge" in w
        return {"reply": {
            "name": "values" if merged else "value", "title": "Latest values" if merged
            else "Latest value",
            "summary": (f"A JSON array of the latest value of each key of {topic} the route's "
                        f"filters take." if merged else
                        f"The latest value of {topic} the route's filters take (404 when none)."),
            "description": "ETag is the topic's progress (with `/<etag>` for one record with "
                           "an etag header); If-None-Match answers 304 when nothing it shows "
                           "changed, and Prefer: wait=N holds the request until it does.",
            **({"contentType": "application/json", "payload": {"type": "array"}}
               if merged else {})}}
    reply_to = w.get("reply-to")
    messages: dict[str, Any] = {}
    if not polls:
        messages["request"] = {
            "name": "request", "title": "Write",
            "summary": f"The body becomes the value of a record of {topic}; request headers "
                       f"become its headers.",
            "description": "Answered once the broker acknowledged the write"
                           + (f": with the reply on {reply_to} that carries its correlation id"
                              if reply_to else " (204)")
                           + ". Send an Idempotency-Key to make a retry safe; If-Match "
                             "<progress>/<etag> is forwarded as the record's if-match header."}
    if reply_to:
        messages["reply"] = {
            "name": "reply", "title": "Reply",
            "summary": f"The reply on {reply_to}: its :status header is the status, its other "
                       f"headers and value the response"
                       + (" (202 with the location again while there is none yet)."
                          if polls else ".")}
    return messages


def to_yaml(doc: Mapping[str, Any]) -> str:
    return yaml.dump(dict(doc), Dumper=_NoAliases, sort_keys=False, allow_unicode=True,
                     width=100)


def to_json(doc: Mapping[str, Any]) -> str:
    return json.dumps(doc, indent=2, ensure_ascii=False)


# -- pieces ------------------------------------------------------------------------------------

_DELETE = {"name": "delete", "title": "Tombstone",
           "summary": "The record's key was deleted (a Kafka tombstone).",
           "contentType": "text/plain",
           "payload": {"type": "string", "description": "The key, base64url-encoded; no data "
                                                        "when the key is null."}}


def _several_topics(channel: dict[str, Any], messages: dict[str, Any],
                    with_: Mapping[str, Any]) -> None:
    """What a client of a stream of several topics (an ssekd addition) sees differently: which
    topic an event is of, and an id that carries every topic's progress."""
    by_field = (with_.get("event") or {}).get("topic") == "field"
    channel["title"] = f"{channel['title'].removesuffix(' as Server-Sent Events')} " \
                       "(several topics) as Server-Sent Events"
    channel["description"] += (
        f" The stream carries several topics (at most {MAX_STREAM_TOPICS}; an item from the "
        "path is a comma list of them, more is 400): each event's `id` carries the progress "
        "of every topic, so a resume loses nothing in any of them (docs/protocol.md, an ssekd "
        "addition). ")
    if by_field:
        channel["description"] += "Each event names its topic in a `topic:` field."
        messages["record"]["summary"] = "One Kafka record's value (event type `message`, a " \
                                        "`topic:` field names its topic)."
        messages["delete"]["summary"] += " A `topic:` field names its topic."
    else:
        channel["description"] += "Each event's type is its topic's name."
        messages["record"].update(name="<topic>", summary="One Kafka record's value (event "
                                                          "type: the name of its topic).")
        messages["delete"]["name"] = "<topic>:delete"
        messages["delete"]["summary"] += " Event type `<topic>:delete`."


def _challenge(seconds: Any) -> dict[str, Any]:
    return {"name": "challenge", "title": "Token about to expire",
            "summary": f"Sent {seconds} s before the stream's token expires: answer with a POST "
                       f"carrying Content-Type application/x-challenge-response and a fresh "
                       f"token, or the stream ends when it expires.",
            "contentType": "application/json", "payload": copy.deepcopy(_CHALLENGE)}


def json_schema_format(schema: Any) -> str:
    """The `schemaFormat` of a JSON Schema: the version its `$schema` declares, or - without
    one - the version ssekd checks records against (jsonschema's newest)."""
    cls = jsonschema.validators.validator_for(schema if isinstance(schema, dict) else {})
    version = _JSON_SCHEMA_VERSIONS.get(cls.__name__, "2020-12")
    return f"application/schema+json;version={version}"


def _record(config: ModelConfig | None, catalogs: Mapping[str, Catalog],
            schema_of: SchemaOf) -> dict[str, Any]:
    message: dict[str, Any] = {"name": "record", "title": "Record",
                               "summary": "One Kafka record's value (event type `message`).",
                               "description": "The value as the topic holds it."}
    if config is None:
        return message
    catalog = catalogs.get(config.catalog) if config.catalog else None
    if config.model == "string":
        message.update(contentType="text/plain", payload={"type": "string"},
                       description="UTF-8 text (the topic's string model).")
        return message
    schema = schema_of(catalog, config) if catalog is not None else None
    if config.model == "json":
        message["description"] = "A JSON document valid against the topic's schema " \
                                 "(records that are not were never delivered)."
        if schema is not None:
            document = json.loads(schema.text)
            message["payload"] = {"schemaFormat": json_schema_format(document),
                                  "schema": document}
        return message
    as_json = config.view == "json"
    if config.model == "protobuf":
        message["description"] = (f"The {config.record or 'Protobuf'} message, delivered as JSON "
                                  f"(view: json)." if as_json else
                                  "The Protobuf message's bytes (after its message indexes).")
        if not as_json:
            message["contentType"] = "application/octet-stream"
        if schema is not None:
            message["payload"] = {"schemaFormat": "application/vnd.google.protobuf;version=3",
                                  "schema": schema.text}
        return message
    message["description"] = ("The Avro record, delivered as JSON (view: json)." if as_json
                              else "Avro binary, as the topic holds it.")
    if not as_json:
        message["contentType"] = "application/octet-stream"
    if schema is not None:
        message["payload"] = {"schemaFormat": "application/vnd.apache.avro+json;version=1.9.0",
                              "schema": json.loads(schema.text)}
    return message


def _models(config: Config, exit_name: str | None, topic: str | None
            ) -> dict[str, ModelConfig]:
    """The value model of `topic` on the cache_server behind a cache_client, when the channel's
    topic is known (a topic from the path could be any): its own, or else the one its
    cache_clients give the topic (what the cache_server reads it with)."""
    if topic is None or exit_name is None:
        return {}
    seen = set()
    name: str | None = exit_name
    while name is not None and name not in seen:
        seen.add(name)
        b = config.bindings.get(name)
        if b is None or b.type != "kafka":
            return {}
        if b.kind == "cache_server":
            for t in b.options.get("topics", ()):
                if t.get("name") == topic and t.get("value") is not None:
                    return {"value": ModelConfig.parse(topic, "value", t["value"])}
            for client in config.bindings.values():
                if client.type == "kafka" and client.kind == "cache_client" and \
                        client.exit == name:
                    for t in client.options.get("topics", ()):
                        if t.get("name") == topic and t.get("value") is not None:
                            return {"value": ModelConfig.parse(topic, "value", t["value"])}
            return {}
        name = b.exit
    return {}


def _ports(spec: Any) -> list[int]:
    items = spec if isinstance(spec, list) else [spec]
    ports = []
    for item in items:
        if isinstance(item, int):
            ports.append(item)
        elif isinstance(item, str) and "-" in item:
            ports.append(int(item.split("-")[0]))
        elif isinstance(item, str) and item.isdigit():
            ports.append(int(item))
    return ports
