"""An AsyncAPI 3.0 document for a config: what a client of its event streams can rely on.

One channel per sse-kafka route: its address is the route's path (with its `{name}` parameters),
its messages the events a stream sends - a record (`event` absent, `data` the record's value; the
payload schema from the topic's model when the route's topic is one with a model), `delete` for a
tombstone (`data` the base64url key), and `challenge` when the route is guarded by a JWT guard
with `challenge` (the client answers with a POST). Each channel has one `receive` operation,
secured by the route's guard (a bearer JWT) when it has one. `servers` are the tcp listeners, as
`https` when their connections go through a tls binding.

Schemas come from the catalogs through `schema_of`, so the daemon can serve what it holds (never
waiting on a registry on the reactor thread) while `ssekd asyncapi` may ask a registry.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any

import yaml

from ssekd.catalogs.catalog import Catalog, Schema
from ssekd.catalogs.models import ModelConfig
from ssekd.config.model import Binding, Config

ASYNCAPI_VERSION = "3.0.0"
#: How the daemon or the command finds a model's schema: None when not (yet) known.
SchemaOf = Callable[[Catalog, ModelConfig], "Schema | None"]

_PARAM = re.compile(r"\{([A-Za-z0-9_-]+)\}")
_KEY = re.compile(r"[^A-Za-z0-9_.-]")
_CHALLENGE = {"type": "object", "required": ["method", "headers"], "properties": {
    "method": {"const": "POST"},
    "headers": {"type": "object", "properties": {
        "content-type": {"const": "application/x-challenge-response"}}}}}


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
    bindings = config.bindings
    channels: dict[str, Any] = {}
    operations: dict[str, Any] = {}
    schemes: dict[str, Any] = {}
    outer = _http_guards(bindings)
    for binding in bindings.values():
        if binding.type != "sse-kafka":
            continue
        for i, route in enumerate(binding.routes):
            guarded = {**outer.get(binding.name, {}), **route.guarded}
            for j, when in enumerate(route.when):
                path = when.get("path")
                if not isinstance(path, str):
                    continue
                key = _KEY.sub("_", f"{binding.name}_{i}" + (f"_{j}" if j else ""))
                topic = str((route.with_ or {}).get("topic", "${params.topic}"))
                models = _models(config, route.exit, topic)
                messages = {"record": _record(topic, models.get("value"), catalogs, schema_of),
                            "delete": _DELETE}
                security = []
                for guard_name, roles in guarded.items():
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
                    "address": path,
                    "title": f"{topic} as Server-Sent Events",
                    "description": f"Records of Kafka topic `{topic}` as Server-Sent Events "
                                   f"(route {i} of sse-kafka binding `{binding.name}`). Each "
                                   f"event's `id` says where the stream is; a client that "
                                   f"reconnects with it (`Last-Event-ID`) resumes exactly "
                                   f"there.",
                    "messages": messages}
                params = _PARAM.findall(path)
                if params:
                    channel["parameters"] = {p: {"description": f"`{{{p}}}` of the path."}
                                             for p in params}
                channels[key] = channel
                operation: dict[str, Any] = {
                    "action": "receive", "channel": {"$ref": f"#/channels/{key}"},
                    "summary": f"Stream {topic}",
                    "messages": [{"$ref": f"#/channels/{key}/messages/{m}"} for m in messages]}
                if security:
                    operation["security"] = security
                operations[f"receive_{key}"] = operation
    doc: dict[str, Any] = {
        "asyncapi": ASYNCAPI_VERSION,
        "info": {"title": config.namespace, "version": "1.0.0",
                 "description": "Kafka topics served as Server-Sent Events by ssekd "
                                "(generated from its config)."},
        "defaultContentType": "application/json"}
    servers = _servers(bindings)
    if servers:
        doc["servers"] = servers
    doc["channels"] = channels
    doc["operations"] = operations
    if schemes:
        doc["components"] = {"securitySchemes": schemes}
    return doc


def to_yaml(doc: Mapping[str, Any]) -> str:
    return yaml.safe_dump(dict(doc), sort_keys=False, allow_unicode=True, width=100)


def to_json(doc: Mapping[str, Any]) -> str:
    return json.dumps(doc, indent=2, ensure_ascii=False)


# -- pieces ------------------------------------------------------------------------------------

_DELETE = {"name": "delete", "title": "Tombstone",
           "summary": "The record's key was deleted (a Kafka tombstone).",
           "contentType": "text/plain",
           "payload": {"type": "string", "description": "The key, base64url-encoded; no data "
                                                        "when the key is null."}}


def _challenge(seconds: Any) -> dict[str, Any]:
    return {"name": "challenge", "title": "Token about to expire",
            "summary": f"Sent {seconds} s before the stream's token expires: answer with a POST "
                       f"carrying Content-Type application/x-challenge-response and a fresh "
                       f"token, or the stream ends when it expires.",
            "contentType": "application/json", "payload": _CHALLENGE}


def _record(topic: str, config: ModelConfig | None,
            catalogs: Mapping[str, Catalog], schema_of: SchemaOf) -> dict[str, Any]:
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
            message["payload"] = {"schemaFormat": "application/schema+json;version=draft-07",
                                  "schema": json.loads(schema.text)}
        return message
    as_json = config.view == "json"
    message["description"] = ("The Avro record, delivered as JSON (view: json)." if as_json
                              else "Avro binary, as the topic holds it.")
    if not as_json:
        message["contentType"] = "application/octet-stream"
    if schema is not None:
        message["payload"] = {"schemaFormat": "application/vnd.apache.avro+json;version=1.9.0",
                              "schema": json.loads(schema.text)}
    return message


def _models(config: Config, exit_name: str | None, topic: str) -> dict[str, ModelConfig]:
    """The value model of `topic` on the cache_server behind a cache_client, when the route's
    topic is literal (a topic from the path could be any)."""
    if "${" in topic or exit_name is None:
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
            return {}
        name = b.exit
    return {}


def _http_guards(bindings: Mapping[str, Binding]) -> dict[str, dict[str, tuple[str, ...]]]:
    """Per sse-kafka binding, the guards (and roles) of the http routes that lead to it through
    an sse binding: a stream passes them before sse-kafka sees it."""
    found: dict[str, dict[str, tuple[str, ...]]] = {}
    for b in bindings.values():
        if b.type != "http":
            continue
        for route in b.routes:
            sse = bindings.get(route.exit) if route.exit else None
            if route.guarded and sse is not None and sse.type == "sse" and sse.exit:
                found.setdefault(sse.exit, {}).update(route.guarded)
    return found


def _servers(bindings: Mapping[str, Binding]) -> dict[str, Any]:
    servers: dict[str, Any] = {}
    for b in bindings.values():
        if b.type != "tcp" or b.kind != "server":
            continue
        host = str(b.options.get("host", "0.0.0.0"))  # noqa: S104 (only described here)
        shown = "localhost" if host in ("0.0.0.0", "::", "") else host  # noqa: S104
        for port in _ports(b.options.get("port")):
            exit_name = next((r.exit for r in b.routes
                              if any(w.get("port") == port for w in r.when)), b.exit)
            nxt = bindings.get(exit_name) if exit_name else None
            secure = nxt is not None and nxt.type == "tls"
            servers[_KEY.sub("_", f"{b.name}_{port}")] = {
                "host": f"{shown}:{port}", "protocol": "https" if secure else "http",
                "description": f"tcp binding `{b.name}` (listening on {host}:{port})"
                               + (" through TLS" if secure else "") + "."}
    return servers


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
