"""Headless Chromium reads a topic whose values are Avro in Confluent's wire format, with the
schema in a schema registry (a real HTTP server answering as the registry's API reference
documents): the page's EventSource receives each record as JSON. A second schema version (a
field added with a default) is registered while the page is open; records written with it
arrive with the new field, without a restart; an invalid record in between never arrives."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ssekd.dev.broker import Broker, free_port
from tests.support.broker import Kafka
from tests.support.browser import Browser
from tests.support.daemon import start_daemon
from tests.support.modeld import write_model_config
from tests.support.schema_registry import Registry, avro_bytes, wire
from tests.support.wait import wait_until

pytestmark = [pytest.mark.browser, pytest.mark.daemon, pytest.mark.broker]

V1 = {"type": "record", "name": "Sensor", "namespace": "demo",
      "fields": [{"name": "key", "type": "string"}, {"name": "temperature", "type": "double"}]}
V2 = {**V1, "fields": [*V1["fields"], {"name": "unit", "type": "string", "default": "C"}]}


@pytest.fixture
def registry() -> Iterator[Registry]:
    r = Registry().start()
    yield r
    r.stop()


def _received(browser: Browser) -> list[Any]:
    return [json.loads(r["data"]) for r in
            json.loads(browser.evaluate("JSON.stringify(window.ssekd.received)"))]


@pytest.mark.timeout(180)
def test_avro_from_registry_arrives_in_the_browser_as_json(
        kafka: Kafka, kafka_broker: Broker, registry: Registry, tmp_path: Path) -> None:
    topic = kafka.topic(1)
    v1 = registry.register(f"{topic}-value", V1)
    port = free_port()
    catalogs = f"  registry:\n    type: schema-registry\n" \
               f"    options: {{url: '{registry.url}', cache-ttl: 1}}\n"
    model = "{model: avro, view: json, catalog: {registry: [{strategy: topic, version: latest}]}}"
    config = write_model_config(tmp_path, kafka_broker.bootstrap, port, topic, model, catalogs)
    for i in range(3):
        kafka.produce(topic, wire(v1, avro_bytes(V1, {"key": f"s{i}", "temperature": 20.5 + i})),
                      key=f"s{i}".encode())
    kafka.flush()
    daemon = start_daemon(config, wait_ports=[port])
    browser = Browser(f"http://127.0.0.1:{port}/www/index.html?stream=/events/{topic}")
    try:
        wait_until(lambda: browser.evaluate("window.ssekd && window.ssekd.received.length") == 3,
                   30, interval=0.1, what=lambda: daemon.output()[-2000:])
        assert _received(browser) == [{"key": f"s{i}", "temperature": 20.5 + i}
                                      for i in range(3)]
        v2 = registry.register(f"{topic}-value", V2)
        assert v2 != v1
        kafka.produce(topic, wire(v2, avro_bytes(V2, {"key": "s9", "temperature": 1.0,
                                                      "unit": "K"})), key=b"s9")
        kafka.produce(topic, wire(v1, b"\x04"), key=b"bad")  # truncated: invalid
        kafka.produce(topic, wire(v1, avro_bytes(V1, {"key": "s0", "temperature": 3.0})),
                      key=b"s0")
        kafka.flush()
        wait_until(lambda: browser.evaluate("window.ssekd.received.length") == 5, 30,
                   interval=0.1, what=lambda: daemon.output()[-2000:])
        assert _received(browser)[3:] == [{"key": "s9", "temperature": 1.0, "unit": "K"},
                                          {"key": "s0", "temperature": 3.0}]
        assert browser.evaluate("document.querySelectorAll('#rows tr').length") == 4
        assert f"/schemas/ids/{v2}" in registry.requests
        daemon.wait_output("BINDING_KAFKA_RECORD_INVALID")
        assert "Traceback" not in daemon.output()
    finally:
        browser.close()
        daemon.stop()
