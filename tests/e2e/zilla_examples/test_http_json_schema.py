"""Zilla's http.json.schema example on ssekd: the http server checks requests and the http client
checks nginx's answers against the example's inline JSON Schema. nginx (the Debian package) runs
from the example's own nginx.conf and www/ (`tests.support.nginx`). Replays
`.github/test.sh` with curl (`/valid.json` is relayed, `/invalid.json` is cut after its head:
curl exits 18) and checks more: over h2c too, requests the server's entries refuse never reach
nginx (its access log), what the client says of a cut answer."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.zilla_examples.conftest import RunExample
from tests.support.nginx import Nginx, start_nginx
from tests.support.zilla_examples import EXAMPLES, Example

pytestmark = [pytest.mark.daemon]

NAME = "http.json.schema"
VERSIONS = ("--http1.1", "--http2-prior-knowledge")


@pytest.fixture
def nginx(tmp_path: Path) -> Iterator[Nginx]:
    server = start_nginx(EXAMPLES / NAME, tmp_path / "nginx")
    yield server
    server.stop()


def run(run_example: RunExample, nginx: Nginx) -> Example:
    """The example with its tcp client pointed at nginx (the compose network's `nginx:80`)."""
    return run_example(NAME, kafka=False,
                       hosts={"host: nginx": "host: 127.0.0.1",
                              "port: 80\n": f"port: {nginx.port}\n"})


def expected() -> str:
    """EXPECTED of the example's test.sh."""
    found = re.search(r"EXPECTED='(.*?)'", (EXAMPLES / NAME / ".github" / "test.sh").read_text(),
                      re.DOTALL)
    assert found is not None
    return found.group(1)


def curl(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["curl", "-s", "--max-time", "10", *args], capture_output=True,
                          timeout=20, check=False)


def test_valid_is_relayed_and_invalid_is_cut_as_test_sh_does(run_example: RunExample,
                                                              nginx: Nginx) -> None:
    """test.sh: `curl http://localhost:7114/valid.json` prints EXPECTED (the shell's `$(...)`
    drops the trailing newline), and `curl .../invalid.json` exits 18 (partial transfer)."""
    example = run(run_example, nginx)
    base = f"http://localhost:{example.port(7114)}"
    valid = curl(base + "/valid.json")
    assert valid.returncode == 0
    assert valid.stdout.decode().rstrip("\n") == expected()
    invalid = curl(base + "/invalid.json")
    assert invalid.returncode == 18, invalid


def test_a_cut_answer_keeps_its_head_and_loses_its_body(run_example: RunExample,
                                                        nginx: Nginx) -> None:
    """The invalid answer's status and length arrive (nginx's `200`, the file's bytes), and not
    one byte of the body the schema refused: over HTTP/1.1 the connection is closed short
    (curl: 18), over h2c the stream is reset after its HEADERS, the connection going on (curl
    reports an empty reply, 52; nghttp shows the frames). The client says why."""
    example = run(run_example, nginx)
    base = f"http://localhost:{example.port(7114)}"
    size = (EXAMPLES / NAME / "www" / "invalid.json").stat().st_size
    out = curl("--http1.1", "-D", "-", base + "/invalid.json")
    head, _, body = out.stdout.partition(b"\r\n\r\n")
    assert out.returncode == 18, out
    assert head.startswith(b"HTTP/1.1 200 OK"), head
    assert f"content-length: {size}".encode() in head.lower()
    assert body == b""
    assert curl("--http2-prior-knowledge", base + "/invalid.json").returncode == 52
    frames = subprocess.run(["nghttp", "-v", base + "/invalid.json", base + "/valid.json"],
                            capture_output=True, text=True, timeout=20, check=False).stdout
    # nghttp opens its requests as streams 13 and 15 (1 to 11 are its priority groups)
    assert re.search(r"recv HEADERS frame <length=\d+, flags=0x04, stream_id=13>", frames), frames
    assert "recv RST_STREAM frame <length=4, flags=0x00, stream_id=13>" in frames, frames
    assert not re.search(r"recv DATA frame <length=[1-9]\d*, flags=0x0\d, stream_id=13>",
                         frames), frames
    assert re.search(r"recv DATA frame <length=\d+, flags=0x01, stream_id=15>", frames), \
        "the connection's next stream is answered whole"
    assert example.daemon is not None
    example.daemon.wait_output("aborted: content: the document: has a property its schema "
                               "does not allow")
    good = curl("--http2-prior-knowledge", base + "/valid.json")
    assert (good.returncode, good.stdout.decode().rstrip("\n")) == (0, expected())


@pytest.mark.parametrize("version", VERSIONS)
def test_requests_the_server_refuses_never_reach_nginx(run_example: RunExample, nginx: Nginx,
                                                       version: str) -> None:
    """The server's entries (`GET /valid.json`, `application/json`, the schema): a GET whose
    JSON body fails it is `400` saying why, one of another content type `415`; nginx sees
    neither, and sees the good request that follows."""
    example = run(run_example, nginx)
    base = f"http://localhost:{example.port(7114)}"
    before = len(nginx.requests())
    json_body = ["-X", "GET", "-H", "Content-Type: application/json"]
    refused = curl(version, "-w", "%{http_code}", *json_body,
                   "--data-binary", '{"id": "forty-two", "status": "Active"}',
                   base + "/valid.json")
    assert refused.stdout == b"content: .id: fails type integer\n400"
    wrong_type = curl(version, "-w", "%{http_code}", "-X", "GET", "-H",
                      "Content-Type: text/plain", "--data-binary", "hello", base + "/valid.json")
    assert wrong_type.stdout.endswith(b"415")
    assert len(nginx.requests()) == before, "nothing refused reached nginx"
    good = curl(version, *json_body, "--data-binary", '{"id": 42, "status": "Active"}',
                base + "/valid.json")
    assert good.returncode == 0 and good.stdout.decode().rstrip("\n") == expected()
    assert nginx.requests()[before:] == ["GET /valid.json HTTP/1.1"]


def test_answers_no_entry_selects_pass_unchecked(run_example: RunExample,
                                                 nginx: Nginx) -> None:
    """nginx's `404` (`text/html`, no entry lists it) and the demo page (no entry names it)
    are relayed as they are."""
    example = run(run_example, nginx)
    base = f"http://localhost:{example.port(7114)}"
    missing = curl("-w", "%{http_code}", base + "/valid.json.bak")
    assert missing.returncode == 0 and missing.stdout.endswith(b"404")
    page = curl(base + "/demo.html")
    assert page.stdout == (EXAMPLES / NAME / "www" / "demo.html").read_bytes()


@pytest.mark.parametrize("version", VERSIONS)
def test_an_answer_whose_headers_fail_is_503_instead(run_example: RunExample, nginx: Nginx,
                                                     version: str) -> None:
    """Beyond the example: its `200` entries given a header model nginx's `ETag` (a quoted
    text) fails. The answer is Zilla's: `503` with `Retry-After: 0` in its place, none of
    nginx's headers nor body."""
    header_model = ("            - status: 200\n              headers:\n                etag:\n"
                    "                  model: int32\n")
    example = run_example(NAME, kafka=False,
                          hosts={"host: nginx": "host: 127.0.0.1",
                                 "port: 80\n": f"port: {nginx.port}\n",
                                 "            - status: 200\n": header_model})
    out = curl(version, "-D", "-", f"http://localhost:{example.port(7114)}/valid.json")
    head, _, body = out.stdout.partition(b"\r\n\r\n")
    assert out.returncode == 0 and re.match(rb"HTTP/(1\.1|2) 503", head), out
    assert b"retry-after: 0" in head.lower() and b"etag" not in head.lower()
    assert body == b""
    assert example.daemon is not None
    example.daemon.wait_output("aborted: header etag: not an int32")
