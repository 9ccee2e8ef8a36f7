"""kafka bindings: client (talks to the cluster), cache_server (per-topic caches), cache_client.

cache_server options (docs/protocol.md, plus ssekd's cache bounds):

- `bootstrap: [topic]` consumed from start-up, before any stream asks;
- `topics: [{name, defaultOffset: live|historical}]`;
- `max-topics` (default 100): how many topics the cache follows at most; with a route such as
  `/{topic}`, each new name a client asks for would otherwise start another consumer and cache;
- `idle-timeout` (default 300 s): a topic no stream has read for that long is dropped, and
  `missing-topic-retries` (default 10): a topic the cluster lacks after that many looks (backing
  off from 0.5 s to 60 s) is dropped and its streams ended, so junk names cannot fill max-topics;
- `catch-up-bytes` (default 64 KiB): what a stream catching up encodes per step, so a client
  that reads nothing holds one step, not the whole history;
- `partition-wait` (default 5 s): how long a topic's first streams wait for every partition
  before they deliver the ones that are ready (Zilla #1628: it waits for ever);
- `cache: {max-messages, max-bytes, max-age}` per topic, defaults 100000 messages, 67108864
  bytes (64 MiB), 3600 seconds (age by record timestamp; not applied to compacted topics);
- `topics[].value` / `.key`: Zilla's models (`ssekd.catalogs.models`), checked once per record
  as it enters the cache (`gate.RecordGate`).

client options: `servers`, `sasl` (or Zilla's `authorization`, naming an inline guard whose
identity and credentials are the SASL user name and password: `sasl`), and `properties`,
librdkafka consumer properties passed as they are (e.g. `fetch.wait.max.ms: 10` for low
latency against a broker that does not answer a waiting fetch early); `stall-timeout`
(default 30 s): a tail consumer whose partitions stop receiving the records the broker holds is
replaced (`stall`); `max-history-reads` (default 64) bounds the reads of old records waiting for
the history consumer (a stream that finds them all taken asks again shortly). The producers of
http-kafka writes (`producer`) take the same servers and security settings, plus
`producer-properties`, and `max-inflight-bytes` bounds what waits for the broker. Its exit says
how it connects (`way_out`): a tcp client without options, or a tls client in front of one for
TLS with the trust of the tls client's vault.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from ssekd.bindings.kafka.cache import (
    DEFAULT_IDLE_TIMEOUT,
    DEFAULT_MAX_TOPICS,
    DEFAULT_PARTITION_WAIT,
    CacheClient,
    CacheServer,
)
from ssekd.bindings.kafka.client import KafkaClient
from ssekd.bindings.kafka.missing_topics import DEFAULT_GIVE_UP_AFTER
from ssekd.bindings.kafka.producer import DEFAULT_MAX_INFLIGHT_BYTES
from ssekd.bindings.kafka.roles import KafkaCache, KafkaClientBinding
from ssekd.bindings.kafka.sasl import sasl_settings
from ssekd.bindings.kafka.settings import (
    DEFAULT_MAX_HISTORY_READS,
    ClientSettings,
    refused_producer_property,
    refused_property,
)
from ssekd.bindings.kafka.stall import DEFAULT_STALL_TIMEOUT
from ssekd.bindings.kafka.subscription import DEFAULT_CATCH_UP_BYTES
from ssekd.bindings.kafka.topic_log import CacheBounds
from ssekd.bindings.kafka.way_out import tls_trust
from ssekd.bindings.kafka.write_models import WriteModels
from ssekd.catalogs.catalog import Catalog
from ssekd.catalogs.models import FieldModel, ModelConfig, TopicModel, local_problem
from ssekd.catalogs.writing import WriteModel
from ssekd.config.errors import ConfigError
from ssekd.config.model import Binding
from ssekd.config.schema import NAME
from ssekd.spi.binding import BindingType, BuildContext, Dependencies, Exit, KindSpec
from ssekd.spi.connection import Connector

__all__ = ["BINDING"]

DEFAULT_SERVERS = ("localhost:9092",)


def servers(options: Mapping[str, Any]) -> tuple[str, ...]:
    """The `host:port` bootstrap servers of a client binding's options."""
    return tuple(str(s) for s in options.get("servers", DEFAULT_SERVERS))


def server_addresses(options: Mapping[str, Any]) -> list[tuple[str, int]]:
    """`servers` as (host, port), for `KindSpec.connects_to`."""
    found = []
    for server in servers(options):
        host, _, port = server.rpartition(":")
        found.append((host, int(port)))
    return found


def cache_server_depends(options: Mapping[str, Any]) -> Dependencies:
    """The catalogs whose schemas a cache_server's topic models hold (`topics[].value` and
    `.key`): a reload that changes one rebuilds the binding. A model of a shape not read here
    depends on every catalog."""
    catalogs: dict[str, tuple[str | int, ...]] = {}
    for i, topic in enumerate(options.get("topics") or ()):
        for part in ("value", "key") if isinstance(topic, dict) else ():
            model = topic.get(part)
            if isinstance(model, dict) and isinstance(model.get("catalog"), dict):
                catalogs.update((name, ("topics", i, part, "catalog", name))
                                for name in model["catalog"])
            elif model:
                return Dependencies(every_catalog=True)
    return Dependencies(catalogs=catalogs)


def cache_server_inbound_depends(options: Mapping[str, Any]) -> Dependencies:
    """A cache_server's `cache_server_depends`, and the models of the cache_clients that exit
    to it (`_adopted_models`): a reload that changes one of those rebuilds it."""
    return dataclasses.replace(cache_server_depends(options), inbound=True)


def bootstrap_topics(options: Mapping[str, Any]) -> list[str]:
    """The topics a cache_server consumes from start-up."""
    return [str(t) for t in options.get("bootstrap", ())]


def _model_schema(part: str, writes: bool = False) -> dict[str, Any]:
    """Zilla's model config, for a topic's record values or keys: read at a cache_server,
    written at a cache_client (`writes`)."""
    converted = "delivered as JSON" if part == "value" else \
        "checked only (filters and key ids use the key's bytes)"
    if writes:
        converted = "written from the JSON a writer sends"
        what = (f"What every record's {part} produced through this cache_client (an "
                f"http-kafka `produce`) is written as (`ssekd.catalogs.writing`). A {part} the "
                f"model refuses is not written: the writer gets `400` with the reason; while "
                f"the schema is not resolved yet, `503` with `Retry-After`. With a "
                f"`schema-registry` catalog it is written in Confluent's wire format (byte 0, "
                f"the schema id, the record; for protobuf, the message indexes next). "
                f"Reads (fetch, SSE) give what the model's view gives: the cache_server "
                f"reads the topic with this model when it has none of its own for it (two "
                f"cache_clients of one cache_server giving one topic different models is a "
                f"config error).")
    else:
        what = (f"What every record's {part} must be. A record whose {part} does not "
                f"satisfy it is not delivered to any stream (checked once, as it enters "
                f"the cache); it is counted in `kafka.cache.invalid` and reported by a "
                f"`BINDING_KAFKA_RECORD_INVALID` event (one per topic per second at "
                f"most), and event ids still move past it. Tombstones and null keys "
                f"are not checked. A topic without one here is read with the model its "
                f"cache_clients give it, if any.")
    return {
        "type": "object", "additionalProperties": False, "required": ["model"],
        "x-ssekd-default": "none",
        "description": what,
        "properties": {
            "model": {"enum": ["json", "avro", "protobuf", "string"],
                      "description": "`json`: a JSON document valid against a JSON Schema; "
                                     "`avro`: Avro binary - Confluent's wire format (byte 0, "
                                     "the schema id, the record) with a `schema-registry` "
                                     "catalog, plain with a local one; `protobuf`: a message "
                                     "of a proto3 schema (`record` names it), after its "
                                     "message indexes (and the wire format's header with a "
                                     "registry); `string`: UTF-8 text."},
            "view": {"const": "json",
                     "x-ssekd-default": "none (the Avro or protobuf bytes)",
                     "description": f"For `avro` and `protobuf`: the record is {converted}."},
            "catalog": {
                "type": "object", "minProperties": 1, "maxProperties": 1,
                "x-ssekd-default": "none (required by json and avro)",
                "description": "The catalog (by name, under `catalogs`) and the one schema in "
                               "it that this model uses: `{catalog: [{subject: S, version: "
                               "latest}]}`, or `id: N` (a registry schema id) instead of "
                               "`subject`, or `strategy: topic` (the subject "
                               f"`<topic>-{part}`). `version` is `latest` (the default, "
                               "following new versions after `cache-ttl`) or a number. "
                               "Confluent wire-format records are checked against the "
                               "schema of the id they carry.",
                "additionalProperties": {
                    "type": "array", "minItems": 1, "maxItems": 1,
                    "x-expected": "a list of exactly one schema (ssekd uses one per model)",
                    "items": {
                        "type": "object", "additionalProperties": False,
                        "minProperties": 1,
                        "properties": {
                            "subject": {"type": "string", "minLength": 1,
                                        "description": "The subject whose schema is used."},
                            "id": {"type": "integer", "minimum": 0,
                                   "description": "A registry schema id, instead of a "
                                                  "subject."},
                            "strategy": {"const": "topic",
                                         "description": f"The subject is `<topic>-{part}` "
                                                      f"(Confluent's TopicNameStrategy)."},
                            "record": {"type": "string", "minLength": 1,
                                       "x-ssekd-default": "the schema's first message",
                                       "description": "For `protobuf`: the message the "
                                                      "records are (`Name`, `pkg.Name` or "
                                                      "`Outer.Inner`); a name the schema "
                                                      "lacks is a config error (local "
                                                      "catalogs) or a schema not used "
                                                      "(registry)."},
                            "version": {"anyOf": [{"const": "latest"},
                                                  {"type": "integer", "minimum": 1}],
                                        "default": "latest",
                                        "x-expected": "latest or a version number",
                                        "description": "Which version of the subject; "
                                                       "`latest` follows new versions "
                                                       "(`cache-ttl`)."}}}}}}}


def client_depends(options: Mapping[str, Any]) -> Dependencies:
    """The guard a client's `authorization` names: the loader checks it exists, and a reload
    that changes it rebuilds the client (new credentials)."""
    return Dependencies(guards={str(g): ("authorization", str(g))
                                for g in options.get("authorization") or ()})


def _build_client(ctx: BuildContext, binding: Binding) -> KafkaClient:
    opts = binding.options
    properties = dict(opts.get("properties", {}))
    tls = tls_trust(ctx, binding, servers(opts), properties)
    settings = ClientSettings(servers=servers(opts), sasl=sasl_settings(ctx, binding),
                              properties=properties, tls=tls,
                              max_history_reads=int(opts.get("max-history-reads",
                                                             DEFAULT_MAX_HISTORY_READS)),
                              producer_properties=dict(opts.get("producer-properties", {})),
                              max_inflight_bytes=int(opts.get("max-inflight-bytes",
                                                              DEFAULT_MAX_INFLIGHT_BYTES)),
                              stall_timeout=float(opts.get("stall-timeout",
                                                           DEFAULT_STALL_TIMEOUT)))
    for option, check in (("properties", refused_property),
                          ("producer-properties", refused_producer_property)):
        refused = check(settings)
        if refused is not None:
            key, reason = refused
            path: tuple[str | int, ...] = ("bindings", binding.name, "options", option)
            raise ConfigError([ctx.issue(path + ((key,) if key else ()),
                                         f"expected properties librdkafka accepts: {reason}")])
    client = KafkaClient(ctx.reactor, settings, binding.name,
                         lambda name, detail: ctx.events.emit(binding.name, name, detail),
                         deliveries=ctx.metrics.deliveries)
    ctx.metrics.reader(binding.name, "client", client.figures)
    return client


def _build_cache_server(ctx: BuildContext, binding: Binding) -> CacheServer:
    assert binding.exit is not None
    opts = binding.options
    c = opts.get("cache", {})
    defaults = CacheBounds()
    bounds = CacheBounds(max_messages=int(c.get("max-messages", defaults.max_messages)),
                         max_bytes=int(c.get("max-bytes", defaults.max_bytes)),
                         max_age_seconds=float(c.get("max-age", defaults.max_age_seconds)))
    live = [t["name"] for t in opts.get("topics", ()) if t.get("defaultOffset") == "live"]
    return CacheServer(ctx.reactor, ctx.exit(binding.exit, KafkaClient), binding.name, ctx.events,
                       bootstrap=bootstrap_topics(opts), live_topics=live, bounds=bounds,
                       max_topics=int(opts.get("max-topics", DEFAULT_MAX_TOPICS)),
                       idle_timeout=float(opts.get("idle-timeout", DEFAULT_IDLE_TIMEOUT)),
                       missing_topic_retries=int(opts.get("missing-topic-retries",
                                                          DEFAULT_GIVE_UP_AFTER)),
                       catch_up_bytes=int(opts.get("catch-up-bytes", DEFAULT_CATCH_UP_BYTES)),
                       partition_wait=float(opts.get("partition-wait", DEFAULT_PARTITION_WAIT)),
                       metrics=ctx.metrics,
                       models={**_adopted_models(ctx, binding), **_models(ctx, binding)})


def _models(ctx: BuildContext, binding: Binding, owner: str | None = None
            ) -> dict[str, TopicModel]:
    """A `TopicModel` per topic with a `value` or `key` model. A model naming a catalog that
    does not exist, or a local schema that is missing or does not compile, is a config error
    now; a registry is only asked once the binding starts."""
    return {name: TopicModel(name, value, key)
            for name, (value, key) in _fields(ctx, binding, FieldModel, owner).items()}


def _adopted_models(ctx: BuildContext, server: Binding) -> dict[str, TopicModel]:
    """The read models a cache_server takes from its cache_clients, for the topics it has no
    model of its own for. Zilla converts what a cache_client reads with the cache_client's
    models; ssekd converts a record once, as it enters the shared cache, so the cache_server
    reads a topic with the model its cache_clients write it with (and every reader of the
    topic gets what that model's view gives). Two cache_clients declaring different models for
    one topic cannot both be honoured by one cache: a config error."""
    own = {str(t["name"]) for t in server.options.get("topics", ())
           if t.get("value") is not None or t.get("key") is not None}
    declared: dict[str, tuple[str, object]] = {}  # topic -> (cache_client, its model config)
    issues = []
    adopted: dict[str, TopicModel] = {}
    for client in ctx.config.bindings.values():
        if client.type != "kafka" or client.kind != "cache_client" or \
                client.exit != server.name:
            continue
        wanted = []
        for i, topic in enumerate(client.options.get("topics", ())):
            name = str(topic["name"])
            spec = (topic.get("value"), topic.get("key"))
            if name in own or spec == (None, None):
                continue
            first = declared.setdefault(name, (client.name, spec))
            if first[1] != spec:
                issues.append(ctx.issue(
                    ("bindings", client.name, "options", "topics", i),
                    f"the same model as {first[0]} gives {name} (both exit to {server.name}, "
                    f"whose cache reads the topic once with one model), or a model for {name} "
                    f"under {server.name}'s topics"))
            elif first[0] == client.name:
                wanted.append(name)
        if wanted:
            models = _models(ctx, client, owner=server.name)
            adopted.update((name, models[name]) for name in wanted if name in models)
    if issues:
        raise ConfigError(issues)
    return adopted


def _write_models(ctx: BuildContext, binding: Binding) -> dict[str, WriteModels]:
    """A cache_client's `WriteModels` per topic, checked as `_models` checks a cache_server's."""
    return {name: WriteModels(name, value, key)  # type: ignore[arg-type]
            for name, (value, key) in _fields(ctx, binding, WriteModel).items()}


def _fields(ctx: BuildContext, binding: Binding, kind: type[FieldModel],
            owner: str | None = None) -> dict[str, tuple[FieldModel | None, FieldModel | None]]:
    """(value, key) models of every topic with one, made of `kind`; their catalog events are
    `owner`'s (the binding that resolves them; `binding` by default)."""
    models: dict[str, tuple[FieldModel | None, FieldModel | None]] = {}
    issues = []
    for i, topic in enumerate(binding.options.get("topics", ())):
        name = str(topic["name"])
        fields: dict[str, FieldModel] = {}
        for part in ("value", "key"):
            spec = topic.get(part)
            if spec is None:
                continue
            path = ("bindings", binding.name, "options", "topics", i, part)
            config = ModelConfig.parse(name, part, spec)
            catalog: Catalog | None = ctx.catalogs.get(config.catalog) if config.catalog \
                else None
            if config.model != "string" and config.catalog is None:
                issues.append(ctx.issue(path, f"a {config.model} model needs a `catalog` with "
                                              f"its schema"))
                continue
            if config.catalog is not None and catalog is None:
                issues.append(ctx.issue((*path, "catalog", config.catalog),
                                        f"no catalog {config.catalog!r} under `catalogs`"))
                continue

            def report(event: str, detail: str, where: str = f"{name} {part}") -> None:
                ctx.events.emit(owner or binding.name, event, f"{where}: {detail}")

            field = kind(config, catalog, ctx.reactor, report, convert=part == "value")
            problem = local_problem(field)
            if problem is not None:
                issues.append(ctx.issue((*path, "catalog", str(config.catalog)), problem))
                continue
            fields[part] = field
        if fields:
            models[name] = (fields.get("value"), fields.get("key"))
    if issues:
        raise ConfigError(issues)
    return models


def _build_cache_client(ctx: BuildContext, binding: Binding) -> CacheClient:
    assert binding.exit is not None
    server = ctx.exit(binding.exit, CacheServer)
    models = _write_models(ctx, binding)
    return CacheClient(server, models)


BINDING = BindingType("kafka", {
    "cache_client": KindSpec(role=KafkaCache, build=_build_cache_client,
                             exit=Exit.REQUIRED, exit_roles=(KafkaCache,),
                             depends=cache_server_depends,
                             options={"type": "object", "additionalProperties": False,
                                      "description": "What sse-kafka and http-kafka routes "
                                                     "exit to: it hands every stream to its "
                                                     "cache_server, and encodes what "
                                                     "http-kafka writes with its topics' "
                                                     "models.",
                                      "properties": {"topics": {
                                          "type": "array", "x-ssekd-default": "none",
                                          "description": "Per-topic write models.",
                                          "items": {
                                              "type": "object", "additionalProperties": False,
                                              "required": ["name"],
                                              "properties": {
                                                  "name": {"type": "string", "minLength": 1,
                                                           "description": "The topic."},
                                                  "value": _model_schema("value", True),
                                                  "key": _model_schema("key", True)}}}}}),
    "cache_server": KindSpec(
        role=KafkaCache, build=_build_cache_server, exit=Exit.REQUIRED,
        exit_roles=(KafkaClientBinding,), bootstrap_topics=bootstrap_topics,
        depends=cache_server_inbound_depends,
        options={"type": "object", "additionalProperties": False,
                 "description": "Keeps a bounded in-memory log per topic, fed by one consumer "
                                "however many streams read it; streams that fall behind it read "
                                "older records from Kafka. A topic is followed from the first "
                                "stream that asks for it (or from start-up, for `bootstrap`).",
                 "properties": {
            "bootstrap": {"type": "array", "items": {"type": "string", "minLength": 1},
                          "x-ssekd-default": "none",
                          "description": "Topics consumed from start-up, before any stream "
                                         "asks."},
            "topics": {"type": "array", "description": "Per-topic settings.", "items": {
                "type": "object", "additionalProperties": False, "required": ["name"],
                "properties": {"name": {"type": "string", "minLength": 1,
                                        "description": "The topic."},
                               "defaultOffset": {"enum": ["live", "historical"],
                                                 "default": "historical",
                                                 "description": "Where a stream without a last "
                                                                "event id starts: all the cache "
                                                                "holds, or the end."},
                               "value": _model_schema("value"),
                               "key": _model_schema("key")}}},
            "max-topics": {"type": "integer", "minimum": 1, "default": DEFAULT_MAX_TOPICS,
                           "x-ssekd-addition": True,
                           "description": "Topics followed at most (bootstrap topics always "
                                          "are). Each costs a consumer assignment and a cache. A "
                                          "stream for one more gets a `200` with `retry:` that "
                                          "ends at once (its browser tries again later); idle "
                                          "topics are dropped, so room comes back."},
            "idle-timeout": {"type": "number", "exclusiveMinimum": 0,
                             "default": DEFAULT_IDLE_TIMEOUT, "x-ssekd-addition": True,
                             "description": "Seconds a topic no stream reads is still followed; "
                                            "then its cache is freed and its partitions "
                                            "unassigned (bootstrap topics stay)."},
            "missing-topic-retries": {"type": "integer", "minimum": 1,
                                      "default": DEFAULT_GIVE_UP_AFTER, "x-ssekd-addition": True,
                                      "description": "Looks for a topic the cluster does not "
                                                     "have (0.5 s apart, then twice as long each "
                                                     "time, at most 60 s) before it is dropped "
                                                     "and its streams ended; bootstrap topics "
                                                     "are looked for without end."},
            "partition-wait": {"type": "number", "minimum": 0,
                               "default": DEFAULT_PARTITION_WAIT, "x-ssekd-addition": True,
                               "description": "Seconds a topic's first streams wait for the "
                                              "cache to reach every partition, so their ids "
                                              "list them all; then they deliver the partitions "
                                              "that are ready while one without a leader (or a "
                                              "slow one) catches up, and get it when it comes "
                                              "(Zilla waits for ever, its #1628)."},
            "catch-up-bytes": {"type": "integer", "minimum": 1024,
                               "default": DEFAULT_CATCH_UP_BYTES, "x-ssekd-addition": True,
                               "description": "Bytes of records a stream catching up (from the "
                                              "cache or from Kafka) encodes per step before its "
                                              "connection may pause it: what a client that "
                                              "reads nothing holds, instead of the whole "
                                              "history."},
            "cache": {"type": "object", "additionalProperties": False, "x-ssekd-addition": True,
                      "description": "Bounds of each topic's log; the oldest records go first.",
                      "properties": {
                "max-messages": {"type": "integer", "minimum": 1,
                                 "default": CacheBounds.max_messages, "x-ssekd-addition": True,
                                 "description": "Records kept per topic."},
                "max-bytes": {"type": "integer", "minimum": 1, "default": CacheBounds.max_bytes,
                              "x-ssekd-addition": True,
                              "description": "Bytes kept per topic (keys, values, headers and "
                                             "about 120 bytes per record)."},
                "max-age": {"type": "number", "exclusiveMinimum": 0,
                            "default": CacheBounds.max_age_seconds, "x-ssekd-addition": True,
                            "description": "Seconds a record stays, by its timestamp; not applied "
                                           "to compacted topics, whose latest value per key "
                                           "stays."},
            }},
        }}),
    "client": KindSpec(
        role=KafkaClientBinding, build=_build_client, exit=Exit.OPTIONAL,
        exit_roles=(Connector,), summary=lambda o: ",".join(servers(o)),
        connects_to=server_addresses, depends=client_depends,
        options={"type": "object", "additionalProperties": False,
                 "description": "The connection to the Kafka cluster: one consumer per "
                                "cache_server for the live tail, one for reading older records. "
                                "When the brokers are down, it retries with back-off and says so "
                                "in events.",
                 "properties": {
            "servers": {"type": "array", "minItems": 1, "default": list(DEFAULT_SERVERS),
                        "description": "Bootstrap servers.",
                        "items": {"type": "string", "pattern": r"^[^:\s]+:[0-9]{1,5}$",
                                  "x-expected": "host:port"}},
            "sasl": {"type": "object", "additionalProperties": False,
                     "required": ["mechanism", "username", "password"],
                     "x-ssekd-default": "none",
                     "description": "SASL authentication: `SASL_PLAINTEXT`, or `SASL_SSL` "
                                    "over TLS (a tls client as the exit, or `ssl.*` "
                                    "properties). Not with `authorization`.",
                     "properties": {
                         "mechanism": {"enum": ["plain", "scram-sha-256", "scram-sha-512"],
                                       "description": "SASL mechanism."},
                         "username": {"type": "string", "description": "User name."},
                         "password": {"type": "string",
                                      "description": "Password; never repeated in error "
                                                     "messages."}}},
            "authorization": {
                "type": "object", "propertyNames": NAME, "minProperties": 1,
                "maxProperties": 1, "x-ssekd-default": "none",
                "description": "Zilla's SASL from a guard: the one guard named here (an "
                               "`inline` guard) supplies what `{identity}` and `{credentials}` "
                               "stand for; the result is sent as `sasl` would be. Not with "
                               "`sasl`.",
                "additionalProperties": {
                    "type": "object", "additionalProperties": False,
                    "required": ["credentials"],
                    "properties": {"credentials": {
                        "type": "object", "additionalProperties": False,
                        "required": ["mechanism", "username", "password"],
                        "description": "What the client authenticates with.",
                        "properties": {
                            "mechanism": {"enum": ["plain", "scram-sha-256", "scram-sha-512"],
                                          "x-expected": "plain, scram-sha-256 or scram-sha-512 "
                                                        "(what librdkafka and Kafka brokers "
                                                        "speak)",
                                          "description": "SASL mechanism."},
                            "username": {"type": "string",
                                         "description": "User name; exactly `{identity}`: "
                                                        "the guard's identity."},
                            "password": {"type": "string",
                                         "description": "Password; exactly `{credentials}`: "
                                                        "the guard's credentials. Never "
                                                        "repeated in error messages."}}}}}},
            "properties": {"type": "object", "x-ssekd-addition": True,
                           "additionalProperties": {
                               "type": ["string", "integer", "number", "boolean"]},
                           "description": "librdkafka consumer properties, applied last as they "
                                          "are (e.g. `fetch.wait.max.ms`). One librdkafka "
                                          "refuses (unknown, bad value, missing file) is a "
                                          "config error at start."},
            "stall-timeout": {
                "type": "number", "minimum": 1, "default": DEFAULT_STALL_TIMEOUT,
                "x-ssekd-addition": True,
                "description": "Seconds a partition may go without a record while the broker "
                               "says it holds newer ones before the consumer that feeds the "
                               "cache is replaced by a new one starting where it stood "
                               "(`BINDING_KAFKA_CONSUMER_STALLED`): a connection whose fetches "
                               "stopped bringing anything, with nothing failing. While it stays "
                               "stuck the wait doubles, up to 10 minutes."},
            "max-history-reads": {"type": "integer", "minimum": 1,
                                  "default": DEFAULT_MAX_HISTORY_READS, "x-ssekd-addition": True,
                                  "description": "Reads of records older than a cache (one per "
                                                 "stream catching up from Kafka) waiting for the "
                                                 "history consumer at most; a stream that finds "
                                                 "them all taken asks again a moment later."},
            "producer-properties": {
                "type": "object", "x-ssekd-addition": True,
                "additionalProperties": {"type": ["string", "integer", "number", "boolean"]},
                "description": "librdkafka producer properties for the records http-kafka "
                               "writes, applied last (e.g. `linger.ms`, `message.timeout.ms`). "
                               "The producers already take `servers`, `sasl` and the security "
                               "settings (`security.*`, `ssl.*`, `sasl.*`) of `properties`; by "
                               "default `linger.ms: 1`, `partitioner: murmur2_random` (Java's "
                               "choice of partition for a key), and, for `acks: "
                               "in_sync_replicas`, the idempotent producer. "
                               "`allow.auto.create.topics` is always false: a write never "
                               "creates a topic, and one to a topic the cluster lacks is "
                               "`404`."},
            "max-inflight-bytes": {
                "type": "integer", "minimum": 1024, "default": DEFAULT_MAX_INFLIGHT_BYTES,
                "x-ssekd-addition": True,
                "description": "Bytes of written records (keys, values, headers) the broker has "
                               "not acknowledged yet, at most. A write that would pass it, or "
                               "one made while no broker is reachable, is refused before it is "
                               "sent: `503` with `Retry-After`."},
        }}),
})
