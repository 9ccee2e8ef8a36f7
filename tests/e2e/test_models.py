"""Models end to end: a real broker, the real daemon, real SSE clients.

- JSON model: of 1,000 records with 10% invalid, every stream gets exactly the 900 valid ones
  in order; a stream resuming from the id before or after an invalid record neither repeats
  nor loses one; invalid records are reported by an event; the AsyncAPI document is served.
- A schema registry that is down when the daemon starts: it starts anyway, streams of the topic
  are refused for now (`200` text/event-stream with `retry:`, then the end) with an event, and
  are served once the registry answers.
- A schema file edited, then SIGHUP: records are checked with the new schema.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from ssekd.dev.broker import Broker, free_port
from tests.support.asyncapi import problems
from tests.support.broker import Kafka
from tests.support.daemon import start_daemon
from tests.support.http import curl
from tests.support.modeld import write_model_config
from tests.support.schema_registry import Registry, avro_bytes, wire
from tests.support.sse import SseClient
from tests.support.wait import wait_until

pytestmark = [pytest.mark.daemon, pytest.mark.broker]

SCHEMA = {"type": "object", "required": ["n"],
          "properties": {"n": {"type": "integer", "minimum": 0}}}
INLINE = "  local:\n    type: inline\n    options:\n      subjects:\n" \
         f"        numbers: {{schema: '{json.dumps(SCHEMA)}'}}\n"
JSON_MODEL = "{model: json, catalog: {local: [{subject: numbers}]}}"


def _value(i: int) -> bytes:
    """Every tenth record (5, 15, 25, ...) is invalid, in turn: not JSON, a wrong type, no `n`."""
    if i % 10 != 5:
        return json.dumps({"n": i}).encode()
    return (b"{not json", b'{"n": "five"}', b'{"m": 1}')[(i // 10) % 3]


@pytest.mark.timeout(120)
def test_json_model_every_stream_gets_the_valid_900_and_resumes_exactly(
        kafka: Kafka, kafka_broker: Broker, tmp_path: Path) -> None:
    topic = kafka.topic(1)
    port = free_port()
    config = write_model_config(tmp_path, kafka_broker.bootstrap, port, topic, JSON_MODEL,
                                INLINE)
    daemon = start_daemon(config, wait_ports=[port])
    try:
        streams = [SseClient(port, f"/events/{topic}") for _ in range(3)]
        for i in range(1000):
            kafka.produce(topic, _value(i))
        kafka.produce(topic, json.dumps({"n": 1000}).encode())  # the end marker
        kafka.flush()
        valid = [i for i in range(1000) if i % 10 != 5] + [1000]
        got = []
        for s in streams:
            events = s.events(901, timeout=30)
            assert [json.loads(e.data or "")["n"] for e in events] == valid
            got.append(events)
        assert [e.id for e in got[0]] == [e.id for e in got[1]] == [e.id for e in got[2]]
        ids = {json.loads(e.data or "")["n"]: e.id for e in got[0]}
        # Resume from the event before an invalid record (4, then 5 is skipped) and from the one
        # after it (6): each continues with the next valid record, nothing repeated or lost.
        for last, first in ((4, 6), (6, 7), (994, 996), (996, 997)):
            with SseClient(port, f"/events/{topic}",
                           {"Last-Event-ID": ids[last] or ""}) as again:
                want = valid[valid.index(first):]
                events = again.events(len(want), timeout=20)
                assert [json.loads(e.data or "")["n"] for e in events] == want
                assert again.next_event(timeout=0.5) is None
        daemon.wait_output("BINDING_KAFKA_RECORD_INVALID")
        assert f"{topic} partition 0 offset 5: not JSON" in daemon.output()
        assert "Traceback" not in daemon.output()
        status, headers, body = curl(f"http://127.0.0.1:{port}/asyncapi.yaml")
        assert status == 200 and headers["content-type"].startswith("application/yaml")
        doc = yaml.safe_load(body)
        assert problems(doc) == []
        assert next(iter(doc["channels"].values()))["address"] == "/events/{topic}"
        for s in streams:
            s.close()
    finally:
        daemon.stop()


AVRO = {"type": "record", "name": "Reading",
        "fields": [{"name": "n", "type": "long"}, {"name": "where", "type": "string"}]}


@pytest.mark.timeout(120)
def test_registry_down_at_start_refuses_streams_for_now_then_recovers(
        kafka: Kafka, kafka_broker: Broker, tmp_path: Path) -> None:
    topic = kafka.topic(1)
    registry = Registry()
    registry.port = free_port()  # a port nothing listens on yet: the registry comes later
    port = free_port()
    catalogs = f"  registry:\n    type: schema-registry\n    options: {{url: '{registry.url}'}}\n"
    model = "{model: avro, view: json, catalog: {registry: [{strategy: topic}]}}"
    config = write_model_config(tmp_path, kafka_broker.bootstrap, port, topic, model, catalogs)
    daemon = start_daemon(config, wait_ports=[port])
    try:
        daemon.wait_output("CATALOG_SCHEMA_UNAVAILABLE")
        with SseClient(port, f"/events/{topic}") as refused:
            assert refused.status == 200
            assert refused.headers["Content-Type"].startswith("text/event-stream")
            assert refused.next_event(timeout=5) is None  # ended, no event
            assert refused.retry is not None
        daemon.wait_output("BINDING_SSE_KAFKA_SCHEMA_UNAVAILABLE")
        sid = registry.register(f"{topic}-value", AVRO)
        registry.start()
        daemon.wait_output("CATALOG_SCHEMA_RESOLVED", timeout=40)
        kafka.produce(topic, wire(sid, avro_bytes(AVRO, {"n": 1, "where": "hall"})))
        kafka.flush()

        def served() -> bool:
            with SseClient(port, f"/events/{topic}") as s:
                e = s.next_event(timeout=2)
                return e is not None and json.loads(e.data or "") == {"n": 1, "where": "hall"}

        wait_until(served, 20, interval=0.2, what=lambda: daemon.output()[-2000:])
        assert "Traceback" not in daemon.output()
    finally:
        daemon.stop()
        registry.stop()


@pytest.mark.timeout(120)
def test_a_schema_file_edited_then_reloaded_is_used(kafka: Kafka, kafka_broker: Broker,
                                                   tmp_path: Path) -> None:
    """SIGHUP after editing a filesystem catalog's schema file: the cache_server is rebuilt
    (its binding config did not change, its schema did) and checks records with the new one."""
    import signal

    topic = kafka.topic(1)
    (tmp_path / "numbers.json").write_text(json.dumps(SCHEMA))
    port = free_port()
    catalogs = "  local:\n    type: filesystem\n    options:\n      subjects:\n" \
               "        numbers: {path: numbers.json}\n"
    config = write_model_config(tmp_path, kafka_broker.bootstrap, port, topic, JSON_MODEL,
                                catalogs)
    daemon = start_daemon(config, wait_ports=[port])
    try:
        with SseClient(port, f"/events/{topic}") as stream:
            kafka.produce(topic, b'{"m": 1}')  # invalid: no n
            kafka.produce(topic, b'{"n": 1}')
            kafka.flush()
            assert json.loads(stream.events(1)[0].data or "") == {"n": 1}
            relaxed = {"type": "object", "properties": {"m": {"type": "integer"}}}
            (tmp_path / "numbers.json").write_text(json.dumps(relaxed))
            daemon.signal(signal.SIGHUP)
            daemon.wait_output("CONFIG_RELOADED")
        with SseClient(port, f"/events/{topic}") as stream:
            kafka.produce(topic, b'{"m": 2}')
            kafka.flush()
            got = [json.loads(e.data or "") for e in stream.events(3, timeout=20)]
            # the rebuilt cache read the topic again, checking every record with the new schema
            assert got == [{"m": 1}, {"n": 1}, {"m": 2}]
        assert "Traceback" not in daemon.output()
    finally:
        daemon.stop()
