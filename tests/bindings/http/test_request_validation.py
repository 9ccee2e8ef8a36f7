"""The http server's `options.requests` in the running daemon: requests its entries refuse are
`400` (`415` for a content type the path does not take) before the exit sees them, with a line
saying what failed; good ones reach the exit with their body intact. Over HTTP/1.1 and h2c, with
an exit that reads bodies (echo) and one that reads none (filesystem)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.support.daemon import Daemon
from tests.support.http import curl

pytestmark = [pytest.mark.daemon]

SCHEMA = json.dumps({"type": "object", "required": ["id", "status"],
                     "additionalProperties": False,
                     "properties": {"id": {"type": "integer"}, "status": {"type": "string"}}})

CONFIG = """\
---
name: test
catalogs:
  local:
    type: inline
    options:
      subjects:
        item:
          schema: '{schema}'
bindings:
  tcp0:
    type: tcp
    kind: server
    options:
      host: 127.0.0.1
      port: {port}
    exit: http0
  http0:
    type: http
    kind: server
    options:
      requests:
        - path: /items/{{category}}/{{id}}
          method: POST
          content-type:
            - application/json
          headers:
            x-code:
              model: string
              pattern: "[a-z]{{3}}"
          params:
            path:
              id:
                model: int32
                range: "[1,1000]"
            query:
              page: int32
          content:
            model: json
            catalog:
              local:
                - subject: item
        - path: /files/{{name}}
          method: GET
          params:
            query:
              v:
                model: string
                maxLength: 3
          content:
            model: json
            catalog:
              local:
                - subject: item
    routes:
      - when:
          - headers:
              :path: /files/*
        exit: files0
    exit: echo0
  echo0:
    type: echo
    kind: server
  files0:
    type: http-filesystem
    kind: proxy
    routes:
      - when:
          - path: /files/{{path}}
        exit: fs0
        with:
          path: ${{params.path}}
  fs0:
    type: filesystem
    kind: server
    options:
      location: {www}
telemetry:
  exporters:
    out:
      type: stdout
"""

GOOD = '{"id": 7, "status": "Active"}'
VERSIONS = ("--http1.1", "--http2-prior-knowledge")


@pytest.fixture
def served(tmp_path: Path, run_daemon, port: int) -> tuple[Daemon, str]:  # type: ignore[no-untyped-def]
    www = tmp_path / "www"
    www.mkdir()
    (www / "a.txt").write_text("hello\n")
    config = tmp_path / "zilla.yaml"
    config.write_text(CONFIG.format(schema=SCHEMA, port=port, www=www))
    daemon = run_daemon(config, wait_ports=[port])
    return daemon, f"http://127.0.0.1:{port}"


def post(base: str, version: str, path: str = "/items/books/7?page=2", body: str = GOOD,
         *extra: str) -> tuple[int, dict[str, str], bytes]:
    return curl(version, "-X", "POST", "-H", "Content-Type: application/json",
                "-H", "X-Code: abc", *extra, "--data-binary", body, base + path)


@pytest.mark.parametrize("version", VERSIONS)
def test_a_good_request_reaches_the_exit_with_its_body(served: tuple[Daemon, str],
                                                        version: str) -> None:
    _, base = served
    status, _, body = post(base, version)
    assert (status, body) == (200, GOOD.encode())
    status, _, body = curl(version, "-X", "POST", "-H",
                           "Content-Type: application/json; charset=utf-8",
                           "--data-binary", GOOD, base + "/items/a/1000")
    assert (status, body) == (200, GOOD.encode()), "a charset does not change the type"


def test_more_segments_do_not_slip_past_the_entry(served: tuple[Daemon, str]) -> None:
    """A parameter takes `/` too (Zilla's templates): `/items/a/b/7` is the entry's, its id
    `b/7`, refused - not a path no entry names, let through unchecked."""
    _, base = served
    status, _, body = post(base, "--http1.1", "/items/a/b/7")
    assert (status, body) == (400, b"path parameter id: not an int32\n")


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(("path", "body", "extra", "why"), [
    ("/items/books/0?page=2", GOOD, (), b"path parameter id: below its range\n"),
    ("/items/books/x7?page=2", GOOD, (), b"path parameter id: not an int32\n"),
    ("/items/books/7?page=two&q=1", GOOD, (), b"query parameter page: not an int32\n"),
    ("/items/books/7?page=1&page=99999999999", GOOD, (), b"query parameter page: not an int32\n"),
    ("/items/books/7", GOOD, ("-H", "X-Code: s3cr3t-token"),
     b"header x-code: does not match the pattern [a-z]{3}\n"),
    ("/items/books/7", '{"id": "s3cr3t-token", "status": "x"}', (),
     b"content: .id: fails type integer\n"),
    ("/items/books/7", '{"id": 1, "status": "x", "password": "s3cr3t-token"}', (),
     b"content: the document: has a property its schema does not allow\n"),
    ("/items/books/7", '{"id": 1}', (), b"content: the document: lacks required status\n"),
    ("/items/books/7", "s3cr3t-token", (), b"content: not JSON\n"),
])
def test_a_request_its_entry_refuses_is_400_saying_why(
        served: tuple[Daemon, str], version: str, path: str, body: str,
        extra: tuple[str, ...], why: bytes) -> None:
    """The echo would answer `200` with the body: the refusal is the binding's, before it. The
    line says which part failed and never repeats the value."""
    daemon, base = served
    status, headers, answer = post(base, version, path, body, *extra)
    assert (status, answer) == (400, why)
    assert headers["content-type"] == "text/plain; charset=utf-8"
    daemon.wait_output(why.decode().strip())
    assert "s3cr3t" not in daemon.output()


@pytest.mark.parametrize("version", VERSIONS)
def test_a_content_type_the_path_does_not_take_is_415(served: tuple[Daemon, str],
                                                     version: str) -> None:
    _, base = served
    status, _, body = curl(version, "-X", "POST", "-H", "Content-Type: text/plain",
                           "--data-binary", "anything", base + "/items/books/7")
    assert (status, body) == (415, b"content type not accepted here; expected one of "
                                   b"application/json\n")


def test_requests_no_entry_names_are_not_checked(served: tuple[Daemon, str]) -> None:
    """Another method or path: no entry, nothing checked."""
    _, base = served
    status, _, body = curl("-X", "PUT", "-H", "Content-Type: text/plain", "--data-binary",
                           "free text", base + "/items/books/x")
    assert (status, body) == (200, b"free text")


@pytest.mark.parametrize("version", VERSIONS)
def test_an_exit_that_reads_no_body_gets_checked_requests(served: tuple[Daemon, str],
                                                          version: str) -> None:
    """The filesystem reads no body: the binding reads it to check it all the same, then the
    file is served; a bad query parameter or body is `400` before any file is read."""
    _, base = served
    assert curl(version, base + "/files/a.txt?v=1")[::2] == (200, b"hello\n")
    assert curl(version, base + "/files/a.txt?v=1234")[::2] == (
        400, b"query parameter v: longer than 3 characters\n")
    status, _, body = curl(version, "-X", "GET", "--data-binary", GOOD,
                           base + "/files/a.txt")
    assert (status, body) == (200, b"hello\n")
    status, _, body = curl(version, "-X", "GET", "--data-binary", '{"id": 1}',
                           base + "/files/a.txt")
    assert (status, body) == (400, b"content: the document: lacks required status\n")


def test_a_body_over_the_limit_is_413_before_it_is_checked(served: tuple[Daemon, str]) -> None:
    """The body is read within `limits.body-bytes` (1 MiB by default) like any other."""
    _, base = served
    big = '{"id": 1, "status": "' + "x" * (1 << 20) + '"}'
    out = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}",
                          "-H", "Content-Type: application/json", "--data-binary", "@-",
                          base + "/items/books/7"], input=big.encode(), capture_output=True,
                         timeout=20, check=False).stdout
    assert out == b"413"


@pytest.mark.parametrize("version", VERSIONS)
def test_a_body_nested_too_deeply_or_with_nan_is_400_and_the_daemon_goes_on(
        served: tuple[Daemon, str], version: str, tmp_path: Path) -> None:
    """JSON nested 100,000 deep made Python's parser raise RecursionError, answered 500; NaN is
    no JSON. Both are a body the model refuses: 400, and the next request is served."""
    _, base = served
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    for body, why in ((f"@{deep}", b"content: not JSON"),
                      ('{"id": NaN, "status": "x"}', b"content: not JSON")):
        status, _, answer = post(base, version, "/items/books/7?page=2", body)
        assert (status, answer.strip()) == (400, why)
    assert post(base, version)[::2] == (200, GOOD.encode())
