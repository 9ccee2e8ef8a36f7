"""Zilla's http.kafka.avro.json and http.kafka.proto.json on ssekd: models on the write path.

Both put a model on the kafka cache_client's topic, so that an http-kafka produce writes the
JSON body as Avro (with the schema a registry resolves, in Confluent's wire format) or as
Protobuf (a `.proto` from a filesystem catalog, after its message indexes). Each is replayed
the way its `.github/test.sh` does, then checked further: the record on Kafka, read by a real
consumer and decoded independently (fastavro; the protobuf package with a descriptor written
by hand), is what Zilla writes; a body the model refuses is `400` with the reason and nothing
reaches Kafka; and - in a config beside the example's, with a fetch route and an sse-kafka
route on the same topic - what was written reads back equal as JSON through fetch and SSE.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from typing import Any

import fastavro
import pytest
import yaml
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from tests.e2e.zilla_examples.conftest import RunExample
from tests.support.kafka_records import Change, produce
from tests.support.schema_registry import Registry
from tests.support.sse import SseClient
from tests.support.wait import wait_until
from tests.support.writes import Answer, read_records, request

pytestmark = [pytest.mark.daemon, pytest.mark.broker]

AVRO = "http.kafka.avro.json"
PROTO = "http.kafka.proto.json"
#: The schema test.sh registers (as its JSON text says it).
EVENT_SCHEMA = {"fields": [{"name": "id", "type": "string"},
                           {"name": "status", "type": "string"}],
                "name": "Event", "namespace": "io.aklivity.example", "type": "record"}


@pytest.fixture
def registry() -> Iterator[Registry]:
    """The schema registry stand-in, where the example's karapace-registry would be."""
    running = Registry().start()
    yield running
    running.stop()


def register(registry: Registry, subject: str, schema: str, kind: str = "AVRO") -> Answer:
    """test.sh's `curl --data '{"schema": ..., "schemaType": "AVRO"}' .../versions`."""
    return request(registry.port, "POST", f"/subjects/{subject}/versions",
                   {"Content-Type": "application/json"},
                   json.dumps({"schema": schema, "schemaType": kind}).encode())


def post(port: int, path: str, body: bytes, key: str | None = None) -> Answer:
    headers = {"Content-Type": "application/json"}
    if key is not None:
        headers["Idempotency-Key"] = key
    return request(port, "POST", path, headers, body)


# -- an independent protobuf decoder: the example's Request, its descriptor written by hand --

def request_class() -> Any:
    """`message Request { string message = 1; int32 count = 2; }`, built without any .proto
    text (so nothing of ssekd's own reading of it is used)."""
    f = descriptor_pb2.FieldDescriptorProto
    file = descriptor_pb2.FileDescriptorProto(name="request.proto", syntax="proto3")
    message = file.message_type.add(name="Request")
    message.field.add(name="message", number=1, type=f.TYPE_STRING, label=f.LABEL_OPTIONAL)
    message.field.add(name="count", number=2, type=f.TYPE_INT32, label=f.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("Request"))


# -- http.kafka.proto.json ---------------------------------------------------------------------

def test_proto_test_sh_a_valid_body_is_204_and_an_unknown_field_is_400(
        run_example: RunExample) -> None:
    """test.sh: `{"message": "hello world", "count": 10}` is 204; the same with
    `"invalid": "field"` is 400. Then: the one record on my-requests is the message index 0
    and the Request message (decoded here by the protobuf package alone); the refused body
    left nothing on Kafka, and its 400 says why."""
    example = run_example(PROTO)
    assert example.bootstrap is not None
    port = example.port(7114)
    valid = post(port, "/requests", b'{ "message": "hello world", "count": 10 }')
    assert valid.status == 204, valid
    invalid = post(port, "/requests",
                   b'{ "message": "hello world", "count": 10, "invalid": "field" }')
    assert invalid.status == 400, invalid
    assert b"invalid" in invalid.body and b"Request" in invalid.body, invalid.body

    assert example.daemon is not None
    refused = "BINDING_HTTP_KAFKA_RECORD_REFUSED my-requests: not a Request message"
    # the answer can reach the client before the daemon's event line reaches its log
    wait_until(lambda: refused in example.daemon.output(), 10,
               what=lambda: example.daemon.output()[-2000:])

    records = read_records(example.bootstrap, "my-requests")
    assert len(records) == 1, [r.value() for r in records]
    value = records[0].value()
    assert value[:1] == b"\0"  # the message indexes of the first message: [0]
    decoded = request_class()()
    decoded.ParseFromString(value[1:])
    assert (decoded.message, decoded.count) == ("hello world", 10)


def test_proto_wrong_types_and_non_json_are_400_with_nothing_written(
        run_example: RunExample) -> None:
    """A count that is not an int32, a body that is not JSON, a JSON array: each is 400 with
    the reason, and the topic stays empty."""
    example = run_example(PROTO)
    assert example.bootstrap is not None
    port = example.port(7114)
    for body in (b'{"message": "x", "count": "ten"}', b'{"message": "x", "count": 1e20}',
                 b'not json', b'[1, 2]', b'{"message": 5}'):
        answer = post(port, "/requests", body)
        assert answer.status == 400, (body, answer)
        assert answer.body.startswith(b"refused by the topic's model"), answer.body
    assert read_records(example.bootstrap, "my-requests") == []


def proto_round_trip_config(text: str) -> str:
    """The example's config as published plus, on the same topic and through the same
    cache_client, a fetch route (`GET /requests/{id}`) and an sse-kafka route (`/stream/{id}`).
    The model stays where the example puts it, on the cache_client only."""
    config = yaml.safe_load(text)
    bindings = config["bindings"]
    assert "options" not in bindings["south_kafka_cache_server"]  # no model there
    bindings["north_http_kafka_mapping"]["routes"].append({
        "when": [{"method": "GET", "path": "/requests/{id}"}],
        "exit": "north_kafka_cache_client",
        "with": {"capability": "fetch", "topic": "my-requests",
                 "filters": [{"key": "${params.id}"}]}})
    server = bindings["north_http_server"]
    del server["exit"]
    server["routes"] = [
        {"when": [{"headers": {":path": "/stream/*"}}], "exit": "north_sse_server"},
        {"when": [{"headers": {":path": "/*"}}], "exit": "north_http_kafka_mapping"}]
    bindings["north_sse_server"] = {"type": "sse", "kind": "server",
                                    "exit": "north_sse_kafka_mapping"}
    bindings["north_sse_kafka_mapping"] = {
        "type": "sse-kafka", "kind": "proxy",
        "routes": [{"when": [{"path": "/stream/{id}"}], "exit": "north_kafka_cache_client",
                    "with": {"topic": "my-requests", "filters": [{"key": "${params.id}"}]}}]}
    return yaml.safe_dump(config, sort_keys=False)


def test_proto_a_written_body_reads_back_equal_through_fetch_and_sse(
        run_example: RunExample) -> None:
    """A JSON body written through the Protobuf route reads back as the same JSON (every
    field, defaults too, as Zilla's JSON view writes it) through fetch and through an SSE
    stream, both through the cache_client that declares the model (the cache_server declares
    none: it reads the topic with its cache_client's model); a refused body is 400 and the
    stream sees nothing of it. A record on the topic that is not a Request (written to Kafka
    directly) is skipped as a cache_server model skips one: never delivered, reported by
    BINDING_KAFKA_RECORD_INVALID."""
    example = run_example(PROTO, start=False)
    example.config.write_text(proto_round_trip_config(example.config.read_text()))
    example.start()
    port = example.port(7114)
    stream = SseClient(port, "/stream/a1")
    assert stream.status == 200
    written = post(port, "/requests", b'{"message": "hello world", "count": 10}', key="a1")
    assert written.status == 204, written
    expected = {"message": "hello world", "count": 10}
    event = stream.next_event(20)
    assert event is not None and event.data is not None
    assert json.loads(event.data) == expected

    fetched = request(port, "GET", "/requests/a1")
    assert fetched.status == 200, fetched
    assert json.loads(fetched.body) == expected

    zero = post(port, "/requests", b'{"message": ""}', key="a1")  # proto3 defaults
    assert zero.status == 204, zero
    event = stream.next_event(20)
    assert event is not None and event.data is not None
    assert json.loads(event.data) == {"message": "", "count": 0}

    refused = post(port, "/requests", b'{"message": "x", "invalid": "field"}', key="a1")
    assert refused.status == 400, refused
    assert stream.next_event(1.5) is None
    fetched = request(port, "GET", "/requests/a1")
    assert json.loads(fetched.body) == {"message": "", "count": 0}
    assert example.bootstrap is not None
    produce(example.bootstrap, "my-requests", [Change(b"a1", b"\x00\x0a\x05ab")])  # cut short
    after = post(port, "/requests", b'{"message": "after", "count": 2}', key="a1")
    assert after.status == 204, after
    event = stream.next_event(20)
    assert event is not None and event.data is not None
    assert json.loads(event.data) == {"message": "after", "count": 2}
    fetched = request(port, "GET", "/requests/a1")
    assert json.loads(fetched.body) == {"message": "after", "count": 2}
    stream.close()
    assert example.daemon is not None
    example.daemon.wait_output("BINDING_KAFKA_RECORD_INVALID my-requests partition")


# -- http.kafka.avro.json ----------------------------------------------------------------------

def start_avro(run_example: RunExample, registry: Registry, edit: Any = None) -> Any:
    """The avro example, its registry the stand-in; `edit` changes its config text first."""
    example = run_example(AVRO, start=False)
    text = example.config.read_text()
    if edit is not None:
        text = edit(text)
    example.config.write_text(text)
    example.start({"SCHEMA_REGISTRY_SERVER": registry.url})
    return example


def test_avro_test_sh_register_post_then_get_and_an_invalid_body_is_not_found(
        run_example: RunExample, registry: Registry) -> None:
    """test.sh: register the schema under items-snapshots-value (`{"id":1}`), POST /items with
    Idempotency-Key 1, GET /items/1 is `{"id":"123","status":"OK"}`; POST `{"id": 123, ...}`
    with key 2 (ssekd answers 400, Zilla a bare 400 too) and GET /items/2 is 404. Then: the
    record of key 1 on Kafka is the wire format - byte 0, id 1, Avro of the schema (decoded
    by fastavro) - and key 2 has no record."""
    registered = register(registry, "items-snapshots-value", json.dumps(EVENT_SCHEMA))
    assert (registered.status, registered.body) == (200, b'{"id":1}')  # what test.sh compares
    again = register(registry, "items-snapshots-value", json.dumps(EVENT_SCHEMA))
    assert again.body == b'{"id":1}', "registering it again (test.sh's retry) changes nothing"
    example = start_avro(run_example, registry)
    assert example.bootstrap is not None
    port = example.port(7114)

    written = post(port, "/items", b'{"id": "123", "status": "OK"}', key="1")
    assert written.status == 204, written
    fetched = request(port, "GET", "/items/1")
    assert (fetched.status, fetched.body) == (200, b'{"id":"123","status":"OK"}')

    refused = post(port, "/items", b'{"id": 123,"status": "OK"}', key="2")
    assert refused.status == 400, refused
    assert b"id" in refused.body and b"expected string" in refused.body, refused.body
    assert request(port, "GET", "/items/2").status == 404

    records = read_records(example.bootstrap, "items-snapshots")
    assert [r.key() for r in records] == [b"1"]
    value = records[0].value()
    assert value[0] == 0 and int.from_bytes(value[1:5], "big") == 1
    data = io.BytesIO(value[5:])
    record = fastavro.schemaless_reader(data, fastavro.parse_schema(EVENT_SCHEMA), None)
    assert record == {"id": "123", "status": "OK"} and data.tell() == len(value) - 5


#: The example's `event.bin` and `invalid_event.bin` (its README posts them to /events): the
#: wire format of `{"id": "123", "status": "OK"}` with schema id 1, and the same cut short.
EVENT_BIN = bytes.fromhex("0000000001063132" "33044f4b")
INVALID_EVENT_BIN = bytes.fromhex("0000000001063132" "33")


def test_avro_readme_events_are_checked_by_the_http_server(run_example: RunExample,
                                                           registry: Registry) -> None:
    """The README's other path: `POST /events` with Avro in the wire format, checked by the
    http server's `options.requests` (`strategy: encoded`: the schema of the id it carries)
    and written as it is (no model on `events`); the cut-short one is 400 and not written."""
    register(registry, "items-snapshots-value", json.dumps(EVENT_SCHEMA))
    example = start_avro(run_example, registry)
    assert example.bootstrap is not None
    port = example.port(7114)
    avro = {"Content-Type": "application/avro-binary"}
    assert request(port, "POST", "/events", avro, EVENT_BIN).status == 204
    assert request(port, "POST", "/events", avro, INVALID_EVENT_BIN).status == 400
    assert [r.value() for r in read_records(example.bootstrap, "events")] == [EVENT_BIN]


def test_avro_before_the_schema_is_registered_a_write_is_503_then_works(
        run_example: RunExample, registry: Registry) -> None:
    """The subject is not in the registry yet: a write is 503 with Retry-After and nothing is
    written; once registered (and the model's next try came), the same write is 204."""
    example = start_avro(run_example, registry)
    assert example.bootstrap is not None
    port = example.port(7114)
    early = post(port, "/items", b'{"id": "9", "status": "OK"}', key="9")
    assert early.status == 503, early
    assert int(early.headers["retry-after"]) >= 1
    assert register(registry, "items-snapshots-value", json.dumps(EVENT_SCHEMA)).status == 200
    answers: list[Answer] = []

    def written() -> bool:
        answers.append(post(port, "/items", b'{"id": "9", "status": "OK"}', key="9"))
        return answers[-1].status == 204

    wait_until(written, 40, interval=1.0, what="the write once the schema is registered")
    assert {a.status for a in answers} <= {503, 204}
    records = read_records(example.bootstrap, "items-snapshots")
    assert [r.key() for r in records] == [b"9"]


def test_avro_extra_fields_and_missing_fields_are_400(run_example: RunExample,
                                                     registry: Registry) -> None:
    """A field the schema lacks would be dropped silently by an Avro writer: ssekd refuses it,
    as it does a missing field; nothing reaches Kafka."""
    register(registry, "items-snapshots-value", json.dumps(EVENT_SCHEMA))
    example = start_avro(run_example, registry)
    assert example.bootstrap is not None
    port = example.port(7114)
    extra = post(port, "/items", b'{"id": "1", "status": "OK", "colour": "red"}', key="1")
    assert extra.status == 400 and b"colour is not in the schema" in extra.body, extra
    missing = post(port, "/items", b'{"id": "1"}', key="1")
    assert missing.status == 400 and b"status" in missing.body, missing
    assert read_records(example.bootstrap, "items-snapshots") == []


def avro_round_trip_config(text: str) -> str:
    """The example's config plus an sse-kafka route (`/stream/{id}`) on items-snapshots."""
    config = yaml.safe_load(text)
    bindings = config["bindings"]
    server = bindings["north_http_server"]
    server["routes"].insert(0, {"when": [{"headers": {":scheme": "http",
                                                      ":path": "/stream/*"}}],
                                "exit": "north_sse_server"})
    bindings["north_sse_server"] = {"type": "sse", "kind": "server",
                                    "exit": "north_sse_kafka_mapping"}
    bindings["north_sse_kafka_mapping"] = {
        "type": "sse-kafka", "kind": "proxy",
        "routes": [{"when": [{"path": "/stream/{id}"}], "exit": "north_kafka_cache_client",
                    "with": {"topic": "items-snapshots",
                             "filters": [{"key": "${params.id}"}]}}]}
    return yaml.safe_dump(config, sort_keys=False)


def test_avro_a_written_body_reads_back_equal_through_fetch_and_sse(
        run_example: RunExample, registry: Registry) -> None:
    """A JSON body written through the Avro route reads back equal through fetch and through
    an SSE stream (both decode the wire format with the id's schema); a refused body is 400
    and neither sees anything of it."""
    register(registry, "items-snapshots-value", json.dumps(EVENT_SCHEMA))
    example = start_avro(run_example, registry, avro_round_trip_config)
    port = example.port(7114)
    # until the registry answered, a stream is told to come back later (`retry`) and a fetch
    # is 503: wait for the topic to be readable, as a browser's reconnect would
    wait_until(lambda: request(port, "GET", "/items/k1").status == 404, 20,
               what="the topic readable (its schema resolved)")
    stream = SseClient(port, "/stream/k1")
    assert stream.status == 200
    body = {"id": "k1-é", "status": "shipped"}
    written = request(port, "PUT", "/items/k1", {"Content-Type": "application/json"},
                      json.dumps(body).encode())
    assert written.status == 204, written
    event = stream.next_event(20)
    assert event is not None and event.data is not None
    assert json.loads(event.data) == body
    fetched = request(port, "GET", "/items/k1")
    assert fetched.status == 200 and json.loads(fetched.body) == body

    refused = request(port, "PUT", "/items/k1", {"Content-Type": "application/json"},
                      b'{"id": "k1", "status": null}')
    assert refused.status == 400, refused
    assert stream.next_event(1.5) is None
    assert json.loads(request(port, "GET", "/items/k1").body) == body
    stream.close()

