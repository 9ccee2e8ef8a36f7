"""`make run`'s launcher asks the binding kinds what to start (`KindSpec.connects_to`,
`KindSpec.bootstrap_topics`); it names no binding type, so a plugin's kinds count the same."""

from __future__ import annotations

from pathlib import Path

from ssekd.bindings.api import BindingType, KindSpec, Role
from ssekd.bindings.registry import Registry, discover
from ssekd.config.load import load_config
from ssekd.dev import bootstrap_topics, local_servers

CONFIG = """\
name: dev
bindings:
  cs: {type: kafka, kind: cache_server, options: {bootstrap: [a, b]}, exit: kc}
  cs2: {type: kafka, kind: cache_server, options: {bootstrap: [b, c]}, exit: kc2}
  kc: {type: kafka, kind: client, options: {servers: ["localhost:9092", "kafka.example:9092"]}}
  kc2: {type: kafka, kind: client, options: {servers: ["127.0.0.1:9092", "localhost:9093"]}}
  q0: {type: queue, kind: client, options: {at: "127.0.0.1:5672", topics: [d]}}
"""

QUEUE = BindingType("queue", {"client": KindSpec(
    role=Role.OUTBOUND, build=lambda ctx, b: object(), options={"type": "object"},
    connects_to=lambda o: [(str(o["at"]).split(":")[0], int(str(o["at"]).split(":")[1]))],
    bootstrap_topics=lambda o: list(o["topics"]))})


def test_what_make_run_starts_comes_from_the_kinds(tmp_path: Path) -> None:
    real = discover()
    registry = Registry({**real.types, "queue": QUEUE})
    config_file = tmp_path / "zilla.yaml"
    config_file.write_text(CONFIG)
    config = load_config(config_file, registry, environ={})
    assert local_servers(config, registry) == [("127.0.0.1", 9092), ("127.0.0.1", 9093),
                                               ("127.0.0.1", 5672)], \
        "local ones only, localhost as 127.0.0.1, each once"
    assert bootstrap_topics(config, registry) == ["a", "b", "c", "d"]
