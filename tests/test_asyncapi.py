"""The AsyncAPI 3.0 document made from a config validates against the official AsyncAPI 3.0.0
JSON Schema (npm `@asyncapi/specs`) - for etc/zilla.yaml, and for a config with guarded routes
and models whose schemas come from a schema registry - and says what a client needs."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from ssekd.cli import main
from tests.support.asyncapi import ROOT, problems
from tests.support.schema_registry import Registry

AVRO = {"type": "record", "name": "Price",
        "fields": [{"name": "sku", "type": "string"}, {"name": "cents", "type": "long"}]}


@pytest.fixture
def registry() -> Iterator[Registry]:
    r = Registry().start()
    yield r
    r.stop()


def _asyncapi(config: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[str, str]:
    assert main(["asyncapi", "--config", str(config), *extra]) == 0
    out = capsys.readouterr()
    return out.out, out.err


def test_demo_config_document_is_valid_asyncapi_3(capsys: pytest.CaptureFixture[str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KEYSTORE_PASSWORD", "unused-here")
    text, _ = _asyncapi(ROOT / "etc" / "zilla.yaml", capsys)
    doc = yaml.safe_load(text)
    assert problems(doc) == []
    as_json, _ = _asyncapi(ROOT / "etc" / "zilla.yaml", capsys, "--json")
    assert json.loads(as_json) == doc
    assert doc["asyncapi"] == "3.0.0"
    assert {s["host"]: s["protocol"] for s in doc["servers"].values()} == \
        {"localhost:7143": "https", "localhost:7114": "http"}
    events = next(c for c in doc["channels"].values() if c["address"] == "/events")
    record = events["messages"]["record"]
    schema = json.loads((ROOT / "etc" / "schemas" / "events.json").read_text())
    assert record["payload"] == {"schemaFormat": "application/schema+json;version=draft-07",
                                 "schema": schema}
    assert events["messages"]["delete"]["payload"]["type"] == "string"
    anything = next(c for c in doc["channels"].values() if c["address"] == "/{topic}")
    assert "payload" not in anything["messages"]["record"]  # a topic from the path: any
    assert set(anything["parameters"]) == {"topic"}
    assert all(o["action"] == "receive" for o in doc["operations"].values())


def test_guarded_routes_and_registry_models_document_is_valid(
        tmp_path: Path, registry: Registry, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KEYSTORE_PASSWORD", "unused-here")
    registry.register("prices-value", AVRO)
    text = (ROOT / "etc" / "zilla-jwt.yaml").read_text()
    text = text.replace("""    routes:
      - when:
          - path: /{topic}
        exit: north_kafka_cache_client""", """    routes:
      - when:
          - path: /prices/{region}
        exit: north_kafka_cache_client
        with:
          topic: prices
      - when:
          - path: /{topic}
        exit: north_kafka_cache_client""")
    text = text.replace("""      bootstrap:
        - events
""", """      bootstrap:
        - events
      topics:
        - name: prices
          value:
            model: avro
            view: json
            catalog:
              registry:
                - strategy: topic
                  version: latest
""") + f"""catalogs:
  registry:
    type: schema-registry
    options:
      url: {registry.url}
"""
    assert "/prices/{region}" in text and "model: avro" in text
    config = tmp_path / "zilla.yaml"
    config.write_text(text)
    out, err = _asyncapi(config, capsys)
    doc = yaml.safe_load(out)
    assert err == ""
    assert problems(doc) == []
    assert doc["components"]["securitySchemes"]["jwt0"] == {
        "type": "http", "scheme": "bearer", "bearerFormat": "JWT",
        "description": doc["components"]["securitySchemes"]["jwt0"]["description"]}
    prices = next(k for k, c in doc["channels"].items() if c["address"] == "/prices/{region}")
    channel = doc["channels"][prices]
    assert set(channel["messages"]) == {"record", "delete", "challenge"}
    assert channel["messages"]["record"]["payload"]["schema"] == AVRO
    assert "application/vnd.apache.avro" in channel["messages"]["record"]["payload"][
        "schemaFormat"]
    assert channel["messages"]["challenge"]["payload"]["properties"]["method"] == \
        {"const": "POST"}
    operation = doc["operations"][f"receive_{prices}"]
    assert operation["security"] == [{"$ref": "#/components/securitySchemes/jwt0"}]
    assert f"#/channels/{prices}/messages/challenge" in \
        [m["$ref"] for m in operation["messages"]]
    # the registry is down: the document still comes, without that payload, and says why
    registry.stop()
    out, err = _asyncapi(config, capsys)
    assert "warning: catalog 'registry'" in err
    doc = yaml.safe_load(out)
    assert problems(doc) == []
    assert "payload" not in doc["channels"][prices]["messages"]["record"]


def test_the_official_schema_catches_a_broken_document(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The check above can fail: the same validator refuses what AsyncAPI 3.0 does not allow."""
    monkeypatch.setenv("KEYSTORE_PASSWORD", "unused-here")
    doc = yaml.safe_load(_asyncapi(ROOT / "etc" / "zilla.yaml", capsys)[0])
    for breakage in ("action", "address", "version"):
        broken = copy.deepcopy(doc)
        if breakage == "action":
            next(iter(broken["operations"].values()))["action"] = "subscribe"  # AsyncAPI 2's
        elif breakage == "address":
            next(iter(broken["channels"].values()))["address"] = 7
        else:
            broken["asyncapi"] = "2.6.0"
        assert problems(broken) != [], breakage
