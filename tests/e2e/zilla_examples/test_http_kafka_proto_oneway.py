"""Zilla's http.kafka.proto.oneway example on ssekd: a binary Protobuf body (`Content-Type:
application/protobuf`) posted to `/requests`, checked against the message `Request` of a `.proto`
in a filesystem catalog (the kafka cache_client's topic value `model: protobuf`, no `view`) and
written to `my-requests`.

test.sh encodes `message:'Hello, world',count:10` with `protoc --encode=Request` and expects
`204`; it is replayed with protoc and curl as it runs them. Then, beyond it: the record on Kafka
is what Zilla writes without a view with a local catalog - the message indexes (`[0]`: the
single byte 0; a filesystem catalog has no schema ids, so no registry header) then the
message - decoded here by the protobuf package from a descriptor written by hand; and the
bodies its README encodes with the other `.proto` files are judged as Zilla's protobuf model
judges them (its wire parser, not the README's headings, which call all three "blocked"):

- `request_bad_type.proto` writes `count` as a string: field 2 comes length-delimited where an
  int32 is a varint, which Zilla refuses: `400`, nothing written;
- `request_wrong_order.proto` swaps the numbers: field 1 comes as a varint where a string is
  length-delimited: refused the same way;
- `request_extra_field.proto` adds field 3, which `Request` does not have: Zilla skips a field
  number the message lacks and writes what it parsed, so it is `204`, and the record holds
  `message` and `count` only.

A body cut short (Zilla's `client.sent.protobuf.binary.truncated`) and a JSON body sent to this
binary route are refused too.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.zilla_examples.conftest import RunExample
from tests.e2e.zilla_examples.test_http_kafka_models import request_class
from tests.support.wait import wait_until
from tests.support.writes import Answer, read_records, request

pytestmark = [pytest.mark.daemon, pytest.mark.broker]

NAME = "http.kafka.proto.oneway"
#: test.sh's input, the file it encodes it with, and the answer it expects.
INPUT = "message:'Hello, world',count:10"
EXPECTED = "204"
#: The README's inputs for the other `.proto` files of the example.
BAD_TYPE = ("request_bad_type.proto", "message:'hello bad type',count:'ten'")
WRONG_ORDER = ("request_wrong_order.proto", "message:'hello wrong order',count:10")
EXTRA_FIELD = ("request_extra_field.proto", "message:'hello extra field',count:10,extra:'field'")


def protoc_encode(protos: Path, proto: str, text: str) -> bytes:
    """`echo "$INPUT" | protoc --encode=Request ./<proto>`, as test.sh and the README run it."""
    done = subprocess.run(["protoc", "--encode=Request", f"./{proto}"], cwd=protos,
                          input=f"{text}\n".encode(), capture_output=True, timeout=30,
                          check=False)
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout


def curl_post(port: int, body: Path) -> str:
    """test.sh's request as it makes it: curl's output is the body, then the status code."""
    done = subprocess.run(["curl", "-s", "--max-time", "10", "-w", "%{http_code}",
                           "--request", "POST", f"http://localhost:{port}/requests",
                           "--header", "Content-Type: application/protobuf",
                           "--data-binary", f"@{body}"],
                          capture_output=True, text=True, timeout=30, check=False)
    return done.stdout if done.returncode == 0 else f"curl failed ({done.returncode})"


def post(port: int, body: bytes, key: str | None = None) -> Answer:
    headers = {"Content-Type": "application/protobuf"}
    if key is not None:
        headers["Idempotency-Key"] = key
    return request(port, "POST", "/requests", headers, body)


def records(bootstrap: str, count: int) -> list[Any]:
    """The records on my-requests, once there are `count` of them."""
    found: list[Any] = []

    def written() -> bool:
        found[:] = read_records(bootstrap, "my-requests")
        return len(found) >= count

    wait_until(written, 20, what=f"{count} records on my-requests")
    return found


def decode(value: bytes) -> tuple[str, int, bytes]:
    """A record's value: the message indexes must be `[0]` (one zero byte); the Request
    after them, read by the protobuf package alone, and what it kept as unknown fields."""
    assert value[:1] == b"\0", value
    message = request_class()()
    message.ParseFromString(value[1:])
    known = request_class()(message=message.message, count=message.count)
    unknown = value[1:] if message.SerializeToString() != known.SerializeToString() else b""
    return message.message, message.count, unknown


def test_test_sh_the_protoc_encoded_request_is_204_and_written_after_its_index(
        run_example: RunExample) -> None:
    """test.sh: the body protoc encodes is the one the example ships (encoded_input.bin), and
    curl's POST of it answers 204 (retried 5 times 2 s apart, as `retry_until 5 2`). Then the
    record on my-requests is byte 0 (message index [0]) and that same message, unchanged."""
    example = run_example(NAME)
    assert example.bootstrap is not None
    port = example.port(7114)
    encoded = protoc_encode(example.root("/etc/zilla/protos"), "request.proto", INPUT)
    shipped = example.source / "encoded_input.bin"
    assert encoded == shipped.read_bytes()

    output = ""
    for _ in range(5):
        output = curl_post(port, shipped)
        if output == EXPECTED:
            break
        time.sleep(2)
    assert output == EXPECTED

    [record] = records(example.bootstrap, 1)
    assert record.value() == b"\0" + encoded
    assert decode(record.value()) == ("Hello, world", 10, b"")
    assert record.headers() == [("content-type", b"application/protobuf")]


def test_the_readme_bodies_are_judged_as_zillas_protobuf_model_does(
        run_example: RunExample) -> None:
    """The README's other `.proto` files (module docstring): a wrong wire type is 400 with
    the field named and nothing written; an extra field is 204, and the record leaves it out.
    A truncated body and a JSON body are 400 as well. Only the accepted bodies reach Kafka."""
    example = run_example(NAME)
    assert example.bootstrap is not None
    port = example.port(7114)
    protos = example.root("/etc/zilla/protos")
    bad_type, wrong_order, extra = (protoc_encode(protos, *pair) for pair in
                                    (BAD_TYPE, WRONG_ORDER, EXTRA_FIELD))
    good = protoc_encode(protos, "request.proto", INPUT)

    for body, says in (
            (bad_type, b"field 2 (count) of Request comes as length-delimited, where an "
                       b"int32 is varint"),
            (wrong_order, b"field 1 (message) of Request comes as varint, where a string is "
                          b"length-delimited"),
            (good[:-1], b"not protobuf of this message"),  # Zilla's binary.truncated
            (b'{"message": "Hello, world", "count": 10}', b"not protobuf of this message")):
        answer = post(port, body)
        assert answer.status == 400, (body, answer)
        assert answer.body.startswith(b"refused by the topic's model: not a Request message")
        assert says in answer.body, answer.body
    assert read_records(example.bootstrap, "my-requests") == []
    assert example.daemon is not None
    assert "BINDING_HTTP_KAFKA_RECORD_REFUSED my-requests: not a Request message" in \
        example.daemon.output()

    assert request_class()().FromString(extra).SerializeToString() == extra  # field 3 is in it
    answer = post(port, extra, key="extra")
    assert answer.status == 204, answer
    [record] = records(example.bootstrap, 1)
    assert record.key() == b"extra"
    assert decode(record.value()) == ("hello extra field", 10, b"")
    expected = request_class()(message="hello extra field", count=10).SerializeToString()
    assert record.value() == b"\0" + expected
