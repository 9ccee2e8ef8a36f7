"""Zilla's openapi.asyncapi.kakfa.proxy example (Zilla's spelling) on ssekd: an openapi server,
an openapi-asyncapi proxy and an asyncapi client composed from the example's two specs, started
as published (`tests.support.zilla_examples`) and checked the way its `.github/test.sh` checks
it, then further: the record the POST made, a path and a method the spec does not have, a body
that is not JSON, a second pet merged into the list, and the spec's security mapped to a jwt
guard."""

from __future__ import annotations

import json

import pytest
import yaml

from tests.e2e.zilla_examples.conftest import RunExample
from tests.support.jwt import AUDIENCE, ISSUER, rsa_key
from tests.support.wait import wait_until
from tests.support.writes import header, read_records, request
from tests.support.zilla_examples import Example

pytestmark = [pytest.mark.daemon, pytest.mark.broker]

NAME = "openapi.asyncapi.kakfa.proxy"
TOPIC = "petstore-pets"


def started(run_example: RunExample) -> Example:
    """The example, started once it listens on 7114: its compose file also publishes 4444,
    which its config never listens on (nor does Zilla's)."""
    example = run_example(NAME, start=False)
    del example.ports[4444]
    example.start()
    return example


def post_pet(port: int, body: str, key: str) -> int:
    return request(port, "POST", "/pets", {"Content-Type": "application/json",
                                           "Idempotency-Key": key}, body.encode()).status


def test_a_posted_pet_is_listed_as_test_sh_does(run_example: RunExample) -> None:
    """test.sh: POST `{"id": 1, "name": "Spike"}` with `Idempotency-Key: 1`, then GET /pets is
    exactly `[{"id": 1, "name": "Spike"}]` (retried while the record makes its way round). The
    record on `petstore-pets` is the body as sent, keyed by the idempotency key (the path has no
    parameter: Zilla's rule); posting it again changes nothing."""
    example = started(run_example)
    assert example.bootstrap is not None
    port = example.port(7114)
    body = '{"id": 1, "name": "Spike"}'
    expected = b'[{"id": 1, "name": "Spike"}]'

    def posted_then_listed() -> bool:
        status = post_pet(port, body, "1")
        assert status in (200, 201, 202, 204), status
        return request(port, "GET", "/pets").body == expected

    wait_until(posted_then_listed, 30, interval=0.5, what="the posted pet listed")
    listed = request(port, "GET", "/pets")
    assert listed.status == 200 and listed.headers["content-type"].startswith(
        "application/json")
    records = [r for r in read_records(example.bootstrap, TOPIC)]
    assert records and {(r.key(), r.value()) for r in records} == {(b"1", body.encode())}
    assert post_pet(port, body, "1") in (200, 201, 202, 204)
    assert request(port, "GET", "/pets").body == expected


def test_beyond_test_sh(run_example: RunExample) -> None:
    """What the spec does not have is 404 (a path, a method of a known path); a body the
    spec's `Pet` schema refuses is 400 and one of another content type 415, and neither
    reaches Kafka; a second pet is merged into the array after the first."""
    example = started(run_example)
    assert example.bootstrap is not None
    port = example.port(7114)
    refused = request(port, "POST", "/pets", {"Content-Type": "application/json",
                                              "Idempotency-Key": "9"}, b'{"id": "nine"}')
    assert refused.status == 400, refused
    assert b"Traceback" not in refused.body
    assert request(port, "POST", "/pets", {"Content-Type": "application/json",
                                           "Idempotency-Key": "9"}, b"{").status == 400
    assert request(port, "POST", "/pets", {"Content-Type": "text/plain",
                                           "Idempotency-Key": "9"}, b"Spike").status == 415
    assert request(port, "GET", "/owners").status == 404
    assert request(port, "DELETE", "/pets").status == 404
    assert request(port, "GET", "/pets/1").status == 404  # listPetById has no HTTP operation
    wait_until(lambda: request(port, "GET", "/pets").body == b"[]", 20,
               what="an empty list before any pet")
    assert post_pet(port, '{"id": 1, "name": "Spike"}', "1") in (200, 201, 202, 204)
    assert post_pet(port, '{"id": 2, "name": "Tom", "tag": "cat"}', "2") in (200, 201, 202, 204)

    def both() -> bool:
        answer = request(port, "GET", "/pets")
        return answer.status == 200 and len(json.loads(answer.body)) == 2

    wait_until(both, 20, what="both pets listed")
    pets = json.loads(request(port, "GET", "/pets").body)
    assert sorted(p["id"] for p in pets) == [1, 2]
    assert {"id": 2, "name": "Tom", "tag": "cat"} in pets
    assert sorted(r.key() for r in read_records(example.bootstrap, TOPIC)) == [b"1", b"2"], \
        "the refused bodies made no record"


def test_a_secured_operation_takes_a_token_with_its_scope(run_example: RunExample) -> None:
    """The example's spec with `createPet` secured by a bearer scheme (scope `write:pets`)
    mapped to a jwt guard on the server and the proxy, and `owner: '{identity}'` in its
    x-zilla-http-kafka overrides: no token is 401, a token without the scope 404 (Zilla's
    answer for a missing role), a good one writes the record with the token's subject as its
    `owner` header; GET /pets stays open."""
    key = rsa_key()
    example = run_example(NAME, start=False)
    del example.ports[4444]
    spec = example.root("/etc/zilla/specs/http-openapi.yaml")
    spec.write_text(spec.read_text().replace(
        "      operationId: createPet\n",
        "      operationId: createPet\n      security: [{petstore_auth: [write:pets]}]\n"
        "      x-zilla-http-kafka:\n        overrides: {owner: '{identity}'}\n").replace(
        "components:\n", "components:\n  securitySchemes:\n    petstore_auth:\n"
                         "      type: http\n      scheme: bearer\n      bearerFormat: JWT\n"))
    guard = {"jwt0": {"type": "jwt", "options": {"issuer": ISSUER, "audience": AUDIENCE,
                                                 "keys": [key.jwk]}}}
    config = yaml.safe_load(example.config.read_text())
    config["guards"] = guard
    bindings = config["bindings"]
    bindings["north_openapi_server"]["options"]["specs"]["my-openapi-spec"]["security"] = \
        {"petstore_auth": "jwt0"}
    bindings["north_openapi_asyncapi_proxy"]["options"]["specs"]["openapi"][
        "my-openapi-spec"]["security"] = {"petstore_auth": "jwt0"}
    example.config.write_text(yaml.safe_dump(config, sort_keys=False))
    example.start()
    assert example.bootstrap is not None
    port = example.port(7114)
    body = b'{"id": 3, "name": "Felix"}'
    pet = {"Content-Type": "application/json", "Idempotency-Key": "3"}
    assert request(port, "POST", "/pets", pet, body).status == 401
    reader = key.token(sub="bob", scope="read:pets")
    assert request(port, "POST", "/pets", {**pet, "Authorization": f"Bearer {reader}"},
                   body).status == 404
    writer = key.token(sub="alice", scope="write:pets")
    written = request(port, "POST", "/pets", {**pet, "Authorization": f"Bearer {writer}"}, body)
    assert written.status in (200, 201, 202, 204), written
    [record] = read_records(example.bootstrap, TOPIC)
    assert (record.key(), record.value(), header(record, "owner")) == (b"3", body, b"alice")
    assert header(record, "authorization") is None, "the token never reaches Kafka"
    assert request(port, "GET", "/pets").status == 200
