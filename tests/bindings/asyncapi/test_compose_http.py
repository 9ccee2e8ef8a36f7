"""Composing HTTP operations (the `http` operation binding) from AsyncAPI specs, on Zilla's
asyncapi.http.kafka.proxy example: the asyncapi server routes each request to the proxy's
http-kafka binding, which pairs each HTTP operation with a Kafka operation by Zilla's rules;
what cannot be served is a config error at the spec's line; `ssekd check` says what was
composed; a reload rebuilds only what a spec edit touched; the AsyncAPI document is the spec's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from ssekd.bindings.asyncapi.http_kafka import (
    HttpOperation,
    KafkaOperation,
    PairingError,
    http_kafka_route,
)
from ssekd.cli import main
from tests.support.asyncapi import problems as asyncapi_problems
from tests.support.composing import Rebuilds, edited_copy, load, problems, without_origin
from tests.support.data import DATA

EXAMPLE = DATA / "zilla-examples" / "asyncapi.http.kafka.proxy" / "etc"

#: What the example's server and proxy compose, as a zilla.yaml would write them by hand.
BY_HAND = """\
bindings:
  north_http_server.http_server:
    type: http
    kind: server
    options:
      access-control: {policy: cross-origin}
    routes:
      - when: [{headers: {":path": /pets, ":method": POST}}]
        exit: south_kafka_proxy
      - when: [{headers: {":path": /pets, ":method": GET}}]
        exit: south_kafka_proxy
      - when: [{headers: {":path": "/pets/{id}", ":method": GET}}]
        exit: south_kafka_proxy
      - when:
          - headers: {":path": /customer, ":method": POST}
          - headers: {":path": "/customer;cid={correlationId}", ":method": GET}
        exit: south_kafka_proxy
  south_kafka_proxy:
    type: http-kafka
    kind: proxy
    routes:
      - when: [{method: POST, path: /pets}]
        exit: south_kafka_client
        with:
          capability: produce
          topic: petstore-pets
          acks: in_sync_replicas
          key: ${idempotencyKey}
      - when: [{method: GET, path: /pets}]
        exit: south_kafka_client
        with: {capability: fetch, topic: petstore-pets}
      - when:
          - {method: POST, path: /customer}
          - {method: GET, path: "/customer;cid={correlationId}"}
        exit: south_kafka_client
        with:
          capability: produce
          topic: petstore-customers
          acks: in_sync_replicas
          key: ${idempotencyKey}
          reply-to: petstore-verified-customers
          async:
            location: /customer;cid=${correlationId}
"""


def example(folder: Path, **edits: list[tuple[str, str]]) -> Path:
    """The example in `folder`, each file (`zilla`, `http`, `kafka`) with its text edits (each
    must apply once)."""
    return edited_copy(EXAMPLE, folder / "ex",
                       {"zilla": "zilla.yaml", "http": "specs/http-asyncapi.yaml",
                        "kafka": "specs/kafka-asyncapi.yaml"}, edits)


def test_example_composes_http_routes_and_an_http_kafka_binding(tmp_path: Path) -> None:
    """The server routes each HTTP operation's method and path (a write whose reply is polled
    also the GET of its location) to the proxy; the proxy, whose specs have no SSE operation,
    is under its own name the http-kafka binding: createPets -> addPet produce keyed by the
    idempotency key, listPets -> listPets fetch of the whole topic, createCustomer ->
    createCustomer produce with the reply topic and the async location of the spec's
    CorrelId header. getPets has no Kafka partner of its name: no route, as in Zilla."""
    composed = load(example(tmp_path))
    by_hand = yaml.safe_load(BY_HAND)["bindings"]
    for name, written in by_hand.items():
        binding = composed.bindings[name]
        assert (binding.type, binding.kind) == (written["type"], written["kind"])
        assert [_route(r) for r in binding.routes] == written["routes"], name
    assert composed.bindings["north_http_server.http_server"].options["access-control"] == \
        {"policy": "cross-origin"}
    assert "north_http_server.sse_server" not in composed.bindings


def _route(route: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"when": [dict(w) for w in route.when], "exit": route.exit}
    if route.with_ is not None:
        out["with"] = dict(route.with_)
    return out


def test_send_payloads_and_path_parameters_are_request_checks(tmp_path: Path) -> None:
    """The server's http binding checks what the spec says a request carries: the payload
    schema of each send operation's messages (createPets: the pet, createCustomer: the
    customer, refs followed, in an inline catalog beside it), and path parameters that declare
    a schema (Zilla's form) or an enum (AsyncAPI 3's)."""
    id_schema = ("  showPetById:\n    address: /pets/{id}\n",
                 "  showPetById:\n    address: /pets/{id}\n    parameters:\n"
                 "      id:\n        schema: {type: integer}\n")
    cid_enum = ("    address: /customer;cid={correlationId}\n",
                "    address: /customer;cid={correlationId}\n    parameters:\n"
                "      correlationId:\n        enum: [a.b, c]\n")
    composed = load(example(tmp_path, http=[id_schema, cid_enum]))
    http = composed.bindings["north_http_server.http_server"]
    catalog = "north_http_server.requests"
    assert http.options["requests"] == [
        {"path": "/pets", "method": "POST",
         "content": {"model": "json", "catalog": {catalog: [
             {"subject": "http_api-createPets-value"}]}}},
        {"path": "/pets/{id}", "method": "GET", "params": {"path": {"id": "int64"}}},
        {"path": "/customer", "method": "POST",
         "content": {"model": "json", "catalog": {catalog: [
             {"subject": "http_api-createCustomer-value"}]}}},
        {"path": "/customer;cid={correlationId}", "method": "GET",
         "params": {"path": {"correlationId": {"model": "string",
                                               "pattern": "^(?:a\\.b|c)$"}}}}]
    subjects = composed.catalogs[catalog]["options"]["subjects"]
    pet = yaml.safe_load(subjects["http_api-createPets-value"]["schema"])
    assert pet["properties"]["id"] == {"type": "integer", "minimum": 0,
                                       "description": "Pet id."}
    customer = yaml.safe_load(subjects["http_api-createCustomer-value"]["schema"])
    assert customer["properties"]["address"]["items"]["properties"]["zip"] == \
        {"type": "string", "example": "94301"}


def test_check_and_print_composed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    """`ssekd check` counts the HTTP operations each binding composed and names the one left
    unserved, with its line; `--print-composed` loads to the same bindings."""
    config = example(tmp_path)
    monkeypatch.chdir(config.parent)
    assert main(["check", "--config", "zilla.yaml"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1:3] == [
        "composed asyncapi server north_http_server: 5 HTTP operation(s) of http_api "
        "(specs/http-asyncapi.yaml) on http 7114, 2 request check(s)",
        "composed asyncapi proxy south_kafka_proxy: 3 HTTP operation(s) paired with Kafka "
        "operations, from http_api (specs/http-asyncapi.yaml), kafka_api "
        "(specs/kafka-asyncapi.yaml); not served, no Kafka operation of the same name: "
        "getPets (specs/http-asyncapi.yaml:67)"]
    assert "  when :path=/pets :method=POST -> south_kafka_proxy (http-kafka proxy)" in out
    assert main(["check", "--config", "zilla.yaml", "--print-composed"]) == 0
    Path("composed.yaml").write_text(capsys.readouterr().out)
    written = load(Path("composed.yaml"))
    assert without_origin(written) == without_origin(load(Path("zilla.yaml")))


HTTP_ERRORS = [
    ("a method that is not one",
     {"http": [("        method: POST\n    channel:\n      $ref: \"#/channels/pets\"",
                "        method: FETCH\n    channel:\n      $ref: \"#/channels/pets\"")]},
     "specs/http-asyncapi.yaml:57: operations.createPets.bindings.http.method: HTTP operation "
     "'createPets': expected method, one of GET, POST, PUT, PATCH, DELETE, HEAD, OPTIONS; got "
     "'FETCH' (spec 'http_api')"),
    ("an address that is not a path",
     {"http": [("    address: /pets\n", "    address: pets\n")]},
     "specs/http-asyncapi.yaml:32: channels.pets.address: channel 'pets' of HTTP operation "
     "'createPets': expected an address that is a path (starting with /), got 'pets' "
     "(spec 'http_api')"),
    ("a with.operation the Kafka spec lacks",
     {"zilla": [("          operation: addPet\n", "          operation: addPets\n")]},
     "zilla.yaml:49: bindings.south_kafka_proxy.routes[0].with.operation: 'addPets' is not an "
     "operation of spec 'kafka_api' (specs/kafka-asyncapi.yaml); expected one of: listPets, "
     "addPet, getPet, updatePet, deletePet, createCustomer, getVerifiedCustomer, "
     "deleteCustomer, placeOrder, getOrder, deleteOrder"),
    ("a polled reply the Kafka operation does not give",
     {"kafka": [("      Add a customer.\n", "      Add a customer.\n    x-no-reply: true\n"),
                ("  createCustomer:\n    action: send\n    channel:\n      $ref: "
                 "\"#/channels/customers\"\n    reply:\n      channel:\n        $ref: "
                 "\"#/channels/verifiedCustomers\"\n",
                 "  createCustomer:\n    action: send\n    channel:\n      $ref: "
                 "\"#/channels/customers\"\n")]},
     "specs/kafka-asyncapi.yaml:119: operations.createCustomer: HTTP operation "
     "'createCustomer' (specs/http-asyncapi.yaml:79) and Kafka operation 'createCustomer': "
     "the reply of POST /customer is polled at '/customer;cid={correlationId}', but Kafka "
     "operation 'createCustomer' has no reply channel: give it one (reply: {channel: ...}) "
     "(spec 'kafka_api')"),
    ("a location without the correlation id",
     {"http": [("            format: /customer;cid={correlationId}",
                "            format: /customer;cid={id}"),
               ("    address: /customer;cid={correlationId}",
                "    address: /customer;cid={id}")]},
     "specs/http-asyncapi.yaml:47: channels.verifiedCustomers.address: the reply of HTTP "
     "operation 'createCustomer' is polled at '/customer;cid={id}', which has no "
     "{correlationId}: a client could not tell its reply from another's (spec 'http_api')"),
    ("a topic parameter the path cannot supply",
     {"kafka": [('    address: "petstore-pets"', '    address: "petstore-{tenant}"')]},
     "specs/kafka-asyncapi.yaml:47: channels.pets.address: HTTP operation 'createPets' "
     "(specs/http-asyncapi.yaml:53) and Kafka operation 'addPet': topic "
     "'petstore-{tenant}' has parameter {tenant}, which the path '/pets' cannot supply "
     "(spec 'kafka_api')"),
    ("the x-zilla-http-kafka binding, not supported yet",
     {"http": [("        method: POST\n    channel:\n      $ref: \"#/channels/pets\"",
                "        method: POST\n      x-zilla-http-kafka:\n        key: a\n"
                "    channel:\n      $ref: \"#/channels/pets\"")]},
     "specs/http-asyncapi.yaml:58: operations.createPets.bindings.x-zilla-http-kafka: the "
     "x-zilla-http-kafka operation binding (keys, filters and overrides from the request) is "
     "not supported yet: remove it, or write the http-kafka binding by hand (spec 'http_api')"),
]


@pytest.mark.parametrize("edits,expected", [c[1:] for c in HTTP_ERRORS],
                         ids=[c[0] for c in HTTP_ERRORS])
def test_what_cannot_be_served_is_an_error_at_the_spec_line(
        tmp_path: Path, edits: dict[str, list[tuple[str, str]]], expected: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    config = example(tmp_path, **edits)
    monkeypatch.chdir(config.parent)
    assert expected in problems(Path("zilla.yaml"))


def test_sse_and_http_operations_of_one_spec(tmp_path: Path) -> None:
    """A spec with both: the proxy is, under its own name, the sse-kafka binding and
    `<name>.http_kafka` the http-kafka one; the server sends the stream through its sse
    binding and the requests straight to `<proxy>.http_kafka`."""
    stream = ("operations:\n",
              "operations:\n  streamPets:\n    action: receive\n    bindings:\n"
              "      x-zilla-sse: {method: GET}\n    channel:\n"
              "      $ref: \"#/channels/petStream\"\n")
    channel = ("channels:\n", "channels:\n  petStream:\n    address: /pet-stream\n")
    kafka = ("operations:\n", "operations:\n  streamPets:\n    action: receive\n    channel:\n"
                              "      $ref: \"#/channels/pets\"\n")
    composed = load(example(tmp_path, http=[stream, channel], kafka=[kafka]))
    proxy = composed.bindings["south_kafka_proxy"]
    assert (proxy.type, [r.when for r in proxy.routes]) == \
        ("sse-kafka", [({"path": "/pet-stream"},)])
    assert composed.bindings["south_kafka_proxy.http_kafka"].type == "http-kafka"
    http = composed.bindings["north_http_server.http_server"]
    assert [(r.when[0]["headers"][":path"], r.exit) for r in http.routes][:3] == [
        ("/pet-stream", "north_http_server.sse_server"),
        ("/pets", "south_kafka_proxy.http_kafka"),
        ("/pets", "south_kafka_proxy.http_kafka")]
    assert composed.bindings["north_http_server.sse_server"].exit == "south_kafka_proxy"


def test_a_reload_rebuilds_only_what_a_spec_change_touched(tmp_path: Path) -> None:
    """A spec whose words alone changed keeps every binding; a new path for the customer
    endpoint rebuilds the HTTP side (the http-kafka binding and those in front of it) and keeps
    the Kafka side; a new topic for orders, which no HTTP operation uses, rebuilds the cache
    (and what is in front of it) and keeps the Kafka client's connection."""
    config = example(tmp_path)
    rebuilds = Rebuilds(config)
    spec = config.parent / "specs" / "http-asyncapi.yaml"
    worded = rebuilds.after(spec, "Add a pet.", "Add a customer.")
    assert worded.reused == set(rebuilds.first.runtimes)
    moved = rebuilds.after(spec, "    address: /customer\n", "    address: /customers\n")
    assert moved.reused == {"south_kafka_client", "south_kafka_client.cache_server",
                            "south_kafka_client.kafka_client"}
    kafka = config.parent / "specs" / "kafka-asyncapi.yaml"
    reordered = rebuilds.after(kafka, '"petstore-orders"', '"petstore-orders-v2"')
    assert reordered.reused == {"south_kafka_client.kafka_client"}


def test_the_generated_document_is_the_spec_s_served_operations(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The AsyncAPI document of the composed config says what the HTTP spec says, for the
    operations served: createPets, listPets, createCustomer with its reply channel, and
    getVerifiedCustomer (the GET of its location); not getPets, which nothing serves. It is
    valid AsyncAPI 3.0.0."""
    config = example(tmp_path)
    assert main(["asyncapi", "--config", str(config)]) == 0
    doc = yaml.safe_load(capsys.readouterr().out)
    assert asyncapi_problems(doc) == []
    spec = yaml.safe_load((config.parent / "specs" / "http-asyncapi.yaml").read_text())
    served = ["createPets", "listPets", "createCustomer", "getVerifiedCustomer"]
    assert doc["operations"] == {k: spec["operations"][k] for k in served}
    assert doc["channels"] == {k: spec["channels"][k]
                               for k in ("pets", "customers", "verifiedCustomers")}
    assert doc["components"] == spec["components"]
    assert doc["servers"] == spec["servers"]


def test_http_kafka_route_by_zilla_s_rules() -> None:
    """The reusable mapping itself: a read of a path with parameters is filtered by the last
    one's key; of an array payload, merged; a write to a path with parameters is keyed by the
    last; a polled write's GET is a second `when`; what cannot be paired says why."""
    fetch = KafkaOperation("getItem", "receive", "items")
    assert http_kafka_route(HttpOperation("GET", "/shops/{shop}/items/{id}"), fetch, "c") == {
        "when": [{"method": "GET", "path": "/shops/{shop}/items/{id}"}], "exit": "c",
        "with": {"capability": "fetch", "topic": "items",
                 "filters": [{"key": "${params.id}"}]}}
    assert http_kafka_route(HttpOperation("GET", "/items", merged=True), fetch, "c")["with"] == {
        "capability": "fetch", "topic": "items",
        "merge": {"content-type": "application/json", "patch": {"initial": "[]", "path": "/-"}}}
    write = KafkaOperation("putItem", "send", "items-{shop}", "items-replies", "x-cid")
    assert http_kafka_route(HttpOperation("PUT", "/shops/{shop}/items/{id}",
                                          "/shops/{shop}/items/{id};{correlationId}"),
                            write, "c", "/v1") == {
        "when": [{"method": "PUT", "path": "/v1/shops/{shop}/items/{id}"},
                 {"method": "GET", "path": "/v1/shops/{shop}/items/{id};{correlationId}"}],
        "exit": "c",
        "with": {"capability": "produce", "topic": "items-${params.shop}",
                 "acks": "in_sync_replicas", "key": "${params.id}",
                 "reply-to": "items-replies", "correlation-id": "x-cid",
                 "async": {"location": "/v1/shops/${params.shop}/items/${params.id};"
                                       "${correlationId}"}}}
    with pytest.raises(PairingError, match="cannot supply") as e:
        http_kafka_route(HttpOperation("POST", "/items"), write, "c")
    assert e.value.part == "topic"
    with pytest.raises(PairingError, match="no reply channel") as e:
        http_kafka_route(HttpOperation("POST", "/items", "/items;{correlationId}"),
                         KafkaOperation("add", "send", "items"), "c")
    assert e.value.part == "reply"


def test_a_secured_http_operation_is_guarded_on_both_sides(tmp_path: Path) -> None:
    """createCustomer requiring a bearer scheme mapped to guard jwt0 (with a scope): the http
    server reads the token from `Authorization` and guards the route, and so does the
    http-kafka route; the other operations stay open."""
    secured = [("    reply:\n      channel:\n        $ref: \"#/channels/verifiedCustomers\"\n"
                "    summary:",
                "    reply:\n      channel:\n        $ref: \"#/channels/verifiedCustomers\"\n"
                "    security:\n      - $ref: '#/components/securitySchemes/bearer'\n"
                "    summary:"),
               ("components:\n", "components:\n  securitySchemes:\n    bearer:\n"
                "      type: http\n      scheme: bearer\n      scopes: [customers:write]\n")]
    guard = [("bindings:\n", "guards:\n  jwt0:\n    type: jwt\n    options:\n      keys: "
              "[{kty: oct, kid: k, alg: HS256, k: c2VjcmV0}]\nbindings:\n")] + [
        ("              subject: http\n    exit",
         "              subject: http\n          security: {bearer: jwt0}\n    exit"),
        ("              subject: http\n        kafka_api",
         "              subject: http\n          security: {bearer: jwt0}\n        kafka_api")]
    composed = load(example(tmp_path, http=secured, zilla=guard))
    http = composed.bindings["north_http_server.http_server"]
    assert http.options["authorization"] == {
        "jwt0": {"credentials": {"headers": {"authorization": "Bearer {credentials}"}}}}
    assert [r.guarded for r in http.routes] == [{}, {}, {}, {"jwt0": ("customers:write",)}]
    proxy = composed.bindings["south_kafka_proxy"]
    assert [r.guarded for r in proxy.routes] == [{}, {}, {"jwt0": ("customers:write",)}]


def test_a_server_may_exit_to_an_http_kafka_binding_written_by_hand(tmp_path: Path) -> None:
    """Without an asyncapi proxy: the server's HTTP operations go straight to the http-kafka
    binding its `exit` names."""
    by_hand = ("    exit: south_kafka_proxy\n  south_kafka_proxy:\n    type: asyncapi\n",
               "    exit: south_http_kafka\n  south_http_kafka:\n    type: http-kafka\n"
               "    kind: proxy\n    routes:\n      - when: [{path: /pets}]\n"
               "        exit: south_kafka_client\n"
               "        with: {capability: fetch, topic: petstore-pets}\n"
               "  south_kafka_proxy:\n    type: asyncapi\n")
    composed = load(example(tmp_path, zilla=[by_hand]))
    http = composed.bindings["north_http_server.http_server"]
    assert {r.exit for r in http.routes} == {"south_http_kafka"}
