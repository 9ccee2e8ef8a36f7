"""docs/zilla-examples.md stays true: it names each of Zilla's examples (aklivity/zilla
`examples/` at the commit the page names) once; those kept as test data are rows that say they
run, with tests that exist and that start that example; and the README points to the page."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.support.zilla_examples import COMMIT, EXAMPLES

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "zilla-examples.md"
#: Every example of aklivity/zilla `examples/` at `COMMIT`.
ALL = frozenset("""
amqp.reflect asyncapi.http.kafka.proxy asyncapi.mqtt.kafka.proxy asyncapi.mqtt.proxy
asyncapi.sse.kafka.proxy asyncapi.sse.proxy grpc.echo grpc.kafka.echo grpc.kafka.fanout
grpc.kafka.proxy grpc.proxy http.echo http.filesystem http.json.schema http.kafka.async
http.kafka.avro.json http.kafka.cache http.kafka.crud http.kafka.oneway.oauthbearer
http.kafka.oneway http.kafka.proto.json http.kafka.proto.oneway http.kafka.sync http.metrics
http.proxy.jwt http.proxy mcp.proxy mqtt.kafka.proxy mqtt.proxy.jwt openapi.asyncapi.kakfa.proxy
openapi.proxy sse.kafka.fanout.jwt sse.kafka.fanout sse.proxy.jwt tcp.echo tcp.reflect tls.echo
tls.reflect ws.echo ws.proxy ws.reflect
""".split())
_ROW = re.compile(r"^\| ([a-z0-9., ]+) \|(.*)$", re.MULTILINE)
_TEST = re.compile(r"`(tests/[\w/]+\.py)?::(\w+)`")


def rows() -> dict[str, str]:
    """example -> the rest of its row."""
    found: dict[str, str] = {}
    for m in _ROW.finditer(PAGE.read_text(encoding="utf-8")):
        for name in m.group(1).split(","):
            name = name.strip()
            if name in ("example",):
                continue
            assert name not in found, f"{name} named twice"
            found[name] = m.group(2)
    return found


def test_the_page_names_every_example_once_and_the_commit() -> None:
    text = PAGE.read_text(encoding="utf-8")
    assert COMMIT[:10] in text
    assert set(rows()) == ALL


def test_each_example_kept_as_test_data_runs_and_names_tests_that_start_it() -> None:
    found = rows()
    kept = sorted(p.name for p in EXAMPLES.iterdir() if p.is_dir())
    assert kept and set(kept) <= ALL
    for name in kept:
        row = found[name]
        assert "**runs**" in row, f"{name}: kept as test data but not said to run"
        tests = _TEST.findall(row)
        assert tests, f"{name}: no test named"
        file = ""
        for given, test in tests:
            file = given or file
            source = (ROOT / file).read_text(encoding="utf-8")
            names = {n.name for n in ast.parse(source).body if isinstance(n, ast.FunctionDef)}
            assert test in names, f"{name}: no {test} in {file}"
            assert f'"{name}"' in source, f"{name}: {file} never starts it"


def test_the_readme_points_to_the_page() -> None:
    assert "](docs/zilla-examples.md)" in (ROOT / "README.md").read_text(encoding="utf-8")
