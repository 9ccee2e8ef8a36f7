"""Composing from AsyncAPI specs: the asyncapi server, proxy and client bindings become the
bindings a zilla.yaml written by hand would have (the same `Binding` objects), and a spec that
cannot be served is a config error at the spec's file and line."""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pytest

from ssekd.bindings.specs.serving import listen_host
from ssekd.cli import main
from tests.support.asyncapi_example import EXAMPLE
from tests.support.composing import Rebuilds, edited_copy, load, problems, without_origin

#: The bindings Zilla's example stands for, as ssekd composes them, written by hand.
BY_HAND = """\
name: zilla-sse-kafka-asyncapi
catalogs:
  host_filesystem:
    type: filesystem
    options:
      subjects:
        sse: {path: specs/sse-asyncapi.yaml}
        kafka: {path: specs/kafka-asyncapi.yaml}
  south_kafka_client.payloads:
    type: inline
    options:
      subjects:
        events-value:
          schema: '{"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
            "properties": {"id": {"type": "integer", "minimum": 0, "description": "Event id."},
            "name": {"type": "string", "description": "Event name."}}}'
bindings:
  north_sse_server:
    type: tcp
    kind: server
    options: {host: 127.0.0.1, port: [7114]}
    exit: north_sse_server.http_server
  north_sse_server.http_server:
    type: http
    kind: server
    options:
      access-control: {policy: cross-origin}
    routes:
      - when: [{headers: {":path": /events, ":method": GET}}]
        exit: north_sse_server.sse_server
  north_sse_server.sse_server:
    type: sse
    kind: server
    exit: south_kafka_proxy
  south_kafka_proxy:
    type: sse-kafka
    kind: proxy
    routes:
      - when: [{path: /events}]
        exit: south_kafka_client
        with: {topic: events}
  south_kafka_client:
    type: kafka
    kind: cache_client
    exit: south_kafka_client.cache_server
  south_kafka_client.cache_server:
    type: kafka
    kind: cache_server
    options:
      bootstrap: [events]
      topics:
        - name: events
          value:
            model: json
            catalog:
              south_kafka_client.payloads: [{subject: events-value}]
    exit: south_kafka_client.kafka_client
  south_kafka_client.kafka_client:
    type: kafka
    kind: client
    options: {servers: ["kafka.examples.dev:29092"]}
telemetry:
  exporters:
    stdout_exporter:
      type: stdout
"""


def example(folder: Path, **edits: list[tuple[str, str]]) -> Path:
    """Zilla's example in `folder`, each file (`zilla`, `sse`, `kafka`) with its text edits
    (each must apply once)."""
    return edited_copy(EXAMPLE, folder / "ex",
                       {"zilla": "zilla.yaml", "sse": "specs/sse-asyncapi.yaml",
                        "kafka": "specs/kafka-asyncapi.yaml"}, edits)


def test_example_composes_what_a_hand_written_config_says(tmp_path: Path) -> None:
    composed = load(example(tmp_path))
    (tmp_path / "ex" / "by-hand.yaml").write_text(BY_HAND)
    by_hand = load(tmp_path / "ex" / "by-hand.yaml")
    assert list(composed.bindings) == list(by_hand.bindings)
    assert without_origin(composed) == without_origin(by_hand)
    assert composed.catalogs["south_kafka_client.payloads"]["type"] == "inline"
    assert set(composed.catalogs) == set(by_hand.catalogs)
    # what a reload or --watch must follow: the config and both specs
    folder = tmp_path / "ex"
    assert set(composed.sources) >= {folder / "zilla.yaml", folder / "specs" / "sse-asyncapi.yaml",
                                     folder / "specs" / "kafka-asyncapi.yaml"}


BAD_SPECS = [
    ("sse-operation-without-kafka-partner",
     {"kafka": [("  receiveEvents:\n    action", "  listEvents:\n    action")]},
     "specs/sse-asyncapi.yaml:21: operations.receiveEvents: SSE operation 'receiveEvents' has "
     "no Kafka operation of the same name in spec 'kafka_api' (specs/kafka-asyncapi.yaml; its "
     "operations: listEvents); name its partner with with.operation in route 0 of binding "
     "'south_kafka_proxy' (spec 'sse_api')"),
    ("kafka-operation-that-sends",
     {"kafka": [("    action: receive", "    action: send")]},
     "specs/kafka-asyncapi.yaml:19: operations.receiveEvents.action: Kafka operation "
     "'receiveEvents' is 'send', but SSE operation 'receiveEvents' (specs/sse-asyncapi.yaml:21) "
     "streams the records of its topic: expected action: receive (spec 'kafka_api')"),
    ("topic-parameter-the-path-cannot-supply",
     {"kafka": [('    address: "events"', '    address: "events.{tenant}"')]},
     "specs/kafka-asyncapi.yaml:12: channels.events.address: topic address 'events.{tenant}' "
     "has parameter {tenant}, which the SSE path '/events' of operation 'receiveEvents' "
     "(specs/sse-asyncapi.yaml:21) cannot supply: the path has no parameter (spec 'kafka_api')"),
    ("unknown-server",
     {"zilla": [("            - http://localhost:7114\n          catalog:\n            "
                 "host_filesystem:\n              subject: sse\n    exit",
                 "            - http://localhost:7115\n          catalog:\n            "
                 "host_filesystem:\n              subject: sse\n    exit")]},
     "zilla.yaml:20: bindings.north_sse_server.options.specs.sse_api.servers[0]: "
     "http://localhost:7115 is not a server of spec 'sse_api' (specs/sse-asyncapi.yaml); the "
     "spec's servers: plain_sse (http://localhost:7114, specs/sse-asyncapi.yaml:8)"),
]


@pytest.mark.parametrize("edits,expected", [c[1:] for c in BAD_SPECS],
                         ids=[c[0] for c in BAD_SPECS])
def test_bad_specs_are_errors_at_the_spec_line(tmp_path: Path, edits: dict[str, list[tuple[str, str]]],
                                              expected: str, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    config = example(tmp_path, **edits)
    monkeypatch.chdir(config.parent)  # file names as a user in that folder sees them
    assert problems(Path("zilla.yaml")) == [expected]
    assert main(["check", "--config", "zilla.yaml"]) == 1
    assert capsys.readouterr().err.splitlines() == [expected]


def test_more_bad_specs_and_options(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cases: list[tuple[dict[str, list[tuple[str, str]]], str]] = [
        ({"sse": [("asyncapi: 3.0.0", "asyncapi: 2.6.0")]},
         "specs/sse-asyncapi.yaml:1: asyncapi: expected an AsyncAPI 3 document (asyncapi: "
         "3.0.0), got '2.6.0' (spec 'sse_api')"),
        ({"sse": [('      $ref: "#/channels/events"', '      $ref: "#/channels/event"')]},
         "specs/sse-asyncapi.yaml:23: operations.receiveEvents.channel: channel 'event' is not "
         "in the spec's channels (spec 'sse_api')"),
        ({"sse": [('        $ref: "#/components/schemas/eventPayload"',
                   '        $ref: "other.yaml#/eventPayload"')]},
         None),  # a payload the SSE side only describes: not followed, no error
        ({"kafka": [('        $ref: "#/components/schemas/eventPayload"',
                     '        $ref: "other.yaml#/eventPayload"')]},
         "specs/kafka-asyncapi.yaml:39: components.messages.event.payload.$ref: reference "
         "'other.yaml#/eventPayload' is to another document; only references inside the spec "
         "(#/...) are followed (spec 'kafka_api')"),
        ({"sse": [("    address: /events", "    address: events")]},
         "specs/sse-asyncapi.yaml:15: channels.events.address: channel 'events' of SSE "
         "operation 'receiveEvents': expected an address that is a path (starting with /), got "
         "'events' (spec 'sse_api')"),  # said once, though the server and the proxy both find it
        ({"sse": [("  plain_sse:\n    host: localhost:7114\n    protocol: http",
                   "  plain_sse:\n    host: localhost:7114\n    protocol: ws")]},
         "zilla.yaml:20: bindings.north_sse_server.options.specs.sse_api.servers[0]: "
         "http://localhost:7114 is not a server of spec 'sse_api' (specs/sse-asyncapi.yaml); "
         "the spec's servers: plain_sse (ws://localhost:7114, specs/sse-asyncapi.yaml:8)\n"
         "zilla.yaml:32: bindings.south_kafka_proxy.options.specs.sse_api.servers[0]: "
         "http://localhost:7114 is not a server of spec 'sse_api' (specs/sse-asyncapi.yaml); "
         "the spec's servers: plain_sse (ws://localhost:7114, specs/sse-asyncapi.yaml:8)"),
        ({"sse": [('        method: "GET"', '        method: "POST"')]},
         "specs/sse-asyncapi.yaml:27: operations.receiveEvents.bindings.x-zilla-sse.method: SSE "
         "operation 'receiveEvents': an event stream is opened with GET, not POST (spec "
         "'sse_api')"),
        ({"zilla": [("          spec: kafka_api\n  south_kafka_client",
                     "          spec: kafka_api\n          operation: nope\n  south_kafka_client")]},
         "zilla.yaml:48: bindings.south_kafka_proxy.routes[0].with.operation: 'nope' is not an "
         "operation of spec 'kafka_api' (specs/kafka-asyncapi.yaml); expected one of: "
         "receiveEvents"),
        ({"zilla": [("          - spec: sse_api\n", "          - spec: sse_api\n"
                     "            operation: send*\n")]},
         "zilla.yaml:43: bindings.south_kafka_proxy.routes[0].when: route 0 of binding "
         "'south_kafka_proxy' takes no operation with the x-zilla-sse or the http binding "
         "(from the specs sse_api)"),
        ({"zilla": [("          - spec: sse_api\n", "          - spec: sse\n")]},
         "zilla.yaml:44: bindings.south_kafka_proxy.routes[0].when[0].spec: 'sse' is not a spec "
         "of binding 'south_kafka_proxy'; expected one of sse_api, kafka_api"),
        ({"zilla": [("              subject: kafka\n    routes:",
                     "              subject: kafkaa\n    routes:")]},
         "zilla.yaml:41: bindings.south_kafka_proxy.options.specs.kafka_api.catalog."
         "host_filesystem.subject: catalog 'host_filesystem' has no subject 'kafkaa'"),
    ]
    for i, (edits, expected) in enumerate(cases):
        folder = tmp_path / str(i)
        config = example(folder, **edits)
        monkeypatch.chdir(config.parent)
        if expected is None:
            load(Path("zilla.yaml"))
            continue
        assert problems(Path("zilla.yaml")) == expected.split("\n"), edits


def test_a_spec_that_is_not_yaml_and_an_inline_spec_are_errors_at_their_lines(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = example(tmp_path, sse=[("  events:\n    address", "  events:\n   address")])
    monkeypatch.chdir(config.parent)
    [problem] = problems(Path("zilla.yaml"))
    # where PyYAML finds it: the line after the one indented wrong, as for a zilla.yaml
    assert problem.startswith("specs/sse-asyncapi.yaml:16: <root>: YAML syntax: a `key:` "
                              "where no key can start"), problem
    # a spec inline in zilla.yaml (an inline catalog): its lines are the config's
    spec = (EXAMPLE / "specs" / "sse-asyncapi.yaml").read_text().replace(
        'method: "GET"', 'method: "POST"')
    inline = textwrap.indent(spec, "            ")
    text = (EXAMPLE / "zilla.yaml").read_text().replace(
        "catalogs:\n", f"catalogs:\n  specs:\n    type: inline\n    options:\n      subjects:\n"
                       f"        sse:\n          schema: |\n{inline}")
    text = text.replace("            host_filesystem:\n              subject: sse\n",
                        "            specs:\n              subject: sse\n")
    shutil.copytree(EXAMPLE / "specs", tmp_path / "in" / "specs")  # the Kafka spec is a file
    (tmp_path / "in" / "inline.yaml").write_text(text)
    monkeypatch.chdir(tmp_path / "in")
    line = text.splitlines().index('                    method: "POST"') + 1
    assert problems(Path("inline.yaml")) == [
        f"inline.yaml:{line}: operations.receiveEvents.bindings.x-zilla-sse.method: SSE "
        f"operation 'receiveEvents': an event stream is opened with GET, not POST (spec "
        f"'sse_api')"]


def test_security_needs_a_guard_for_every_scheme(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    secured = [("      x-zilla-sse:", "      x-zilla-sse-kafka:\n        filters:\n"
                "          - key: \"{identity}\"\n      x-zilla-sse:"),
               ("    bindings:\n      x-zilla-sse-kafka",
                "    security:\n      - $ref: '#/components/securitySchemes/bearer'\n"
                "    bindings:\n      x-zilla-sse-kafka"),
               ("components:\n", "components:\n  securitySchemes:\n    bearer:\n"
                "      type: http\n      scheme: bearer\n")]
    config = example(tmp_path / "a", sse=secured)
    monkeypatch.chdir(config.parent)
    assert problems(Path("zilla.yaml")) == [
        "specs/sse-asyncapi.yaml:26: operations.receiveEvents.security[0]: operation "
        "'receiveEvents' requires security scheme 'bearer', which binding 'north_sse_server' "
        "maps to no guard: add bearer: <guard> to its options.specs.sse_api.security (spec "
        "'sse_api')",
        "specs/sse-asyncapi.yaml:26: operations.receiveEvents.security[0]: operation "
        "'receiveEvents' requires security scheme 'bearer', which binding 'south_kafka_proxy' "
        "maps to no guard: add bearer: <guard> to its options.specs.sse_api.security (spec "
        "'sse_api')"]
    guard = [("bindings:\n", "guards:\n  jwt0:\n    type: jwt\n    options:\n      keys: "
              "[{kty: oct, kid: k, alg: HS256, k: c2VjcmV0}]\nbindings:\n")] + [
        ("              subject: sse\n    exit",
         "              subject: sse\n          security: {bearer: jwt0}\n    exit"),
        ("              subject: sse\n        kafka_api",
         "              subject: sse\n          security: {bearer: jwt0}\n        kafka_api")]
    config = example(tmp_path / "b", sse=secured, zilla=guard)
    monkeypatch.chdir(config.parent)
    composed = load(Path("zilla.yaml"))
    [route] = composed.bindings["south_kafka_proxy"].routes
    assert route.guarded == {"jwt0": ()}
    assert route.with_ == {"topic": "events", "filters": [{"key": "${guarded['jwt0'].identity}"}]}
    http = composed.bindings["north_sse_server.http_server"]
    assert http.options["authorization"] == {
        "jwt0": {"credentials": {"headers": {"authorization": "Bearer {credentials}"}}}}
    assert http.routes[0].guarded == {"jwt0": ()}
    # {identity} where the operation requires no security: there is no identity to filter by
    config = example(tmp_path / "c", sse=secured[:1])
    monkeypatch.chdir(config.parent)
    assert problems(Path("zilla.yaml")) == [
        "specs/sse-asyncapi.yaml:28: operations.receiveEvents.bindings.x-zilla-sse-kafka."
        "filters[0].key: {identity} in a filter of operation 'receiveEvents': the operation "
        "requires no security that maps to a guard, so there is no identity (spec 'sse_api')"]


def test_path_parameters_reach_the_topic_and_filters(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    config = example(
        tmp_path,
        sse=[("    address: /events", "    address: /events/{tenant}"),
             ("      x-zilla-sse:", "      x-zilla-sse-kafka:\n        filters:\n"
              "          - headers: {tenant: \"{tenant}\", kind: sensor}\n"
              "        event: {id: '[\"${base64(key)}\",\"${etag}\"]'}\n      x-zilla-sse:")],
        kafka=[('    address: "events"', '    address: "events.{tenant}"')])
    monkeypatch.chdir(config.parent)
    composed = load(Path("zilla.yaml"))
    [route] = composed.bindings["south_kafka_proxy"].routes
    assert route.when == ({"path": "/events/{tenant}"},)
    assert route.with_ == {"topic": "events.${params.tenant}",
                           "filters": [{"headers": {"tenant": "${params.tenant}",
                                                    "kind": "sensor"}}],
                           "event": {"id": '["${base64(key)}","${etag}"]'}}
    http = composed.bindings["north_sse_server.http_server"]
    assert http.routes[0].when == ({"headers": {":path": "/events/{tenant}", ":method": "GET"}},)
    # a topic named by the request has no model and is not followed from start-up
    cache = composed.bindings["south_kafka_client.cache_server"]
    assert cache.options == {}
    # a filter value the route's `with` schema refuses: at the spec's line
    bad = example(tmp_path / "bad", sse=[("      x-zilla-sse:", "      x-zilla-sse-kafka:\n"
                                          "        event: {id: '${key}'}\n      x-zilla-sse:")])
    monkeypatch.chdir(bad.parent)
    [problem] = problems(Path("zilla.yaml"))
    assert problem.startswith("specs/sse-asyncapi.yaml:27: bindings.south_kafka_proxy.routes[0]."
                              "with.event.id: expected one of '${etag}'"), problem


def test_https_servers_compose_tls_from_the_vault(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    edits = {"sse": [("  plain_sse:\n    host: localhost:7114\n    protocol: http",
                      "  plain_sse:\n    host: localhost:7114\n    protocol: http\n"
                      "  secure_sse:\n    host: localhost:7143\n    protocol: https")],
             "zilla": [("            - http://localhost:7114\n          catalog:\n            "
                        "host_filesystem:\n              subject: sse\n    exit",
                        "            - http://localhost:7114\n            - https://localhost:7143"
                        "\n          catalog:\n            host_filesystem:\n              "
                        "subject: sse\n    exit")]}
    config = example(tmp_path / "a", **edits)
    monkeypatch.chdir(config.parent)
    assert problems(Path("zilla.yaml")) == [
        "zilla.yaml:13: bindings.north_sse_server: binding 'north_sse_server' serves https "
        "(port 7143): give it a vault with the server's key"]
    edits["zilla"].append(("    kind: server\n    options:\n      specs:\n        sse_api",
                           "    kind: server\n    vault: keys\n    options:\n      specs:\n"
                           "        sse_api"))
    edits["zilla"].append(("bindings:\n", "vaults:\n  keys:\n    type: filesystem\n    options:\n"
                           "      keys: {store: none.p12, type: pkcs12, password: x}\nbindings:\n"))
    config = example(tmp_path / "b", **edits)
    monkeypatch.chdir(config.parent)
    composed = load(Path("zilla.yaml"))
    tcp = composed.bindings["north_sse_server"]
    assert tcp.options == {"host": "127.0.0.1", "port": [7114, 7143]}
    assert [(r.when, r.exit) for r in tcp.routes] == [
        (({"port": [7114]},), "north_sse_server.http_server"),
        (({"port": [7143]},), "north_sse_server.tls_server")]
    tls = composed.bindings["north_sse_server.tls_server"]
    assert (tls.vault, tls.options, tls.exit) == ("keys", {"alpn": ["h2", "http/1.1"]},
                                                  "north_sse_server.http_server")


def test_listen_address_of_the_servers() -> None:
    assert listen_host({"localhost"}) == "127.0.0.1"
    assert listen_host({"127.0.0.2"}) == "127.0.0.2"
    assert listen_host({"::1"}) == "::1"
    assert listen_host({"api.example.com"}) == "0.0.0.0"  # noqa: S104 - what is expected
    assert listen_host({"localhost", "127.0.0.1"}) == "0.0.0.0"  # noqa: S104


def test_routes_take_operations_by_glob_and_tag(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    second = ("operations:\n",
              "operations:\n  receiveAudit:\n    action: receive\n    tags: [{name: audit}]\n"
              "    channel:\n      $ref: '#/channels/audit'\n    bindings:\n"
              "      x-zilla-sse: {method: GET}\n")
    channel = ("channels:\n", "channels:\n  audit:\n    address: /audit\n")
    config = example(
        tmp_path, sse=[second, channel],
        zilla=[("        with:\n          spec: kafka_api\n",
                "        with:\n          spec: kafka_api\n"
                "      - when:\n          - tag: audit\n        exit: south_kafka_client\n"
                "        with: {spec: kafka_api, operation: receiveEvents}\n"),
               ("          - spec: sse_api\n        exit: south_kafka_client",
                "          - spec: sse_api\n            operation: receiveE*\n"
                "        exit: south_kafka_client")])
    monkeypatch.chdir(config.parent)
    composed = load(Path("zilla.yaml"))
    routes = composed.bindings["south_kafka_proxy"].routes
    assert [(r.when, r.with_) for r in routes] == [
        (({"path": "/events"},), {"topic": "events"}),
        (({"path": "/audit"},), {"topic": "events"})]


def test_composed_names_must_not_clash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = example(tmp_path, zilla=[("bindings:\n", "bindings:\n  north_sse_server.sse_server:\n"
                                       "    type: sse\n    kind: server\n"
                                       "    exit: south_kafka_proxy\n")])
    monkeypatch.chdir(config.parent)
    assert problems(Path("zilla.yaml")) == [
        "zilla.yaml:17: bindings.north_sse_server: binding 'north_sse_server' composes a "
        "binding named 'north_sse_server.sse_server', which binding "
        "'north_sse_server.sse_server' already is or composes: rename one of them"]


def test_payload_models_follow_the_kafka_messages(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    avro = ("channels:\n", "channels:\n  prices:\n    address: prices\n    messages:\n"
            "      price:\n        payload:\n          schemaFormat: "
            "application/vnd.apache.avro;version=1.9.0\n          schema:\n"
            "            {type: record, name: Price, fields: [{name: cents, type: long}]}\n"
            "  notes:\n    address: notes\n    messages:\n      note:\n"
            "        contentType: text/plain\n        payload: {type: string}\n"
            "  sent:\n    address: sent\n    messages:\n      a: {payload: {type: string}}\n"
            "      b: {payload: {type: integer}}\n")
    sends = ("operations:\n", "operations:\n  sendSent:\n    action: send\n    channel:\n"
             "      $ref: '#/channels/sent'\n")
    config = example(tmp_path, kafka=[avro, sends])
    monkeypatch.chdir(config.parent)
    composed = load(Path("zilla.yaml"))
    cache = composed.bindings["south_kafka_client.cache_server"]
    assert cache.options["bootstrap"] == ["events"]  # only what an operation receives from
    models = {t["name"]: t.get("value") for t in cache.options["topics"]}
    assert models["prices"] == {"model": "avro", "view": "json", "catalog": {
        "south_kafka_client.payloads": [{"subject": "prices-value"}]}}
    assert models["notes"] is None
    subjects = composed.catalogs["south_kafka_client.payloads"]["options"]["subjects"]
    assert '"anyOf": [{"type": "string"}, {"type": "integer"}]' in subjects["sent-value"]["schema"]


def test_a_reload_rebuilds_only_what_a_spec_change_touches(tmp_path: Path) -> None:
    """Composed bindings are kept across a reload as written ones are: a spec whose words alone
    changed keeps every binding; a changed filter rebuilds the sse-kafka binding and those in
    front of it, and keeps the Kafka side."""
    config = example(tmp_path)
    rebuilds = Rebuilds(config)
    spec = config.parent / "specs" / "sse-asyncapi.yaml"
    worded = rebuilds.after(spec, "Inform about Event.", "Says what happened.")
    assert worded.reused == set(rebuilds.first.runtimes)
    filtered = rebuilds.after(
        spec, '        method: "GET"\n',
        '        method: "GET"\n      x-zilla-sse-kafka:\n        filters: [{key: a}]\n')
    assert filtered.reused == {"south_kafka_client", "south_kafka_client.cache_server",
                               "south_kafka_client.kafka_client"}


def test_server_routes_send_operations_to_their_exits(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """An asyncapi server's routes pick the exit of each operation (spec, operation glob and
    tag: all must match), else the binding's `exit`: one sse binding per exit, the http routes
    to each."""
    audit_op = ("operations:\n",
                "operations:\n  receiveAudit:\n    action: receive\n    tags: [{name: audit}]\n"
                "    channel:\n      $ref: '#/channels/audit'\n    bindings:\n"
                "      x-zilla-sse: {method: GET}\n")
    audit_channel = ("channels:\n", "channels:\n  audit:\n    address: /audit\n")
    routes = ("              subject: sse\n    exit: south_kafka_proxy\n",
              "              subject: sse\n    exit: south_kafka_proxy\n"
              "    routes:\n      - when:\n          - {spec: sse_api, operation: 'receive*', "
              "tag: audit}\n        exit: audit_proxy\n"
              "  audit_proxy:\n    type: sse-kafka\n    kind: proxy\n    routes:\n"
              "      - when: [{path: /audit}]\n        exit: south_kafka_client\n"
              "        with: {topic: audit}\n")
    only_events = ("          - spec: sse_api\n",
                   "          - spec: sse_api\n            operation: receiveEvents\n")
    config = example(tmp_path / "a", sse=[audit_op, audit_channel], zilla=[routes, only_events])
    monkeypatch.chdir(config.parent)
    composed = load(Path("zilla.yaml"))
    http = composed.bindings["north_sse_server.http_server"]
    assert [(r.when[0]["headers"][":path"], r.exit) for r in http.routes] == [
        ("/audit", "north_sse_server.sse_server.audit_proxy"),  # the spec's order
        ("/events", "north_sse_server.sse_server.south_kafka_proxy")]
    assert composed.bindings["north_sse_server.sse_server.audit_proxy"].exit == "audit_proxy"
    assert composed.bindings["north_sse_server.sse_server.south_kafka_proxy"].exit == \
        "south_kafka_proxy"
    # a route naming a spec the binding does not have
    bad = example(tmp_path / "b", sse=[audit_op, audit_channel],
                  zilla=[(routes[0], routes[1].replace("spec: sse_api", "spec: audit_api")),
                         only_events])
    monkeypatch.chdir(bad.parent)
    assert problems(Path("zilla.yaml")) == [
        "zilla.yaml:27: bindings.north_sse_server.routes[0].when[0].spec: 'audit_api' is not a "
        "spec of binding 'north_sse_server'; expected one of sse_api"]


def test_check_prints_what_was_composed_and_the_composed_config_loads_as_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """`ssekd check` says what each asyncapi binding composed, from which spec files, then the
    graph of the composed bindings; `--print-composed` writes the composed config as a
    zilla.yaml (what check says in comments) that loads to the same bindings."""
    config = example(tmp_path)
    monkeypatch.chdir(config.parent)
    assert main(["check", "--config", "zilla.yaml"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[:4] == [
        "zilla.yaml: schema and references ok (namespace zilla-sse-kafka-asyncapi, 7 bindings)",
        "composed asyncapi server north_sse_server: 1 SSE operation(s) of sse_api "
        "(specs/sse-asyncapi.yaml) on http 7114",
        "composed asyncapi proxy south_kafka_proxy: 1 SSE operation(s) paired with Kafka "
        "operations, from sse_api (specs/sse-asyncapi.yaml), kafka_api "
        "(specs/kafka-asyncapi.yaml)",
        "composed asyncapi client south_kafka_client: 1 topic(s) on kafka.examples.dev:29092, "
        "from kafka_api (specs/kafka-asyncapi.yaml)"]
    assert out[4:7] == [
        "north_sse_server (tcp server 127.0.0.1:[7114]) -> north_sse_server.http_server "
        "(http server)",
        "  when :path=/events :method=GET -> north_sse_server.sse_server (sse server) -> "
        "south_kafka_proxy (sse-kafka proxy)",
        "      when path=/events -> south_kafka_client (kafka cache_client) -> "
        "south_kafka_client.cache_server (kafka cache_server) -> "
        "south_kafka_client.kafka_client (kafka client kafka.examples.dev:29092)"]
    assert main(["check", "--config", "zilla.yaml", "--print-composed"]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("# zilla.yaml: schema and references ok"), printed
    Path("composed.yaml").write_text(printed)
    written = load(Path("composed.yaml"))
    assert written.composites == {}, "nothing left to compose"
    assert without_origin(written) == without_origin(load(Path("zilla.yaml")))


def test_a_server_pathname_is_in_front_of_every_path(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A spec server with a `pathname` serves the channels below it: the http route and the
    sse-kafka route both take `<pathname><address>` (the URL in `servers` names it too)."""
    config = example(
        tmp_path,
        sse=[("    host: localhost:7114\n    protocol: http",
              "    host: localhost:7114\n    pathname: /api/v1\n    protocol: http")],
        zilla=[("            - http://localhost:7114\n          catalog:\n            "
                "host_filesystem:\n              subject: sse\n    exit",
                "            - http://localhost:7114/api/v1\n          catalog:\n            "
                "host_filesystem:\n              subject: sse\n    exit"),
               ("            - http://localhost:7114\n          catalog:\n            "
                "host_filesystem:\n              subject: sse\n        kafka_api",
                "            - http://localhost:7114/api/v1\n          catalog:\n            "
                "host_filesystem:\n              subject: sse\n        kafka_api")])
    monkeypatch.chdir(config.parent)
    composed = load(Path("zilla.yaml"))
    [http_route] = composed.bindings["north_sse_server.http_server"].routes
    assert http_route.when == ({"headers": {":path": "/api/v1/events", ":method": "GET"}},)
    [route] = composed.bindings["south_kafka_proxy"].routes
    assert route.when == ({"path": "/api/v1/events"},)
    assert composed.bindings["north_sse_server"].options == {"host": "127.0.0.1",
                                                             "port": [7114]}
