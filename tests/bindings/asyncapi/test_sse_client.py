"""Composing the asyncapi client of an SSE spec (Zilla's asyncapi.sse.proxy): the sse client, http
client and tcp client a zilla.yaml written by hand would have, the operation's payload schema
checked by the sse client's `requests`; what cannot be relayed is a config error at the spec's
(or the config's) file and line; `ssekd check` and `--print-composed` say what was composed; a
reload keeps what a spec change leaves alone; the AsyncAPI document says what the spec says."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from ssekd.cli import main
from ssekd.dev.launcher import ready_block
from tests.support.asyncapi import problems as document_problems
from tests.support.composing import Rebuilds, edited_copy, load, problems, without_origin
from tests.support.data import DATA

EXAMPLE = DATA / "zilla-examples" / "asyncapi.sse.proxy" / "etc"
PAYLOAD = {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
           "properties": {"id": {"type": "integer", "minimum": 0, "description": "Event id."},
                          "name": {"type": "string", "description": "Event name."},
                          "tag": {"type": "string", "description": "Tag."}}}

#: The bindings the example stands for, as ssekd composes them, written by hand.
BY_HAND = f"""\
name: zilla-asyncapi-sse-proxy
catalogs:
  host_filesystem:
    type: filesystem
    options:
      subjects:
        eventstore: {{path: specs/sse-asyncapi.yaml}}
  sse_proxy_client.payloads:
    type: inline
    options:
      subjects:
        my-asyncapi-spec.showEventById:
          schema: '{json.dumps(PAYLOAD)}'
bindings:
  sse_proxy_server:
    type: tcp
    kind: server
    options: {{host: 127.0.0.1, port: [7114]}}
    exit: sse_proxy_server.http_server
  sse_proxy_server.http_server:
    type: http
    kind: server
    options:
      access-control: {{policy: cross-origin}}
    routes:
      - when: [{{headers: {{":path": "/events/{{id}}", ":method": GET}}}}]
        exit: sse_proxy_server.sse_server
  sse_proxy_server.sse_server:
    type: sse
    kind: server
    exit: sse_proxy_client
  sse_proxy_client:
    type: sse
    kind: client
    routes:
      - when: [{{path: "/events/{{id}}"}}]
        exit: sse_proxy_client.http_client
    options:
      requests:
        - path: "/events/{{id}}"
          content:
            model: json
            catalog:
              sse_proxy_client.payloads: [{{subject: my-asyncapi-spec.showEventById}}]
  sse_proxy_client.http_client:
    type: http
    kind: client
    exit: sse_proxy_client.tcp_client
  sse_proxy_client.tcp_client:
    type: tcp
    kind: client
    options: {{host: sse-server, port: 8001}}
telemetry:
  exporters:
    stdout_logs_exporter:
      type: stdout
"""


@pytest.fixture(autouse=True)
def environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The example's compose environment."""
    monkeypatch.setenv("SSE_SERVER_HOST", "sse-server")
    monkeypatch.setenv("SSE_SERVER_PORT", "8001")


def example(folder: Path, **edits: list[tuple[str, str]]) -> Path:
    """The example in `folder`, `zilla` and `sse` (its spec) with text edits (each applies
    once); the folder is the current one, so file names are as a user there sees them."""
    return edited_copy(EXAMPLE, folder, {"zilla": "zilla.yaml", "sse": "specs/sse-asyncapi.yaml"},
                       edits)


def test_the_example_composes_what_a_hand_written_config_says(tmp_path: Path) -> None:
    composed = load(example(tmp_path / "ex"))
    (tmp_path / "ex" / "by-hand.yaml").write_text(BY_HAND)
    by_hand = load(tmp_path / "ex" / "by-hand.yaml")
    assert list(composed.bindings) == list(by_hand.bindings)
    assert without_origin(composed) == without_origin(by_hand)
    assert composed.catalogs == by_hand.catalogs
    assert tmp_path / "ex" / "specs" / "sse-asyncapi.yaml" in composed.sources


def test_check_prints_the_relay_and_the_composed_config_loads_as_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(example(tmp_path / "ex").parent)
    assert main(["check", "--config", "zilla.yaml"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[2] == ("composed asyncapi client sse_proxy_client: relays 1 SSE operation(s) (1 "
                      "checked against their payloads) from http://sse-server:8001, of "
                      "my-asyncapi-spec (specs/sse-asyncapi.yaml)")
    assert out[4:] == [
        "  when :path=/events/{id} :method=GET -> sse_proxy_server.sse_server (sse server) -> "
        "sse_proxy_client (sse client)",
        "      when path=/events/{id} -> sse_proxy_client.http_client (http client) -> "
        "sse_proxy_client.tcp_client (tcp client sse-server:8001)"]
    assert main(["check", "--config", "zilla.yaml", "--print-composed"]) == 0
    Path("composed.yaml").write_text(capsys.readouterr().out)
    written = load(Path("composed.yaml"))
    assert written.composites == {}
    assert without_origin(written) == without_origin(load(Path("zilla.yaml")))


SERVERS = "            - http://${{env.SSE_SERVER_HOST}}:${{env.SSE_SERVER_PORT}}\n"
BAD = [
    ("an-upstream-url-with-a-path",
     {"zilla": [(SERVERS, "            - http://sse-server:8001/base\n")]},
     ["zilla.yaml:30: bindings.sse_proxy_client.options.specs.my-asyncapi-spec.servers[0]: "
      "http://sse-server:8001/base: an upstream URL without a path: the request's path goes "
      "upstream as it came"]),
    ("an-upstream-that-is-not-http",
     {"zilla": [(SERVERS, "            - http://sse-server:8001\n"
                          "            - https://other:8443\n")]},
     ["zilla.yaml:27: bindings.sse_proxy_client.options.specs: binding 'sse_proxy_client' "
      "relays events from one upstream; its specs name http://sse-server:8001, "
      "https://other:8443: give each upstream its own asyncapi client, or name one URL in "
      "servers"]),
    ("no-sse-operation",
     {"sse": [("      x-zilla-sse:\n", "      x-other:\n")]},
     ["specs/sse-asyncapi.yaml:25: operations: no operation has the x-zilla-sse binding: "
      "binding 'sse_proxy_client' has nothing to relay (spec 'my-asyncapi-spec')"]),
    ("a-payload-in-another-document",
     {"sse": [('        $ref: "#/components/schemas/eventPayload"',
               '        $ref: "other.yaml#/eventPayload"')]},
     ["specs/sse-asyncapi.yaml:57: components.messages.event.payload.$ref: reference "
      "'other.yaml#/eventPayload' is to another document; only references inside the spec "
      "(#/...) are followed (spec 'my-asyncapi-spec')"]),
    ("a-payload-that-contains-itself",
     {"sse": [("        tag:\n          type: string\n",
               "        tag:\n          $ref: '#/components/schemas/eventPayload'\n")]},
     ["specs/sse-asyncapi.yaml:46: components.schemas.eventPayload.properties.tag: schema "
      "'#/components/schemas/eventPayload' contains itself; ssekd checks records only against "
      "schemas without recursion (spec 'my-asyncapi-spec')"]),
]


@pytest.mark.parametrize("edits,expected", [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_what_cannot_be_relayed_is_an_error_at_its_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, edits: dict[str, Any],
        expected: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(example(tmp_path / "ex", **edits).parent)
    assert mine(problems(Path("zilla.yaml"))) == expected
    assert main(["check", "--config", "zilla.yaml"]) == 1
    assert mine(capsys.readouterr().err.splitlines()) == expected


def mine(issues: list[str]) -> list[str]:
    """The issues but the asyncapi server's own (what it says of a spec it cannot serve is
    test_compose's subject)."""
    return [i for i in issues if "binding 'sse_proxy_server' has nothing to serve" not in i]


def test_a_server_exit_that_is_a_kafka_client_is_an_error_after_composing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before the specs are read an asyncapi client may be either; composed for a Kafka spec,
    it is a kafka cache, which the sse server cannot stream from."""
    kafka = tmp_path / "ex" / "specs" / "kafka-asyncapi.yaml"
    config = example(tmp_path / "ex", zilla=[
        (SERVERS, "            - kafka://localhost:9092\n"),
        ("              subject: eventstore\ntelemetry",
         "              subject: kafka\ntelemetry"),
        ("          path: specs/sse-asyncapi.yaml\n",
         "          path: specs/sse-asyncapi.yaml\n        kafka:\n"
         "          path: specs/kafka-asyncapi.yaml\n")])
    shutil.copy(DATA / "zilla-examples" / "asyncapi.sse.kafka.proxy" / "etc" / "specs" /
                "kafka-asyncapi.yaml", kafka)
    kafka.write_text(kafka.read_text().replace("kafka.examples.dev:29092", "localhost:9092"))
    monkeypatch.chdir(config.parent)
    # line 24: the asyncapi server's `exit` (the catalog gained two lines above it)
    assert problems(Path("zilla.yaml")) == [
        "zilla.yaml:24: bindings.sse_proxy_server.sse_server.exit: exit 'sse_proxy_client' of "
        "binding 'sse_proxy_server.sse_server' is a kafka cache_client (kafka cache); expected "
        "a binding that is stream source"]


def requests_of(config: Path) -> list[dict[str, Any]]:
    options = load(config).bindings["sse_proxy_client"].options
    return list(options.get("requests") or [])


def test_what_is_checked_follows_the_messages(tmp_path: Path) -> None:
    """JSON messages (the message's content type, else the spec's default) are checked, several
    as `anyOf`; a message in another content type, without payload, or in another schema
    format leaves the operation unchecked."""
    second = ("      event:\n        $ref: \"#/components/messages/event\"\n\noperations",
              "      event:\n        $ref: \"#/components/messages/event\"\n"
              "      other:\n        payload: {type: string}\n\noperations")
    config = example(tmp_path / "two", sse=[second])
    composed = load(config)
    [subject] = composed.catalogs["sse_proxy_client.payloads"]["options"]["subjects"].values()
    schema = json.loads(subject["schema"])
    assert schema["anyOf"][1] == {"type": "string"}
    assert schema["anyOf"][0]["properties"]["id"]["minimum"] == 0
    text = example(tmp_path / "text", sse=[("      contentType: application/json\n",
                                            "      contentType: text/plain\n")])
    assert requests_of(text) == []
    default = example(tmp_path / "default", sse=[
        ("defaultContentType: application/json", "defaultContentType: text/plain"),
        ("      contentType: application/json\n", "")])
    assert requests_of(default) == []
    own = example(tmp_path / "own", sse=[
        ("defaultContentType: application/json", "defaultContentType: text/plain")])
    assert [r["path"] for r in requests_of(own)] == ["/events/{id}"]
    avro = example(tmp_path / "avro", sse=[
        ('      payload:\n        $ref: "#/components/schemas/eventPayload"',
         '      payload:\n        schemaFormat: application/vnd.apache.avro;version=1.9.0\n'
         '        schema: {type: string}')])
    assert requests_of(avro) == []


def test_an_https_upstream_gets_a_tls_client(tmp_path: Path) -> None:
    """It trusts the system's CAs, or the binding's vault when it names one."""
    config = load(example(tmp_path / "ex", zilla=[(SERVERS, "            - https://upstream\n")]))
    tls = config.bindings["sse_proxy_client.tls_client"]
    assert config.bindings["sse_proxy_client.http_client"].exit == tls.name
    assert tls.options == {"sni": ["upstream"], "trustcacerts": True}
    assert config.bindings["sse_proxy_client.tcp_client"].options == {"host": "upstream",
                                                                      "port": 443}
    vaulted = load(example(tmp_path / "vault", zilla=[
        (SERVERS, "            - https://upstream:8443\n"),
        ("    kind: client\n", "    kind: client\n    vault: upstream_trust\n"),
        ("bindings:\n", "vaults:\n  upstream_trust:\n    type: filesystem\n    options:\n"
                        "      trust: {store: trust.p12, type: pkcs12, password: x}\n"
                        "bindings:\n")]))
    tls = vaulted.bindings["sse_proxy_client.tls_client"]
    assert (tls.vault, tls.options) == ("upstream_trust", {"sni": ["upstream"]})


def test_without_a_url_the_spec_server_is_the_upstream(tmp_path: Path) -> None:
    config = load(example(tmp_path / "ex", zilla=[(SERVERS, ""), (
        "          servers:\n          catalog:", "          catalog:")]))
    assert config.bindings["sse_proxy_client.tcp_client"].options == {"host": "localhost",
                                                                      "port": 7114}


def test_a_reload_rebuilds_only_what_a_spec_change_touches(tmp_path: Path) -> None:
    """New words keep every binding; a new payload schema rebuilds the sse client that checks
    it and what leads to it, and keeps the http and tcp clients."""
    config = example(tmp_path / "ex")
    rebuilds = Rebuilds(config)
    spec = config.parent / "specs" / "sse-asyncapi.yaml"
    worded = rebuilds.after(spec, "Inform about Event.", "Says what happened.")
    assert worded.reused == set(rebuilds.first.runtimes)
    checked = rebuilds.after(spec, "          minimum: 0\n", "          minimum: 1\n")
    assert "sse_proxy_client" not in checked.reused
    assert {"sse_proxy_client.http_client", "sse_proxy_client.tcp_client"} <= checked.reused


def test_the_asyncapi_document_says_what_the_spec_says(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = example(tmp_path / "ex")
    spec = yaml.safe_load((config.parent / "specs" / "sse-asyncapi.yaml").read_text())
    assert main(["asyncapi", "--config", str(config)]) == 0
    doc = yaml.safe_load(capsys.readouterr().out)
    assert document_problems(doc) == []
    assert doc["operations"] == spec["operations"]
    assert doc["channels"] == {"showEventById": spec["channels"]["showEventById"]}
    assert doc["components"] == spec["components"]
    assert doc["servers"] == spec["servers"]


def test_make_run_names_the_relayed_stream(tmp_path: Path) -> None:
    """`make run`'s ready block: the relayed path is a stream to curl, not a topic."""
    config = example(tmp_path / "ex")
    block = ready_block(config, load(config), [], [], [])
    assert ("http://localhost:7114/events/{id}",
            "a relayed stream: curl -N http://localhost:7114/events/{id}") in block.urls
