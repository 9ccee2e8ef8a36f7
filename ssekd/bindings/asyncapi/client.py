"""The asyncapi client: the kafka cache_client (under the binding's own name, what an asyncapi
proxy's routes exit to), cache_server and client for a Kafka spec's servers and channels (the
client of an SSE spec is `ssekd.bindings.asyncapi.sse_client`'s).

- kafka client: `servers` are the spec servers used (`options.specs.<label>.servers`, else all
  of the spec's `kafka` servers): every spec of the binding must use the same ones (one client
  connects to one cluster).
- kafka cache_server: a topic per channel whose address has no parameter, bootstrapped (followed
  from start-up, as Zilla does) when an operation of the spec receives from it; its records
  are checked against the channel's message payloads (a JSON Schema, or Avro with
  `schemaFormat`) as they enter the cache, as any topic model checks them: a catalog of the
  payloads (`<binding>.payloads`, inline) is composed for it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ssekd.bindings.asyncapi.payloads import JSON_FORMATS, JSON_SCHEMA_DRAFT, json_content
from ssekd.bindings.asyncapi.spec import Channel, Spec, read_specs, select_servers
from ssekd.config.errors import ConfigError, ConfigIssue
from ssekd.config.model import Binding
from ssekd.config.origin import Origin
from ssekd.spi.compose import ComposeContext, Composition

#: The `schemaFormat` of an Avro payload.
_AVRO_FORMAT = "application/vnd.apache.avro"


def compose_client(ctx: ComposeContext, binding: Binding,
                   specs: Mapping[str, Spec] | None = None) -> Composition:
    """`specs`: the binding's, when the caller has read them already."""
    name = binding.name
    specs = read_specs(ctx, binding) if specs is None else specs
    issues: list[ConfigIssue] = []
    servers: dict[str, list[str]] = {}
    for spec in specs.values():
        try:
            chosen = select_servers(ctx, binding, spec, ("kafka",))
        except ConfigError as e:
            issues.extend(e.issues)
            continue
        servers[spec.label] = sorted({f"{s.host}:{s.port}" for s in chosen})
    if issues:
        raise ConfigError(issues)
    if len({tuple(v) for v in servers.values()}) > 1:
        said = "; ".join(f"{label}: {', '.join(v)}" for label, v in servers.items())
        raise ConfigError([ctx.issue(("bindings", name, "options", "specs"),
                                     f"the specs of binding {name!r} use different Kafka "
                                     f"servers ({said}); one client connects to one cluster: "
                                     f"give each cluster its own asyncapi client")])
    composition = Composition(bindings={})
    cache, kafka, catalog = f"{name}.cache_server", f"{name}.kafka_client", f"{name}.payloads"
    topics: list[dict[str, Any]] = []
    bootstrap: list[str] = []
    subjects: dict[str, dict[str, Any]] = {}
    for spec in specs.values():
        try:
            operations = spec.operations()
            channels = {op.channel.key: op.channel for op in operations.values()}
            receiving = {op.channel.key for op in operations.values() if op.action == "receive"}
            for key in (spec.data.get("channels") or {}):
                if key not in channels:
                    channels[str(key)] = spec.channel(str(key), ("channels", key))
        except ConfigError as e:
            issues.extend(e.issues)
            continue
        for key, channel in channels.items():
            topic = channel.address
            if not isinstance(topic, str) or not topic or channel.parameters or \
                    any(t["name"] == topic for t in topics):
                continue  # a topic named by the request: no model, followed on demand
            entry: dict[str, Any] = {"name": topic}
            try:
                value = _value_model(spec, channel, catalog, subjects)
            except ConfigError as e:
                issues.extend(e.issues)
                continue
            if value is not None:
                entry["value"] = value
                composition.where[("bindings", cache, "options", "topics", len(topics))] = \
                    spec.where(channel.path)
                composition.where[("catalogs", catalog, "options", "subjects",
                                   f"{topic}-value")] = spec.where(channel.path + ("messages",))
            topics.append(entry)
            if key in receiving:
                bootstrap.append(topic)
    if issues:
        raise ConfigError(issues)
    [used] = {tuple(v) for v in servers.values()} or {()}
    composition.bindings[name] = {"type": "kafka", "kind": "cache_client", "exit": cache}
    options: dict[str, Any] = {}
    if bootstrap:
        options["bootstrap"] = bootstrap
    if topics:
        options["topics"] = topics
    composition.bindings[cache] = {"type": "kafka", "kind": "cache_server", "options": options,
                                   "exit": kafka}
    composition.bindings[kafka] = {"type": "kafka", "kind": "client",
                                   "options": {"servers": list(used)}}
    if subjects:
        composition.catalogs[catalog] = {"type": "inline", "options": {"subjects": subjects}}
    for label, spec in specs.items():
        option = spec.option_path + ("servers",)
        where = ctx.issue(option, "") if "servers" in binding.options["specs"][label] else None
        composition.where[("bindings", kafka, "options", "servers")] = \
            (where.file, where.line) if where is not None else spec.where(("servers",))
    composition.origins[name] = Origin(name, "client")
    composition.sources += [s.source.watch for s in specs.values() if s.source.watch]
    composition.summary = (f"asyncapi client {name}: {len(topics)} topic(s) on "
                           f"{', '.join(used)}, from "
                           + ", ".join(f"{s.label} ({s.file})" for s in specs.values()))
    return composition


def _value_model(spec: Spec, channel: Channel, catalog: str,
                 subjects: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    """The model that checks the records of `channel`'s topic: the JSON Schema of its
    messages' payloads (any of them), or an Avro schema; None when a message has no payload
    or one in a format ssekd does not check."""
    assert channel.address is not None
    schemas: list[Any] = []
    avro: list[Any] = []
    for message in channel.messages:
        payload = message.data.get("payload")
        if payload is None:
            return None  # a message of any shape: nothing to check
        path = message.path + ("payload",)
        payload, path = spec.resolve(payload, path)
        if isinstance(payload, Mapping) and "schemaFormat" in payload:
            form = str(payload["schemaFormat"])
            if form.startswith(_AVRO_FORMAT):
                avro.append(spec.deref(payload.get("schema"), path + ("schema",)))
                continue
            if not form.startswith(JSON_FORMATS):
                return None
            payload, path = spec.resolve(payload.get("schema"), path + ("schema",))
        if not json_content(spec, message.data):
            return None
        schemas.append(spec.deref(payload, path))
    if not schemas and not avro:
        return None
    if schemas and avro:
        raise ConfigError([spec.issue(channel.path + ("messages",),
                                      f"channel {channel.key!r} mixes Avro and JSON payloads: "
                                      f"records of one topic are checked with one model")])
    subject = f"{channel.address}-value"
    if avro:
        if len(avro) > 1:
            raise ConfigError([spec.issue(channel.path + ("messages",),
                                          f"channel {channel.key!r} has several Avro payloads: "
                                          f"expected one schema per topic")])
        subjects[subject] = {"schema": json.dumps(avro[0])}
        return {"model": "avro", "view": "json", "catalog": {catalog: [{"subject": subject}]}}
    schema = schemas[0] if len(schemas) == 1 else {"anyOf": schemas}
    subjects[subject] = {"schema": json.dumps({"$schema": JSON_SCHEMA_DRAFT, **schema}
                                              if isinstance(schema, dict) else schema)}
    return {"model": "json", "catalog": {catalog: [{"subject": subject}]}}
