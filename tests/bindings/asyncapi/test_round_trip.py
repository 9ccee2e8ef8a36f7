"""The AsyncAPI document ssekd generates for a config composed from specs says what the SSE spec
says: every channel, operation and message of the spec is in it, equal, under the same name (and
the document is valid AsyncAPI 3.0.0). Two specs that use one name for different things keep
both, the later under its label, with its references following."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from ssekd.cli import main
from tests.support.asyncapi import problems
from tests.support.asyncapi_example import EXAMPLE, GUARDED


def generated(config: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    assert main(["asyncapi", "--config", str(config)]) == 0
    doc: dict[str, Any] = yaml.safe_load(capsys.readouterr().out)
    assert problems(doc) == []
    return doc


def messages(doc: dict[str, Any]) -> dict[str, Any]:
    """Every message of every channel, by channel and name, its reference followed."""
    found = {}
    for key, channel in doc["channels"].items():
        for name, message in (channel.get("messages") or {}).items():
            ref = message.get("$ref", "")
            if ref.startswith("#/components/messages/"):
                message = doc["components"]["messages"][ref.rsplit("/", 1)[1]]
            found[(key, name)] = message
    return found


@pytest.mark.parametrize("folder", [EXAMPLE, GUARDED], ids=["example", "guarded"])
def test_generated_document_equals_the_sse_spec(folder: Path, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JWKS_URL", "http://127.0.0.1:1/jwks.json")
    spec = yaml.safe_load((folder / "specs" / "sse-asyncapi.yaml").read_text())
    doc = generated(folder / "zilla.yaml", capsys)
    assert doc["channels"] == spec["channels"]
    assert doc["operations"] == spec["operations"]
    assert messages(doc) == messages(spec)
    assert doc["components"] == spec["components"]
    assert doc["servers"] == spec["servers"]
    assert doc["defaultContentType"] == spec["defaultContentType"]


def test_two_specs_with_the_same_names_keep_both(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    shutil.copytree(EXAMPLE, tmp_path / "ex")
    specs = tmp_path / "ex" / "specs"
    first = (specs / "sse-asyncapi.yaml").read_text()
    # the same names, other things: another path, another payload
    second = first.replace("address: /events", "address: /audit").replace(
        "description: Tag.", "description: The audit tag.")
    (specs / "audit-asyncapi.yaml").write_text(second)
    config = tmp_path / "ex" / "zilla.yaml"
    text = config.read_text()
    text = text.replace("        kafka:\n          path: specs/kafka-asyncapi.yaml\n",
                        "        kafka:\n          path: specs/kafka-asyncapi.yaml\n"
                        "        audit:\n          path: specs/audit-asyncapi.yaml\n")
    audit = ("        audit_api:\n          catalog:\n            host_filesystem:\n"
             "              subject: audit\n")
    text = text.replace("              subject: sse\n    exit", "              subject: sse\n"
                        + audit + "    exit")
    text = text.replace("        kafka_api:\n          servers:\n            - kafka://kafka."
                        "examples.dev:29092\n          catalog:\n            host_filesystem:\n"
                        "              subject: kafka\n    routes:",
                        "        kafka_api:\n          servers:\n            - kafka://kafka."
                        "examples.dev:29092\n          catalog:\n            host_filesystem:\n"
                        "              subject: kafka\n" + audit + "    routes:")
    text = text.replace("          - spec: sse_api\n", "          - spec: sse_api\n"
                        "          - spec: audit_api\n")
    config.write_text(text)
    doc = generated(config, capsys)
    spec = yaml.safe_load(first)
    assert doc["channels"]["events"] == spec["channels"]["events"]
    assert doc["operations"]["receiveEvents"] == spec["operations"]["receiveEvents"]
    assert doc["channels"]["audit_api_events"] == {
        "address": "/audit",
        "messages": {"event": {"$ref": "#/components/messages/audit_api_event"}}}
    assert doc["operations"]["audit_api_receiveEvents"]["channel"] == \
        {"$ref": "#/channels/audit_api_events"}
    assert doc["components"]["messages"]["audit_api_event"]["payload"] == \
        {"$ref": "#/components/schemas/audit_api_eventPayload"}
    assert doc["components"]["schemas"]["audit_api_eventPayload"]["properties"]["tag"] == \
        {"type": "string", "description": "The audit tag."}
    assert list(doc["servers"]) == ["plain_sse"]  # the same server in both: once
