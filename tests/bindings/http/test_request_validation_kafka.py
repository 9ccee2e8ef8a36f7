"""`options.requests` in front of the write path, with http.kafka.avro.json's entry (`POST
/events`, `application/avro-binary`, `model: avro` with `strategy: encoded`): an Avro body in the
schema registry's wire format, checked with the schema of its id (fetched from a real HTTP server
answering as a registry), is produced; one the model refuses is `400` and no record is written;
while the registry cannot answer, `503` with `Retry-After` and no record."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from ssekd.dev.broker import free_port
from tests.support.broker import Kafka
from tests.support.daemon import Daemon
from tests.support.schema_registry import Registry, avro_bytes, wire
from tests.support.writes import read_records

pytestmark = [pytest.mark.daemon, pytest.mark.broker]

EVENT = {"type": "record", "name": "Event",
         "fields": [{"name": "id", "type": "long"}, {"name": "name", "type": "string"}]}

CONFIG = """\
---
name: test
catalogs:
  my_catalog:
    type: schema-registry
    options:
      url: {registry}
      context: default
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
        - path: /events
          method: POST
          content-type:
            - application/avro-binary
          content:
            model: avro
            catalog:
              my_catalog:
                - strategy: encoded
        - path: /stream/{{key}}
          method: GET
          params:
            path:
              key:
                model: string
                pattern: "[a-z]+"
            query:
              limit: int32
    routes:
      - when:
          - headers:
              :path: /stream/*
        exit: sse0
    exit: mapping
  sse0:
    type: sse
    kind: server
    exit: sse_kafka0
  sse_kafka0:
    type: sse-kafka
    kind: proxy
    routes:
      - when:
          - path: /stream/{{key}}
        exit: cache_client
        with:
          topic: {topic}
          filters:
            - key: ${{params.key}}
  mapping:
    type: http-kafka
    kind: proxy
    routes:
      - when:
          - path: /events
        exit: cache_client
        with:
          capability: produce
          topic: {topic}
  cache_client:
    type: kafka
    kind: cache_client
    exit: cache_server
  cache_server:
    type: kafka
    kind: cache_server
    exit: kafka0
  kafka0:
    type: kafka
    kind: client
    options:
      servers:
        - {bootstrap}
"""


@pytest.fixture
def registry() -> Iterator[Registry]:
    r = Registry().start()
    yield r
    r.stop()


def post(port: int, body: bytes, content_type: str = "application/avro-binary",
         version: str = "--http1.1") -> tuple[str, str]:
    """The status and body of a POST of `body`; `last_head` keeps the response's head."""
    out = subprocess.run(["curl", "-s", version, "-o", "-", "-w", "\n%{http_code}",
                          "-D", "/dev/stderr", "-H", f"Content-Type: {content_type}",
                          "--data-binary", "@-", f"http://127.0.0.1:{port}/events"],
                         input=body, capture_output=True, timeout=20, check=True)
    text, _, status = out.stdout.decode("latin-1").rpartition("\n")
    last_head[:] = [out.stderr.decode("latin-1").lower()]
    return status, text


last_head: list[str] = []


def test_avro_bodies_are_checked_with_the_schema_of_their_id(
        tmp_path: Path, run_daemon, kafka: Kafka, registry: Registry) -> None:  # type: ignore[no-untyped-def]
    sid = registry.register("events-value", EVENT)
    topic = kafka.topic(1, prefix="avro-events")
    port = free_port()
    config = tmp_path / "zilla.yaml"
    config.write_text(CONFIG.format(registry=registry.url, port=port, topic=topic,
                                    bootstrap=kafka.bootstrap))
    daemon: Daemon = run_daemon(config, wait_ports=[port])
    good = wire(sid, avro_bytes(EVENT, {"id": 1, "name": "lamp"}))
    for version in ("--http1.1", "--http2-prior-knowledge"):
        assert post(port, good, version=version)[0] == "204"
    refused = [
        (avro_bytes(EVENT, {"id": 2, "name": "plain"}),
         "content: not in the schema registry's wire format (byte 0, then a 4-byte schema id)"),
        (wire(sid, b"\x04"), "content: not Avro of its schema"),
        (wire(sid + 7, avro_bytes(EVENT, {"id": 3, "name": "x"})),
         f"content: unknown schema id {sid + 7}"),
    ]
    for body, why in refused:
        assert post(port, body) == ("400", why + "\n")
    assert post(port, good, "application/json")[0] == "415"
    registry.failing = "500"
    newer = registry.register("events-value", {**EVENT, "doc": "v2"})
    status, text = post(port, wire(newer, avro_bytes(EVENT, {"id": 4, "name": "later"})))
    assert status == "503" and text.startswith("the schema is not available yet"), text
    assert "retry-after: 1\r\n" in last_head[0]
    records = read_records(kafka.bootstrap, topic)
    assert [r.value() for r in records] == [good, good], "only the good ones reached Kafka"
    assert daemon.alive()


def test_an_sse_route_gets_checked_requests_and_streams_the_rest(
        tmp_path: Path, run_daemon, kafka: Kafka, registry: Registry) -> None:  # type: ignore[no-untyped-def]
    """The sse exit reads no body and holds its answer open: a request whose parameters fail
    is `400` and no stream opens; a good one streams."""
    topic = kafka.topic(1, prefix="sse-checked")
    port = free_port()
    config = tmp_path / "zilla.yaml"
    config.write_text(CONFIG.format(registry=registry.url, port=port, topic=topic,
                                    bootstrap=kafka.bootstrap))
    run_daemon(config, wait_ports=[port])
    base = f"http://127.0.0.1:{port}/stream"
    for version in ("--http1.1", "--http2-prior-knowledge"):
        for path, why in [("/Lamp", b"path parameter key: does not match the pattern [a-z]+\n"),
                          ("/lamp?limit=ten", b"query parameter limit: not an int32\n")]:
            out = subprocess.run(["curl", "-s", version, "--max-time", "5", "-w", "%{http_code}",
                                  base + path], capture_output=True, timeout=20, check=False)
            assert out.stdout == why + b"400", (version, out)
        out = subprocess.run(["curl", "-s", version, "--max-time", "1", "-D", "-",
                              base + "/lamp?limit=10"], capture_output=True, timeout=20,
                             check=False)
        assert out.returncode == 28, "the stream stays open"
        assert b"200" in out.stdout.split(b"\r\n")[0]
        assert b"content-type: text/event-stream" in out.stdout.lower()
