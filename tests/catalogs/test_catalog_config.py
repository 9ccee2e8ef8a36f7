"""Bad catalogs and models are config errors from `ssekd check` (and at start and reload), each
naming the file, the line, the path and what is wrong - never a traceback. A good one checks."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.config.test_refused_keys import BASE, KAFKA, check, line_of

MODEL = "    options:\n      topics:\n        - name: items\n          value: {model: json, " \
        "catalog: {local: [{subject: items}]}}\n"
LOCAL = "catalogs:\n  local:\n    type: inline\n    options:\n      subjects:\n" \
        "        items: {schema: '{\"type\": \"object\"}'}\n"


def _with_model(model: str = MODEL, catalogs: str = LOCAL) -> str:
    return BASE + KAFKA.replace("    kind: cache_server\n    exit: kc\n",
                                "    kind: cache_server\n    exit: kc\n" + model) + catalogs


#: A cache_client's write model, with a `.proto` from a filesystem catalog.
PROTO_MODEL = "    options:\n      topics:\n        - name: items\n          value: {model: " \
    "protobuf, view: json, catalog: {protos: [{subject: req, record: Request}]}}\n"
PROTOS = "catalogs:\n  protos:\n    type: filesystem\n    options:\n      subjects:\n" \
    "        req: {path: request.proto}\n"


def _with_write_model(model: str = PROTO_MODEL, catalogs: str = PROTOS) -> str:
    return BASE + KAFKA.replace("    kind: cache_client\n    exit: cs\n",
                                "    kind: cache_client\n    exit: cs\n" + model) + catalogs


#: A second cache_client of the same cache_server, writing `items` as plain Protobuf.
OTHER_CLIENT = "  cc2:\n    type: kafka\n    kind: cache_client\n    exit: cs\n" + \
    PROTO_MODEL.replace("- name: items", "- name: items # cc2").replace("view: json, ", "")


BAD: list[tuple[str, str, str, str, str]] = [
    # (case, config text, the line's needle, path in the message, what the message says)
    ("schema-does-not-parse", _with_model(catalogs=LOCAL.replace(
        "'{\"type\": \"object\"}'", "'{\"type\": '")), "value: {model: json",
     "bindings.cs.options.topics[0].value.catalog.local", "not a JSON Schema"),
    ("invalid-json-schema", _with_model(catalogs=LOCAL.replace(
        "'{\"type\": \"object\"}'", "'{\"type\": \"thing\"}'")), "value: {model: json",
     "bindings.cs.options.topics[0].value.catalog.local", "not a JSON Schema"),
    ("avro-schema-does-not-parse", _with_model(MODEL.replace("model: json", "model: avro")),
     "value: {model: avro", "bindings.cs.options.topics[0].value.catalog.local",
     "not an Avro schema"),
    ("unknown-subject", _with_model(MODEL.replace("subject: items", "subject: things")),
     "value: {model: json", "bindings.cs.options.topics[0].value.catalog.local",
     "no subject 'things'"),
    ("unknown-catalog", _with_model(MODEL.replace("{local: [", "{remote: [")),
     "value: {model: json", "bindings.cs.options.topics[0].value.catalog.remote",
     "no catalog 'remote' under `catalogs`"),
    ("json-without-catalog", _with_model(MODEL.replace(
        ", catalog: {local: [{subject: items}]}", "")), "value: {model: json",
     "bindings.cs.options.topics[0].value", "a json model needs a `catalog`"),
    ("missing-schema-file", _with_model(catalogs="catalogs:\n  local:\n    type: filesystem\n"
                                        "    options:\n      subjects:\n"
                                        "        items: {path: schemas/items.json}\n"),
     "items: {path: schemas/items.json}", "catalogs.local.options.subjects.items.path",
     "cannot read"),
    ("registry-url", _with_model(catalogs="catalogs:\n  local:\n    type: schema-registry\n"
                                 "    options: {url: 'localhost:8081'}\n"),
     "url: 'localhost:8081'", "catalogs.local.options.url", "an http(s) URL"),
    ("two-schemas", _with_model(MODEL.replace("[{subject: items}]",
                                              "[{subject: items}, {subject: other}]")),
     "value: {model: json", "bindings.cs.options.topics[0].value.catalog.local",
     "exactly one schema"),
    ("proto-that-is-not-read", _with_write_model(catalogs=PROTOS.replace("request", "broken")),
     "value: {model: protobuf", "bindings.cc.options.topics[0].value.catalog.protos",
     "broken.proto:3: unknown type 'Strin'"),
    ("proto-record-missing", _with_write_model(PROTO_MODEL.replace("Request", "Reply")),
     "value: {model: protobuf", "bindings.cc.options.topics[0].value.catalog.protos",
     "no message 'Reply'"),
    ("two-clients-two-models", _with_write_model(catalogs=OTHER_CLIENT + PROTOS),
     "- name: items # cc2", "bindings.cc2.options.topics[0]",
     "the same model as cc gives items (both exit to cs"),
    ("write-model-unknown-kind", _with_write_model(PROTO_MODEL.replace("protobuf", "thrift")),
     "value: {model: thrift", "bindings.cc.options.topics[0].value.model",
     "protobuf"),
]


@pytest.mark.parametrize("case,text,needle,path,says", BAD, ids=[r[0] for r in BAD])
def test_bad_catalogs_and_models_are_config_errors_with_file_and_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str, text: str, needle: str,
        path: str, says: str) -> None:
    (tmp_path / "broken.proto").write_text(
        'syntax = "proto3";\nmessage Request {\n  Strin message = 1;\n}\n')
    (tmp_path / "request.proto").write_text(
        'syntax = "proto3";\nmessage Request {\n  string message = 1;\n}\n')
    code, out = check(tmp_path, text, capsys)
    assert code == 1, out
    assert "Traceback" not in out
    config = tmp_path / "zilla.yaml"
    wanted = f"{config}:{line_of(text, needle)}: {path}"
    found = [line for line in out.splitlines() if wanted in line]
    assert found and says in found[0], f"{wanted!r} / {says!r} not in:\n{out}"


def test_good_catalogs_and_models_check(tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "schemas").mkdir()
    (tmp_path / "schemas" / "items.json").write_text('{"type": "object"}')
    text = _with_model(MODEL.replace("model: json, catalog: {local: [{subject: items}]}",
                                     "model: json, catalog: {files: [{subject: items}]}")
                       + "          key: {model: string}\n",
                       LOCAL + "  files:\n    type: filesystem\n    options:\n      subjects:\n"
                               "        items: {path: schemas/items.json, version: 3}\n"
                               "  sr:\n    type: schema-registry\n"
                               "    options: {url: 'http://127.0.0.1:9', context: shop, "
                               "cache-ttl: 5, max-age: 5}\n")
    code, out = check(tmp_path, text, capsys)
    assert code == 0, out


def test_cache_clients_giving_a_topic_the_same_model_or_its_cache_server_its_own_check(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two cache_clients of one cache_server may give a topic the same model (its cache reads
    it with that one); a cache_client's model that differs from the cache_server's own is no
    error either: the cache_server's is the one its cache reads with."""
    (tmp_path / "request.proto").write_text(
        'syntax = "proto3";\nmessage Request {\n  string message = 1;\n}\n')
    same = OTHER_CLIENT.replace("protobuf, ", "protobuf, view: json, ")
    code, out = check(tmp_path, _with_write_model(catalogs=same + PROTOS), capsys)
    assert code == 0, out
    own = BASE + KAFKA.replace("    kind: cache_server\n    exit: kc\n",
                               "    kind: cache_server\n    exit: kc\n" + MODEL) \
        .replace("    kind: cache_client\n    exit: cs\n",
                 "    kind: cache_client\n    exit: cs\n" + PROTO_MODEL) + OTHER_CLIENT + \
        LOCAL + PROTOS.removeprefix("catalogs:\n")
    code, out = check(tmp_path, own, capsys)
    assert code == 0, out
