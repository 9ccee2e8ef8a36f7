"""Zilla's openapi.proxy example on ssekd: an openapi server and an openapi client composed from
the petstore spec, in front of a stand-in for open-api-mocker (`tests.support.openapi_mock`),
started as published (`tests.support.zilla_examples`) and checked the way its
`.github/test.sh` checks it (with curl, as test.sh does), then further: a POST goes through, a
body the spec refuses is 400 and never reaches the upstream, what the spec does not have is 404
without reaching it either, and an upstream answer the spec refuses does not reach the
client whole."""

from __future__ import annotations

import http.client
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.zilla_examples.conftest import RunExample
from tests.support.openapi_mock import OpenapiMock
from tests.support.wait import wait_until
from tests.support.writes import request
from tests.support.zilla_examples import EXAMPLES

pytestmark = [pytest.mark.daemon]

NAME = "openapi.proxy"
EXPECTED = '[{"id":1,"name":"string","tag":"string"}]'


@pytest.fixture
def mock() -> Iterator[OpenapiMock]:
    """The example's `openapi-mock` service: the mocker serving the example's spec."""
    stand_in = OpenapiMock(EXAMPLES / NAME / "etc" / "specs" / "petstore-openapi.yaml")
    stand_in.start()
    yield stand_in
    stand_in.stop()


def curl_pets(port: int) -> str:
    """test.sh's `curl --silent --location http://localhost:$PORT/pets -H 'Accept: ...'`."""
    done = subprocess.run(["curl", "--silent", "--location", f"http://localhost:{port}/pets",
                           "--header", "Accept: application/json"],
                          capture_output=True, text=True, timeout=30, check=False)
    return done.stdout if done.returncode == 0 else f"curl failed ({done.returncode})"


def test_get_pets_answers_the_mockers_pets_as_test_sh_does(run_example: RunExample,
                                                          mock: OpenapiMock) -> None:
    example = run_example(NAME, kafka=False, hosts={"openapi-mock:5000":
                                                    f"127.0.0.1:{mock.port}"})
    port = example.port(7114)
    output = wait_until(lambda: (out := curl_pets(port)) == EXPECTED and out, 10,
                        what=lambda: f"GET /pets answered {curl_pets(port)!r}")
    assert output == EXPECTED
    method, path, headers, _ = mock.requests[-1]
    assert (method, path, headers.get("accept")) == ("GET", "/pets", "application/json")


def test_beyond_test_sh(run_example: RunExample, mock: OpenapiMock, tmp_path: Path) -> None:
    example = run_example(NAME, kafka=False, hosts={"openapi-mock:5000":
                                                    f"127.0.0.1:{mock.port}"})
    port = example.port(7114)
    json_body = {"Content-Type": "application/json"}
    created = request(port, "POST", "/pets", json_body, b'{"id": 7, "name": "Rex"}')
    assert created.status == 201, created
    assert mock.requests[-1][0::3] == ("POST", b'{"id": 7, "name": "Rex"}')
    seen = len(mock.requests)
    refused = request(port, "POST", "/pets", json_body, b'{"id": 7}')
    assert refused.status == 400 and b"Traceback" not in refused.body, refused
    assert request(port, "GET", "/owners").status == 404
    assert request(port, "DELETE", "/pets").status == 404
    assert len(mock.requests) == seen, "what the spec refuses never goes upstream"

    # an upstream that answers what the spec's Pets schema refuses: cut after its head, as
    # Zilla's is, so the client never takes it for a whole answer
    mock.example = lambda schema: [{"id": "one"}]  # type: ignore[method-assign]
    with pytest.raises((ConnectionError, http.client.HTTPException)):
        request(port, "GET", "/pets")
    assert mock.requests[-1][:2] == ("GET", "/pets"), "the upstream was asked"
    mock.example = OpenapiMock.example.__get__(mock)  # type: ignore[method-assign]
    assert json.loads(request(port, "GET", "/pets").body) == json.loads(EXPECTED)
