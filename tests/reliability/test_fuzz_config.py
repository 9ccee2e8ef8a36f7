"""The whole config path - read, substitute, schema, model, references and building every
binding - on hostile configs: random zilla-shaped documents (every binding type, random kinds,
options, routes, exits, vaults) and random edits of working configs (lines dropped, repeated,
re-indented, anchors and aliases, `${{ env.X }}` with hostile values). Each is a running graph
or a `ConfigError`, never another exception. `tests/test_config_hostile.py` covers the YAML
reader itself (aliases, nesting, huge files, random text).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st
from twisted.internet.testing import MemoryReactorClock

from ssekd.config import ConfigError
from ssekd.engine import Engine
from ssekd.spi.plugins import discover
from ssekd.telemetry.events import EventLog
from tests.support import faults as harness
from tests.support import fuzzing
from tests.support import zilla_config as zc
from tests.support.faults import time_limit

pytestmark = pytest.mark.timeout(time_limit())

REGISTRY = discover()
TYPES = ["tcp", "tls", "http", "sse", "sse-kafka", "http-filesystem", "filesystem", "kafka"]
KINDS = ["server", "client", "proxy", "cache_client", "cache_server", "remote_server"]
NAMES = st.sampled_from(["a", "b", "c", "tcp", "http", "sse", "k", "vault0"]) | fuzzing.TEXT
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-(2 ** 70), 2 ** 70),
                    st.floats(allow_nan=True), fuzzing.TEXT,
                    st.sampled_from(["${params.topic}", "${{ env.X }}", "/events/{topic}",
                                     "127.0.0.1", "0.0.0.0", "h2", "http/1.1", "live",
                                     "earliest", "pkcs12", "../..", "/"]))
OPTION_KEYS = st.sampled_from(["host", "port", "keys", "sni", "alpn", "versions", "limits",
                               "access-control", "location", "servers", "properties",
                               "topics", "cache", "max-topics", "bootstrap", "retry",
                               "max-idle-time", "store", "trust", "password", "sasl",
                               "header-bytes", "body-bytes", "policy", "mutual"]) | fuzzing.TEXT
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(OPTION_KEYS, inner, max_size=4)), max_leaves=12)


@st.composite
def documents(draw: st.DrawFn) -> dict[str, Any]:
    names = draw(st.lists(NAMES, min_size=1, max_size=5, unique=True))
    bindings: dict[str, Any] = {}
    for name in names:
        b: dict[str, Any] = {"type": draw(st.sampled_from(TYPES) | fuzzing.TEXT),
                             "kind": draw(st.sampled_from(KINDS) | fuzzing.TEXT)}
        if draw(st.booleans()):
            b["options"] = draw(st.dictionaries(OPTION_KEYS, VALUES, max_size=5))
        if draw(st.booleans()):
            b["exit"] = draw(st.sampled_from(names) | fuzzing.TEXT)
        if draw(st.booleans()):
            b["routes"] = draw(st.lists(st.fixed_dictionaries(
                {"exit": st.sampled_from(names) | fuzzing.TEXT},
                optional={"when": st.lists(st.dictionaries(
                    st.sampled_from(["path", "port", "headers", "authority", "cidr", "method"]),
                    VALUES, max_size=2), max_size=2),
                    "with": st.dictionaries(st.sampled_from(["topic", "filters", "event",
                                                             "path"]), VALUES, max_size=2),
                    "guarded": VALUES}), max_size=3))
        if draw(st.integers(0, 5)) == 0:
            b["vault"] = draw(NAMES)
        if draw(st.integers(0, 5)) == 0:
            b[draw(fuzzing.TEXT)] = draw(VALUES)
        bindings[name] = b
    doc: dict[str, Any] = {"name": draw(st.sampled_from(["t", ""]) | fuzzing.TEXT),
                           "bindings": bindings}
    if draw(st.booleans()):
        doc["vaults"] = draw(st.dictionaries(NAMES, st.fixed_dictionaries(
            {"type": st.sampled_from(["filesystem"]) | fuzzing.TEXT},
            optional={"options": VALUES}), max_size=2))
    if draw(st.integers(0, 3)) == 0:
        doc["guards"] = draw(st.dictionaries(NAMES, VALUES, max_size=2))
    if draw(st.booleans()):
        doc["telemetry"] = draw(st.one_of(VALUES, st.just({"exporters": {"stdout": {
            "type": "stdout"}}})))
    return doc


def build(path: Path, environ: dict[str, str]) -> str:
    """Build the graph of `path` as twistd would (not started): "ok" or "ConfigError"."""
    try:
        Engine(path, reactor=MemoryReactorClock(), registry=REGISTRY, environ=environ,
               events=EventLog("fuzz"), print_events=False)
    except ConfigError:
        return "ConfigError"
    return "ok"


def test_random_zilla_shaped_documents(tmp_path: Path) -> None:
    path = tmp_path / "zilla.yaml"
    counts = {"ok": 0, "ConfigError": 0}
    slowest = [0.0]

    @fuzzing.examples(800, 15000)
    @given(documents())
    def case(doc: dict[str, Any]) -> None:
        path.write_text(yaml.safe_dump(doc, allow_unicode=True))
        started = time.thread_time()
        counts[build(path, {"X": "1"})] += 1
        slowest[0] = max(slowest[0], time.thread_time() - started)

    case()
    print(f"\nconfig, random documents: {sum(counts.values())} cases {counts}, slowest "
          f"{slowest[0] * 1000:.0f} ms of CPU")


WORKING = [
    zc.dump(harness.config("127.0.0.1:9092", 7114, idle=5, header_timeout=10,
                           cache_messages=1000)),
    zc.dump(fuzzing.config("127.0.0.1:9092", 7114)),
]


@st.composite
def edited(draw: st.DrawFn) -> str:
    lines = draw(st.sampled_from(WORKING)).splitlines()
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, len(lines) - 1))
        op = draw(st.sampled_from(["drop", "repeat", "indent", "dedent", "swap", "replace",
                                   "anchor", "env", "insert"]))
        line = lines[i]
        if op == "drop":
            del lines[i]
        elif op == "repeat":
            lines.insert(i, line)
        elif op == "indent":
            lines[i] = "  " + line
        elif op == "dedent":
            lines[i] = line[2:]
        elif op == "swap":
            j = draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], line
        elif op == "replace":
            words = line.split(" ")
            k = draw(st.integers(0, len(words) - 1))
            words[k] = draw(st.one_of(fuzzing.TEXT, st.sampled_from(
                ["*a", "&a", "{", "[", "]", "}", ":", "-", "!!python/object", "~", "null",
                 "99999999999999999999", "-1", "0", "${{ env.X }}", '"', "'", "#"])))
            lines[i] = " ".join(words)
        elif op == "anchor":
            lines[i] = line.replace(": ", ": &a ", 1) if draw(st.booleans()) \
                else line.replace(": ", ": *a ", 1)
        elif op == "env":
            lines[i] = line.replace(": ", ": ${{ env.X }}", 1)
        else:
            lines.insert(i, draw(fuzzing.TEXT))
        if not lines:
            break
    return "\n".join(lines) + "\n"


def test_edits_of_working_configs(tmp_path: Path) -> None:
    path = tmp_path / "zilla.yaml"
    counts = {"ok": 0, "ConfigError": 0}

    @fuzzing.examples(800, 15000)
    @given(edited(), st.one_of(st.just("1"), fuzzing.TEXT, st.sampled_from(
        ["a\nadmin: true", "}", "*a", "${{ env.X }}", "0" * 5000])))
    def case(text: str, value: str) -> None:
        path.write_text(text)
        counts[build(path, {"X": value})] += 1

    case()
    print(f"\nconfig, edited working configs: {sum(counts.values())} cases {counts}")
    assert counts["ok"] > 0  # the edits leave some configs working, so building is reached
