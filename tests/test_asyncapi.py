"""The AsyncAPI 3.0 document made from a config validates against the official AsyncAPI 3.0.0
JSON Schema (npm `@asyncapi/specs`) - for etc/zilla.yaml, and for a config with guarded routes
and models whose schemas come from a schema registry - and says what a client needs."""

from __future__ import annotations

import copy
import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from ssekd.cli import main
from tests.support.asyncapi import ROOT, problems
from tests.support.channels import EXPECTED, write_walk_config
from tests.support.schema_registry import Registry

AVRO = {"type": "record", "name": "Price",
        "fields": [{"name": "sku", "type": "string"}, {"name": "cents", "type": "long"}]}


@pytest.fixture
def registry() -> Iterator[Registry]:
    r = Registry().start()
    yield r
    r.stop()


def _asyncapi(config: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[str, str]:
    assert main(["asyncapi", "--config", str(config), *extra]) == 0
    out = capsys.readouterr()
    return out.out, out.err


def test_demo_config_document_is_valid_asyncapi_3(capsys: pytest.CaptureFixture[str]) -> None:
    text, _ = _asyncapi(ROOT / "etc" / "zilla.yaml", capsys)
    doc = yaml.safe_load(text)
    assert problems(doc) == []
    as_json, _ = _asyncapi(ROOT / "etc" / "zilla.yaml", capsys, "--json")
    assert json.loads(as_json) == doc
    assert doc["asyncapi"] == "3.0.0"
    assert {s["host"]: s["protocol"] for s in doc["servers"].values()} == \
        {"localhost:7143": "https", "localhost:7114": "http"}
    # the sse-kafka route is `/{topic}`, but the http routes let only /events through to it
    [events] = doc["channels"].values()
    assert events["address"] == "/events" and "parameters" not in events
    assert events["title"] == "events as Server-Sent Events"
    assert sorted(s["$ref"] for s in events["servers"]) == \
        ["#/servers/north_tcp_server_7114", "#/servers/north_tcp_server_7143"]
    record = events["messages"]["record"]
    schema = json.loads((ROOT / "etc" / "schemas" / "events.json").read_text())
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert record["payload"] == {"schemaFormat": "application/schema+json;version=2020-12",
                                 "schema": schema}
    assert events["messages"]["delete"]["payload"]["type"] == "string"
    assert all(o["action"] == "receive" for o in doc["operations"].values())
    assert "${" not in text, "every title and description expanded"
    assert not re.search(r"[&*]id\d", text), "no YAML anchors or aliases"


def test_guarded_routes_and_registry_models_document_is_valid(
        tmp_path: Path, registry: Registry, capsys: pytest.CaptureFixture[str]) -> None:
    registry.register("prices-value", AVRO)
    text = (ROOT / "etc" / "zilla-jwt.yaml").read_text()
    text = text.replace("""        guarded:
          jwt0:
            - read
""", """        guarded:
          jwt0:
            - read
      - when:
          - headers:
              :path: /prices/*
        exit: north_sse_server
        guarded:
          jwt0:
            - read
""")
    text = text.replace("""    routes:
      - when:
          - path: /{topic}
        exit: north_kafka_cache_client""", """    routes:
      - when:
          - path: /prices/{region}
        exit: north_kafka_cache_client
        with:
          topic: prices
      - when:
          - path: /{topic}
        exit: north_kafka_cache_client""")
    text = text.replace("""      bootstrap:
        - events
""", """      bootstrap:
        - events
      topics:
        - name: prices
          value:
            model: avro
            view: json
            catalog:
              registry:
                - strategy: topic
                  version: latest
""") + f"""catalogs:
  registry:
    type: schema-registry
    options:
      url: {registry.url}
"""
    assert "/prices/{region}" in text and "model: avro" in text
    config = tmp_path / "zilla.yaml"
    config.write_text(text)
    out, err = _asyncapi(config, capsys)
    doc = yaml.safe_load(out)
    assert err == ""
    assert problems(doc) == []
    assert doc["components"]["securitySchemes"]["jwt0"] == {
        "type": "http", "scheme": "bearer", "bearerFormat": "JWT",
        "description": doc["components"]["securitySchemes"]["jwt0"]["description"]}
    prices = next(k for k, c in doc["channels"].items() if c["address"] == "/prices/{region}")
    channel = doc["channels"][prices]
    assert set(channel["messages"]) == {"record", "delete", "challenge"}
    assert channel["messages"]["record"]["payload"]["schema"] == AVRO
    assert "application/vnd.apache.avro" in channel["messages"]["record"]["payload"][
        "schemaFormat"]
    assert channel["messages"]["challenge"]["payload"]["properties"]["method"] == \
        {"const": "POST"}
    operation = doc["operations"][f"receive_{prices}"]
    assert operation["security"] == [{"$ref": "#/components/securitySchemes/jwt0"}]
    assert f"#/channels/{prices}/messages/challenge" in \
        [m["$ref"] for m in operation["messages"]]
    # the registry is down: the document still comes, without that payload, and says why
    registry.stop()
    out, err = _asyncapi(config, capsys)
    assert "warning: catalog 'registry'" in err
    doc = yaml.safe_load(out)
    assert problems(doc) == []
    assert "payload" not in doc["channels"][prices]["messages"]["record"]


def test_the_official_schema_catches_a_broken_document(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The check above can fail: the same validator refuses what AsyncAPI 3.0 does not allow."""
    doc = yaml.safe_load(_asyncapi(ROOT / "etc" / "zilla.yaml", capsys)[0])
    for breakage in ("action", "address", "version"):
        broken = copy.deepcopy(doc)
        if breakage == "action":
            next(iter(broken["operations"].values()))["action"] = "subscribe"  # AsyncAPI 2's
        elif breakage == "address":
            next(iter(broken["channels"].values()))["address"] = 7
        else:
            broken["asyncapi"] = "2.6.0"
        assert problems(broken) != [], breakage


def test_a_channel_is_a_path_that_reaches_a_stream_through_every_binding(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """First match wins at the tcp, http and sse-kafka routes, the http binding's own paths
    come first, `:scheme` and `:method` count, and the topic is expanded with what the path
    captures (tests/support/channels.py says which paths reach a stream, and why)."""
    config = write_walk_config(tmp_path, 7000, 7001)
    text, _ = _asyncapi(config, capsys)
    doc = yaml.safe_load(text)
    assert problems(doc) == []
    servers = {"#/servers/tcp_7000": "plain", "#/servers/tcp_7001": "secure"}
    assert doc["servers"]["tcp_7001"]["protocol"] == "https"
    got = {c["address"]: (c["title"].removesuffix(" as Server-Sent Events"),
                          {servers[s["$ref"]] for s in c["servers"]})
           for c in doc["channels"].values()}
    assert got == EXPECTED
    assert "${" not in text
    by_address = {c["address"]: (k, c) for k, c in doc["channels"].items()}
    key, topics = by_address["/topics/{topic}"]
    assert topics["parameters"] == {"topic": {"description": "`{topic}` of the path, the topic."}}
    assert "security" not in doc["operations"][f"receive_{key}"]
    key, mine = by_address["/mine"]
    assert doc["operations"][f"receive_{key}"]["security"] == \
        [{"$ref": "#/components/securitySchemes/jwt0"}]


def test_no_yaml_aliases_even_where_channels_share_a_message(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Every channel has a `delete` message (and guarded ones a `challenge`): PyYAML writes an
    object met twice as an anchor and aliases unless told not to."""
    text, _ = _asyncapi(write_walk_config(tmp_path, 7000, 7001), capsys)
    assert text.count("name: delete") == len(EXPECTED)
    assert not re.search(r"(^|\s)[&*]id\d+", text)


def test_http_kafka_routes_are_send_and_receive_operations(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The todo demo: its writes are `send` operations with the HTTP method and the reply, its
    async location and its fetch are `receive`; the document is valid AsyncAPI 3.0."""
    text, _ = _asyncapi(ROOT / "etc" / "zilla-todo.yaml", capsys)
    doc = yaml.safe_load(text)
    assert problems(doc) == []
    ops = {(o["action"], o.get("bindings", {}).get("http", {}).get("method"),
            doc["channels"][o["channel"]["$ref"].split("/")[-1]]["address"])
           for o in doc["operations"].values()}
    assert {("send", "POST", "/tasks"), ("send", "PUT", "/tasks/{id}"),
            ("send", "DELETE", "/tasks/{id}"), ("receive", "GET", "/tasks/{id};{correlationId}"),
            ("receive", "GET", "/tasks/{id}"), ("receive", None, "/tasks")} <= ops
    post = next(o for o in doc["operations"].values()
                if o.get("bindings", {}).get("http", {}).get("method") == "POST")
    assert post["reply"]["messages"][0]["$ref"].endswith("/messages/reply")
    put_channel = next(c for c in doc["channels"].values() if c["address"] == "/tasks/{id}"
                       and "request" in c["messages"])
    assert set(put_channel["parameters"]) == {"id"}
    assert all(c["servers"] == [{"$ref": "#/servers/north_tcp_server_7114"}]
               for c in doc["channels"].values())


def test_an_http_kafka_path_is_advertised_only_for_the_methods_that_reach_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The todo config with its http route to http-kafka narrowed to GET, and a merged fetch of
    `/tasks` added: the writes go to the static files now, and GET /tasks is the SSE stream, so
    neither is a channel; the fetch of one task and the async location still are."""
    text = (ROOT / "etc" / "zilla-todo.yaml").read_text()
    narrowed = text.replace("""          - headers:
              :path: /tasks
          - headers:
              :path: /tasks/*
        exit: north_http_kafka_mapping""", """          - headers:
              :method: GET
              :path: /tasks
          - headers:
              :method: GET
              :path: /tasks/*
        exit: north_http_kafka_mapping""").replace("""  north_http_kafka_mapping:
    type: http-kafka
    kind: proxy
    routes:
""", """  north_http_kafka_mapping:
    type: http-kafka
    kind: proxy
    routes:
      - when:
          - method: GET
            path: /tasks
        exit: north_kafka_cache_client
        with:
          capability: fetch
          topic: task-snapshots
          merge:
            content-type: application/json
""")
    assert narrowed.count(":method: GET") == 3 and "merge:" in narrowed
    config = tmp_path / "zilla.yaml"
    config.write_text(narrowed)
    doc = yaml.safe_load(_asyncapi(config, capsys)[0])
    assert problems(doc) == []
    ops = {(o["action"], o.get("bindings", {}).get("http", {}).get("method"),
            doc["channels"][o["channel"]["$ref"].split("/")[-1]]["address"])
           for o in doc["operations"].values()}
    assert ops == {("receive", None, "/tasks"), ("receive", "GET", "/tasks/{id};{correlationId}"),
                   ("receive", "GET", "/tasks/{id}")}


def test_an_http_kafka_route_an_earlier_one_takes_first_is_not_advertised(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """First match wins inside the binding too: a second fetch of `/items/{id}` is never
    reached, a route without a method takes every method after it, and a write of the same
    path by another method is its own channel."""
    config = tmp_path / "zilla.yaml"
    config.write_text("""\
name: shadowed
bindings:
  tcp0: {type: tcp, kind: server, options: {host: 127.0.0.1, port: 7000}, exit: http0}
  http0: {type: http, kind: server, exit: hk0}
  hk0:
    type: http-kafka
    kind: proxy
    routes:
      - when: [{method: GET, path: "/items/{id}"}]
        exit: cc
        with: {capability: fetch, topic: items, filters: [{key: "${params.id}"}]}
      - when: [{method: GET, path: "/items/{id}"}]
        exit: cc
        with: {capability: fetch, topic: other, filters: [{key: "${params.id}"}]}
      - when: [{method: PUT, path: "/items/{id}"}]
        exit: cc
        with: {capability: produce, topic: commands, key: "${params.id}"}
      - when: [{path: "/all/*"}]
        exit: cc
        with: {capability: produce, topic: everything}
      - when: [{method: POST, path: "/all/{id}"}]
        exit: cc
        with: {capability: produce, topic: never}
  cc: {type: kafka, kind: cache_client, exit: cs}
  cs: {type: kafka, kind: cache_server, exit: kc}
  kc: {type: kafka, kind: client, options: {servers: ["127.0.0.1:9092"]}}
""")
    doc = yaml.safe_load(_asyncapi(config, capsys)[0])
    assert problems(doc) == []
    summaries = sorted((o["action"], o.get("bindings", {}).get("http", {}).get("method", ""),
                        doc["channels"][o["channel"]["$ref"].split("/")[-1]]["address"],
                        o["summary"]) for o in doc["operations"].values())
    assert summaries == [
        ("receive", "GET", "/items/{id}", "Read the latest values of items"),
        ("send", "", "/all/*", "Write a record to everything"),
        ("send", "PUT", "/items/{id}", "Write a record to commands")]


def _example_with(folder: Path, with_block: str) -> Path:
    """etc/zilla.yaml (and its schemas) copied into `folder`, its `/{topic}` route's
    `with` replaced by `with_block`."""
    text = (ROOT / "etc" / "zilla.yaml").read_text()
    old = """        with:
          topic: ${params.topic}
"""
    assert old in text
    shutil.copytree(ROOT / "etc" / "schemas", folder / "schemas")
    config = folder / "zilla.yaml"
    config.write_text(text.replace(old, with_block))
    return config


def test_a_route_reading_request_values_says_what_a_client_must_send(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`${query.name}` and `${headers.name}` (ssekd additions): the document names them in
    words (never `${...}`), the query parameters in the operation's http binding, and a topic
    taken from the query is no literal topic (no model is looked up for it)."""
    config = _example_with(tmp_path, """        with:
          topic: ${query.stream}
          filters:
            - key: ${headers.x-item}
              value:
                /region: [eu, "${query.region}"]
""")
    doc = yaml.safe_load(_asyncapi(config, capsys)[0])
    assert problems(doc) == []
    [(key, events)] = doc["channels"].items()
    assert events["title"] == "{query stream} as Server-Sent Events"
    assert "the header `x-item` and the query parameter `region` and the query parameter " \
           "`stream`" in events["description"]
    binding = doc["operations"][f"receive_{key}"]["bindings"]["http"]
    assert binding["method"] == "GET"
    assert binding["query"]["required"] == ["region", "stream"]
    assert set(binding["query"]["properties"]) == {"region", "stream"}
    assert "${" not in yaml.safe_dump(doc)


@pytest.mark.parametrize("topic_as", ["event", "field"])
def test_a_route_of_several_topics_says_how_events_name_their_topic(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], topic_as: str) -> None:
    """A topic list (an ssekd addition): the channel names every topic (a path list as its
    parameter), says that the id carries every topic's progress, and how an event says its
    topic - its type, or a `topic:` field."""
    config = _example_with(tmp_path, f"""        with:
          topic: [audit, "${{params.topic}}"]
          event: {{id: "${{etag}}", topic: {topic_as}}}
""")
    doc = yaml.safe_load(_asyncapi(config, capsys)[0])
    assert problems(doc) == []
    [(key, events)] = doc["channels"].items()
    assert events["title"].startswith("audit,")
    assert events["title"].endswith("(several topics) as Server-Sent Events")
    assert "each event's `id` carries the progress of every topic" in events["description"]
    record, delete = events["messages"]["record"], events["messages"]["delete"]
    if topic_as == "event":
        assert "Each event's type is its topic's name." in events["description"]
        assert (record["name"], delete["name"]) == ("<topic>", "<topic>:delete")
        assert "event type: the name of its topic" in record["summary"]
    else:
        assert "Each event names its topic in a `topic:` field." in events["description"]
        assert (record["name"], delete["name"]) == ("record", "delete")
        assert "`topic:` field" in record["summary"] and "`topic:` field" in delete["summary"]
    assert "${" not in yaml.safe_dump(doc)


def test_a_protobuf_model_is_a_protobuf_payload(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """http.kafka.proto.json with an sse-kafka route on its topic (the config its e2e test
    reads back with): the record's payload is the `.proto` text, in AsyncAPI's protobuf
    schema format, and the document stays valid."""
    from tests.e2e.zilla_examples.test_http_kafka_models import PROTO, proto_round_trip_config
    from tests.support.zilla_examples import prepare

    example = prepare(PROTO, tmp_path / "proto", "127.0.0.1:9")
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVER", "127.0.0.1:9")
    example.config.write_text(proto_round_trip_config(example.config.read_text()))
    out, err = _asyncapi(example.config, capsys)
    doc = yaml.safe_load(out)
    assert err == "" and problems(doc) == []
    [channel] = [c for c in doc["channels"].values() if c["address"] == "/stream/{id}"]
    record = channel["messages"]["record"]
    assert record["payload"] == {
        "schemaFormat": "application/vnd.google.protobuf;version=3",
        "schema": (example.root("/etc/zilla/protos/request.proto")).read_text()}
    assert "Request message, delivered as JSON" in record["description"]
