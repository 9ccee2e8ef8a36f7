"""Zilla's asyncapi.http.kafka.proxy example on ssekd: REST endpoints composed from an AsyncAPI
spec of HTTP operations (`bindings.http.method` on channels whose address is a path) paired
with the operations of a Kafka spec, run as published (`tests.support.zilla_examples`).

test.sh is replayed with curl as it runs it (a POST of a pet is 204, a GET of /pets answers
that pet byte for byte); then what the composition promises beyond it: the record the POST
wrote, the customer write whose reply is polled at `/customer;cid=...` (async, and sync) with
the reply written by the test as the example's README writes it with kafkacat, and the paths
no operation of the spec serves."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.zilla_examples.conftest import RunExample
from tests.support.broker import Kafka
from tests.support.wait import wait_until
from tests.support.writes import Answer, header, read_records, request

pytestmark = [pytest.mark.daemon, pytest.mark.broker]

NAME = "asyncapi.http.kafka.proxy"
BIN = Path(sys.executable).parent
#: test.sh's pet, as it sends it and expects it back.
INPUT = '{"name": "Rocky","id": 1}'
CUSTOMER = {"id": 200000, "username": "fehguy", "status": "pending",
            "address": [{"street": "437 Lytton", "city": "Palo Alto", "state": "CA",
                         "zip": "94301"}]}


def curl(*args: str) -> str:
    done = subprocess.run(["curl", "-sS", "--max-time", "10", *args], capture_output=True,
                          text=True, timeout=30, check=False)
    return done.stdout if done.returncode == 0 else f"curl failed: {done.stderr}"


def records(bootstrap: str, topic: str, count: int) -> list[Any]:
    found: list[Any] = []

    def there() -> bool:
        found[:] = read_records(bootstrap, topic)
        return len(found) >= count

    wait_until(there, 20, what=f"{count} record(s) on {topic}")
    return found


def verify(bootstrap: str, record: Any, status: str = "approved") -> bytes:
    """What the README writes with kafkacat: the verified customer on
    petstore-verified-customers, with the request's correlation id (no `:status`)."""
    correlation = header(record, "zilla:correlation-id")
    assert correlation is not None
    value = json.dumps({**CUSTOMER, "status": status}, separators=(",", ":")).encode()
    kafka = Kafka(bootstrap)
    kafka.produce("petstore-verified-customers", value, record.key(),
                  headers=[("zilla:correlation-id", correlation)])
    kafka.flush()
    return value


def test_test_sh_post_then_get_pets(run_example: RunExample) -> None:
    """test.sh: `POST /pets` is 204; `GET /pets` then answers the pet, byte for byte as it was
    sent. Beyond: the record on petstore-pets is that body, keyed by a new idempotency key (the
    route's `${idempotencyKey}`: curl sent none), with only the request's `content-type`; a
    client's own key is the record's and a repeat writes nothing; and all of it over h2c."""
    example = run_example(NAME)
    assert example.bootstrap is not None
    port = example.port(7114)
    posted = curl("-w", "%{http_code}", "--location", f"http://localhost:{port}/pets",
                  "--header", "Content-Type: application/json", "--data", INPUT)
    assert posted == "204"
    got = ""
    for _ in range(20):  # the cache follows the topic a moment after the write
        got = curl(f"http://localhost:{port}/pets", "--header", "Content-Type: application/json")
        if got == INPUT:
            break
        time.sleep(0.5)
    assert got == INPUT

    [record] = records(example.bootstrap, "petstore-pets", 1)
    assert record.value() == INPUT.encode()
    assert str(uuid.UUID(record.key().decode())) == record.key().decode()
    assert record.headers() == [("content-type", b"application/json")]

    # a client's own Idempotency-Key is the record's key, and a repeat writes nothing more
    for _ in range(2):
        again = request(port, "POST", "/pets", {"Content-Type": "application/json",
                                                "Idempotency-Key": "pet-2"},
                        b'{"name":"Rex","id":2}')
        assert again.status == 204, again
    found = records(example.bootstrap, "petstore-pets", 2)
    assert [r.key() for r in found][1:] == [b"pet-2"]

    # the spec's server speaks HTTP 2.0 (protocolVersion): the same over h2c
    url = f"http://localhost:{port}/pets"
    assert curl("--http2-prior-knowledge", "-o", "/dev/null", "-w",
                "%{http_version} %{http_code}", url, "--header",
                "Content-Type: application/json", "--data", '{"name":"Max","id":3}') == "2 204"
    wait_until(lambda: curl("--http2-prior-knowledge", url) == '{"name":"Max","id":3}', 20,
               what="GET /pets over h2c answering the pet written over h2c")


def test_a_body_the_spec_refuses_is_400_and_never_written(run_example: RunExample) -> None:
    """The payload schemas of the send operations check request bodies before Kafka sees
    them: a pet with a negative id (`minimum: 0`), a customer with a status its enum lacks, a
    body that is not JSON - each `400`, nothing on the topics; a good pet still `204`."""
    example = run_example(NAME)
    assert example.bootstrap is not None
    port = example.port(7114)
    json_type = {"Content-Type": "application/json"}
    for path, body in (("/pets", b'{"name":"Rocky","id":-1}'), ("/pets", b"{not json"),
                       ("/customer", json.dumps({**CUSTOMER, "status": "gone"}).encode())):
        refused = request(port, "POST", path, json_type, body)
        assert refused.status == 400, (path, body, refused)
        assert b"content" in refused.body, refused
    assert request(port, "POST", "/pets", json_type, INPUT.encode()).status == 204
    [record] = records(example.bootstrap, "petstore-pets", 1)
    assert record.value() == INPUT.encode()
    assert read_records(example.bootstrap, "petstore-customers") == []


def test_paths_the_specs_do_not_serve(run_example: RunExample) -> None:
    """`GET /pets/{id}` (getPets) has no Kafka operation of its name in the Kafka spec (it has
    getPet): Zilla composes no route for it, and neither does ssekd - 404, and `ssekd check`
    says so. A path or a method no operation has is 404 too."""
    example = run_example(NAME)
    port = example.port(7114)
    assert request(port, "GET", "/pets/1").status == 404
    assert request(port, "GET", "/orders").status == 404
    assert request(port, "DELETE", "/pets").status == 404
    assert request(port, "PUT", "/customer", {"Content-Type": "application/json"},
                   b"{}").status == 404
    done = subprocess.run([str(BIN / "ssekd"), "check", "--config", str(example.config)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert "not served, no Kafka operation of the same name: getPets (" in done.stdout


def test_customer_async_then_polled_reply(run_example: RunExample) -> None:
    """The README's asynchronous API: `POST /customer` with `Prefer: respond-async` is 202 with
    a location `/customer;cid=<correlation id>...` (the format of the spec's CorrelId header).
    The record on petstore-customers carries the reply-to and correlation id headers; a GET of
    the location waits (`Prefer: wait`), is 202 while no reply came, and answers the verified
    customer written on petstore-verified-customers with that correlation id (200, no
    `:status` on it, as the README's kafkacat writes it)."""
    example = run_example(NAME)
    assert example.bootstrap is not None
    port = example.port(7114)
    body = json.dumps(CUSTOMER).encode()
    posted = request(port, "POST", "/customer", {"Content-Type": "application/json",
                                                 "Prefer": "respond-async",
                                                 "Idempotency-Key": "customer-1"}, body)
    assert posted.status == 202, posted
    location = posted.headers["location"]
    assert location.startswith("/customer;cid=customer-1-"), location

    [record] = records(example.bootstrap, "petstore-customers", 1)
    assert record.key() == b"customer-1" and record.value() == body
    assert header(record, "zilla:reply-to") == b"petstore-verified-customers"
    correlation = header(record, "zilla:correlation-id")
    assert correlation is not None and location.split(";cid=")[1].startswith(
        correlation.decode())
    assert header(record, ":path") == b"/customer"

    waited = request(port, "GET", location, {"Prefer": "wait=1"})
    assert (waited.status, waited.headers["location"]) == (202, location)
    out: list[Answer] = []
    thread = threading.Thread(target=lambda: out.append(
        request(port, "GET", location, {"Prefer": "wait=20"}, timeout=30)), daemon=True)
    thread.start()
    time.sleep(0.5)
    expected = verify(example.bootstrap, record)
    thread.join(30)
    assert out and (out[0].status, out[0].body) == (200, expected), out
    # a location for another correlation id was never issued
    forged = location.rsplit(".", 1)[0] + ".AAAAAAAAAAAAAAAAAAAAAA"
    assert request(port, "GET", forged).status == 404


def test_customer_sync_waits_for_the_reply(run_example: RunExample) -> None:
    """Without `Prefer: respond-async` the POST waits for the reply and answers it."""
    example = run_example(NAME)
    assert example.bootstrap is not None
    port = example.port(7114)
    out: list[Answer] = []
    thread = threading.Thread(target=lambda: out.append(request(
        port, "POST", "/customer", {"Content-Type": "application/json"},
        json.dumps(CUSTOMER).encode(), timeout=30)), daemon=True)
    thread.start()
    [record] = records(example.bootstrap, "petstore-customers", 1)
    expected = verify(example.bootstrap, record, "denied")
    thread.join(30)
    assert out and (out[0].status, out[0].body) == (200, expected), out


def test_get_pet_by_id_when_paired(run_example: RunExample) -> None:
    """With a route that pairs getPets with the Kafka spec's getPet (`with.operation`, put
    before the example's routes), `GET /pets/{id}` answers the latest value of key `id` - a
    pet written with `Idempotency-Key: 7` is keyed 7 - and 404 for a key never written."""
    example = run_example(NAME, start=False)
    text = example.config.read_text()
    first = "    routes:\n      - when:\n          - spec: http_api\n            operation: createPets\n"
    assert text.count(first) == 1
    example.config.write_text(text.replace(first, (
        "    routes:\n      - when:\n          - spec: http_api\n            operation: getPets\n"
        "        exit: south_kafka_client\n        with:\n          spec: kafka_api\n"
        "          operation: getPet\n"
        "      - when:\n          - spec: http_api\n            operation: createPets\n")))
    example.start()
    port = example.port(7114)
    pet = b'{"name":"Seven","id":7}'
    assert request(port, "POST", "/pets", {"Content-Type": "application/json",
                                           "Idempotency-Key": "7"}, pet).status == 204
    wait_until(lambda: request(port, "GET", "/pets/7").body == pet, 20,
               what="GET /pets/7 answering the pet keyed 7")
    one = request(port, "GET", "/pets/7")
    assert (one.status, one.headers["content-type"]) == (200, "application/json")
    assert request(port, "GET", "/pets/8").status == 404
