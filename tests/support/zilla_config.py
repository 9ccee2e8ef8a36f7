"""Daemon configs for tests and benchmarks, built as data and dumped as YAML.

The tests used to paste the whole tcp -> tls -> http -> sse -> sse-kafka -> kafka stack of
`zilla.yaml` into each module as `str.format` templates with doubled braces; a change to the
usual chain meant editing twenty of them. Here each binding is a function returning a plain dict,
`sse_stack` joins the usual chain with keyword options for what tests vary, and `write` dumps the
result. A test that needs something odd edits the dicts before writing: they are only data.

Tests that check config *errors* at a file and line keep their hand-written YAML: a dumped dict
puts things on lines of its own choosing.

Options that the old templates spliced in as YAML text (`"{header-timeout: 2}"`) are still taken
as text where callers pass them: `flow` reads such a fragment into the value it always stood for.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

Node = dict[str, Any]

#: What every test's kafka client sets: answer fetches at once instead of after 500 ms.
FAST_FETCH: Node = {"fetch.wait.max.ms": 10}
#: With a broker that tests stop and start: reconnect within half a second.
FAST_RECONNECT: Node = {"fetch.wait.max.ms": 10, "reconnect.backoff.max.ms": 500}
#: Where a topic comes from in the usual route: the path parameter `{topic}`.
TOPIC_PARAM = "${params.topic}"
#: The Authorization header's bearer token (and, with `query`, `?access_token=`).
BEARER = {"headers": {"authorization": "Bearer {credentials}"}}
BEARER_OR_QUERY = {"headers": {"authorization": "Bearer {credentials}"},
                   "query": {"access_token": "{credentials}"}}


def flow(value: Any) -> Any:
    """A YAML fragment given as text (a flow mapping such as `{limits: {body-bytes: 10}}`, a
    number, a URL) read into the value it stands for; anything else is returned as is."""
    if isinstance(value, str):
        return yaml.safe_load(value)
    return value


# -- bindings -------------------------------------------------------------------------------

def tcp_server(port: int | Sequence[int], exit: str | None = "http", *,
               routes: Sequence[Node] | None = None, host: str = "127.0.0.1",
               **options: Any) -> Node:
    """A tcp server on `port` (or a list of ports); `options` add to its options
    (`proxy_protocol=` for `proxy-protocol`: underscores become dashes)."""
    binding: Node = {"type": "tcp", "kind": "server",
                     "options": {"host": host, "port": port if isinstance(port, int)
                                 else list(port), **_dashed(options)}}
    if routes:
        binding["routes"] = list(routes)
    if exit:
        binding["exit"] = exit
    return binding


def port_route(port: int, exit: str) -> Node:
    """A tcp route: connections to `port` go to `exit`."""
    return {"when": [{"port": port}], "exit": exit}


def tls_server(vault: str, exit: str = "http", *, keys: Sequence[str] = ("localhost",),
               **options: Any) -> Node:
    """A tls server whose keys are in `vault`; `options` add to its options (`alpn`, `sni`,
    `trust`, `mutual` ...)."""
    return {"type": "tls", "kind": "server", "vault": vault,
            "options": {"keys": list(keys), **_dashed(options)}, "exit": exit}


def http_server(exit: str | None = "sse", *, routes: Sequence[Node] | None = None,
                options: Node | str | None = None, **more: Any) -> Node:
    """An http server; `options` is the whole options mapping (or its YAML text), `more` adds
    keys to it (`limits=`, `authorization=`, `health=`, `cors=`, `versions=` ...)."""
    opts = dict(flow(options) or {})
    opts.update(_dashed(more))
    binding: Node = {"type": "http", "kind": "server"}
    if options is not None or opts:
        binding["options"] = opts
    if routes:
        binding["routes"] = list(routes)
    if exit:
        binding["exit"] = exit
    return binding


def header_route(path: str, exit: str, *, guarded: Node | None = None,
                 **headers: str) -> Node:
    """An http route taken when `:path` matches `path` (and the other pseudo-headers given as
    `method=`, `scheme=`: they become `:method`, `:scheme`)."""
    when = {**{f":{k}": v for k, v in headers.items()}, ":path": path}
    route: Node = {"when": [{"headers": when}], "exit": exit}
    if guarded is not None:
        route["guarded"] = guarded
    return route


def authorization(guard: str = "jwt0", credentials: Node = BEARER_OR_QUERY) -> Node:
    """The http binding's `authorization` option: where `guard` finds its token."""
    return {guard: {"credentials": credentials}}


def files(location: str | Path, *, prefix: str = "/www/", mapper: str = "files_map",
          server: str = "files", paths: Sequence[str] | None = None) -> Node:
    """The two bindings that serve `{prefix}{path}` from the folder `location`."""
    when = [{"path": p} for p in (paths or [prefix + "{path}"])]
    return {mapper: {"type": "http-filesystem", "kind": "proxy",
                     "routes": [{"when": when, "exit": server,
                                 "with": {"path": "${params.path}"}}]},
            server: {"type": "filesystem", "kind": "server",
                     "options": {"location": str(location)}}}


def sse_server(exit: str = "sse_kafka", *, options: Node | None = None, **more: Any) -> Node:
    """An sse server; `options` its options, `more` adds to them (`max_idle_time=` for
    `max-idle-time`)."""
    binding: Node = {"type": "sse", "kind": "server"}
    opts = {**(options or {}), **_dashed(more)}
    if options is not None or opts:
        binding["options"] = opts
    binding["exit"] = exit
    return binding


def sse_route(path: str, topic: str | list[str] | None = TOPIC_PARAM, exit: str = "cache_client", *,
              guarded: Node | None = None, **with_: Any) -> Node:
    """An sse-kafka route: `path` (a list of paths: any of them) to `topic`; `with_` adds
    `filters`, `event` ..., `topic=None` leaves `with` out when nothing else is given."""
    paths = [path] if isinstance(path, str) else list(path)
    route: Node = {"when": [{"path": p} for p in paths], "exit": exit}
    if guarded is not None:
        route["guarded"] = guarded
    values = {**({"topic": topic} if topic is not None else {}), **with_}
    if values:
        route["with"] = values
    return route


def sse_kafka(routes: Sequence[Node], **options: Any) -> Node:
    binding: Node = {"type": "sse-kafka", "kind": "proxy"}
    if options:
        binding["options"] = _dashed(options)
    binding["routes"] = list(routes)
    return binding


def kafka(bootstrap: str | Sequence[str], *, properties: Node | None = None,
          cache: Node | None = None, client: str = "kafka_client",
          cache_client: str = "cache_client", cache_server: str = "cache_server",
          **client_options: Any) -> Node:
    """The three kafka bindings: cache client -> cache server (`cache` its options) -> client of
    `bootstrap` (with `properties`, `FAST_FETCH` unless given)."""
    servers = [bootstrap] if isinstance(bootstrap, str) else list(bootstrap)
    server: Node = {"type": "kafka", "kind": "cache_server"}
    if cache:
        server["options"] = cache
    server["exit"] = client
    return {cache_client: {"type": "kafka", "kind": "cache_client", "exit": cache_server},
            cache_server: server,
            client: {"type": "kafka", "kind": "client",
                     "options": {"servers": servers,
                                 "properties": FAST_FETCH if properties is None
                                 else properties, **_dashed(client_options)}}}


# -- the parts beside bindings ---------------------------------------------------------------

def keys_vault(store: str | Path, password: str, *, type: str = "pkcs12",
               trust: Node | None = None) -> Node:
    """A filesystem vault holding the key store `store` (and a `trust` store)."""
    options: Node = {"keys": {"store": str(store), "type": type, "password": password}}
    if trust is not None:
        options["trust"] = trust
    return {"type": "filesystem", "options": options}


def jwt_guard(issuer: str, audience: str, keys: Any, **options: Any) -> Node:
    """A jwt guard; `keys` a JWKS URL or a list of JWKs (or YAML text of either)."""
    return {"type": "jwt", "options": {"issuer": issuer, "audience": audience,
                                       **_dashed(options), "keys": flow(keys)}}


def stdout_telemetry(name: str = "stdout", *, prometheus_port: int | None = None) -> Node:
    """The telemetry section: the stdout exporter named `name`, and a prometheus exporter on
    `prometheus_port`."""
    exporters: Node = {name: {"type": "stdout"}}
    if prometheus_port:
        exporters["prometheus"] = {"type": "prometheus",
                                   "options": {"endpoints": [{"port": prometheus_port}]}}
    return {"exporters": exporters}


def zilla(name: str, bindings: Node, *, vaults: Node | None = None,
          guards: Node | None = None, catalogs: Node | None = None,
          telemetry: Node | None = None, engine: Node | str | None = None) -> Node:
    """A whole config, its sections in the order zilla.yaml files usually have them: a deep
    copy, so a test may edit it without touching the shared constants (`FAST_FETCH` ...)."""
    config: Node = {"name": name}
    for key, value in (("vaults", vaults), ("guards", guards), ("catalogs", catalogs)):
        if value:
            config[key] = value
    config["bindings"] = bindings
    if telemetry:
        config["telemetry"] = telemetry
    if engine:
        config["engine"] = flow(engine)
    return copy.deepcopy(config)


def sse_stack(port: int | Sequence[int], bootstrap: str | Sequence[str], *,
              name: str = "test", routes: Sequence[Node] | None = None,
              http: Node | None = None, sse: Node | None = None,
              sse_kafka_binding: Node | None = None, www: str | Path | None = None, tls: Node | None = None,
              cache: Node | None = None, properties: Node | None = None,
              tcp_options: Node | None = None, vaults: Node | None = None,
              guards: Node | None = None, catalogs: Node | None = None,
              telemetry: Node | None = None, engine: Node | str | None = None,
              names: Mapping[str, str] | None = None,
              extra: Node | None = None) -> Node:
    """The usual chain: tcp -> (tls ->) http -> sse -> sse-kafka -> kafka cache -> kafka client.

    `routes` are sse-kafka's (default: `/{topic}` to that topic), `sse_kafka_binding` the whole
    binding instead; `http` is the http binding (default a plain server), `sse` the sse
    binding, `www` adds /www/* files (and the http route to them), `tls` the tls binding (the
    tcp server then sends the port, or port[0], to it, and port[1] to http in clear), `cache`
    the cache server's options, `properties` the kafka client's, `tcp_options` more tcp options, `extra` more
    bindings, `names` renames bindings (`{"tcp": "tcp_in"}`) with every exit that names them.
    `telemetry` defaults to the stdout exporter (`{}`: no telemetry section)."""
    bindings: Node = {}
    ports = [port] if isinstance(port, int) else list(port)
    if tls is not None and len(ports) > 1:
        bindings["tcp"] = tcp_server(ports, None, routes=[port_route(ports[0], "tls"),
                                                          port_route(ports[1], "http")],
                                     **(tcp_options or {}))
        bindings["tls"] = tls
    elif tls is not None:
        bindings["tcp"] = tcp_server(port, "tls", **(tcp_options or {}))
        bindings["tls"] = tls
    else:
        bindings["tcp"] = tcp_server(port, "http", **(tcp_options or {}))
    http = http if http is not None else http_server()
    if www is not None:
        http = {**http, "routes": [header_route("/www/*", "files_map"),
                                   *http.get("routes", [])]}
        http = _move_last(http, "exit")
    bindings["http"] = http
    if www is not None:
        bindings.update(files(www))
    bindings["sse"] = sse if sse is not None else sse_server()
    bindings["sse_kafka"] = sse_kafka_binding or sse_kafka(
        routes if routes is not None else [sse_route("/{topic}")])
    bindings.update(kafka(bootstrap, cache=cache, properties=properties))
    bindings.update(extra or {})
    if names:
        bindings = renamed(bindings, names)
    return zilla(name, bindings, vaults=vaults, guards=guards, catalogs=catalogs,
                 telemetry=telemetry if telemetry is not None else stdout_telemetry(),
                 engine=engine)


def renamed(bindings: Node, names: Mapping[str, str]) -> Node:
    """`bindings` with some renamed, and every `exit` (and `vault`) that names them."""
    def fix(node: Any) -> Any:
        if isinstance(node, dict):
            return {k: (names.get(v, v) if k == "exit" and isinstance(v, str) else fix(v))
                    for k, v in node.items()}
        if isinstance(node, list):
            return [fix(v) for v in node]
        return node
    return {names.get(k, k): fix(v) for k, v in bindings.items()}


# -- output -----------------------------------------------------------------------------------

class Flow(dict[str, Any]):
    """A mapping dumped on one line (`{keys: [localhost], alpn: [h2]}`), for the few configs
    whose tests patch the text by a line that must occur once (the tls binding's options beside
    the vault's)."""


class _Dumper(yaml.SafeDumper):
    """Block YAML with sequences indented under their key (`routes:` then `  - when:`), the way
    zilla.yaml files are written by hand: the lines a test patches read as they always did."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)


def _flow_mapping(dumper: yaml.SafeDumper, data: Flow) -> yaml.Node:
    return dumper.represent_mapping("tag:yaml.org,2002:map", data, flow_style=True)


_Dumper.add_representer(Flow, _flow_mapping)


def dump(config: Node) -> str:
    """The config as YAML text (keys in the order built, paths as text)."""
    return yaml.dump(_plain(config), Dumper=_Dumper, sort_keys=False, default_flow_style=False,
                     allow_unicode=True, width=1000)


def write(path: Path, config: Node) -> Path:
    path.write_text(dump(config))
    return path


def _plain(node: Any) -> Any:
    if isinstance(node, Flow):
        return Flow({str(k): _plain(v) for k, v in node.items()})
    if isinstance(node, Mapping):
        return {str(k): _plain(v) for k, v in node.items()}
    if isinstance(node, (list, tuple)):
        return [_plain(v) for v in node]
    if isinstance(node, Path):
        return str(node)
    return node


def _dashed(options: Mapping[str, Any]) -> Node:
    return {k.replace("_", "-"): v for k, v in options.items()}


def _move_last(node: Node, key: str) -> Node:
    if key not in node:
        return node
    value = node[key]
    return {**{k: v for k, v in node.items() if k != key}, key: value}


def topics_live(names: Iterable[str]) -> list[Node]:
    """The cache server's `topics` entries that start each of `names` at its live end."""
    return [{"name": t, "defaultOffset": "live"} for t in names]
