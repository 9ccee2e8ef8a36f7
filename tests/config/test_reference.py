"""docs/config-reference.md is generated from the config schemas (`make docs`); these tests fail
when the committed page is stale, when a schema key has no description, or when a default
written in a JSON schema file drifts from the constant the code uses."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ssekd.config.model import DEFAULT_NAMESPACE
from ssekd.config.reference import render, rows, ssekd_types
from ssekd.config.schema import schema_files
from ssekd.spi.plugins import discover

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "config-reference.md"


def test_committed_reference_is_what_the_schemas_say() -> None:
    assert PAGE.read_text(encoding="utf-8") == render(), \
        "docs/config-reference.md is stale: run make docs"


def check(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ssekd.config.reference", "--check", str(path)],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)


def test_check_fails_on_a_page_edited_by_hand(tmp_path: Path) -> None:
    assert check(PAGE).returncode == 0
    edited = tmp_path / "config-reference.md"
    edited.write_text(PAGE.read_text(encoding="utf-8").replace("`15`", "`30`", 1),
                      encoding="utf-8")
    result = check(edited)
    assert result.returncode == 1
    assert "run make docs" in result.stderr


def test_rendering_twice_gives_the_same_page() -> None:
    assert render() == render()


def every_schema() -> Iterator[tuple[str, Any]]:
    for t in ssekd_types(discover()):
        for name, kind in t.kinds.items():
            yield f"{t.name} {name} options", kind.options
            if kind.when is not None:
                yield f"{t.name} {name} when", kind.when
            if kind.with_ is not None:
                yield f"{t.name} {name} with", kind.with_
    yield from schema_files().items()


def test_every_key_says_what_it_does() -> None:
    missing = [f"{where}: {row.path}" for where, schema in every_schema()
               for row in rows(schema, schema) if not row.schema.get("description")]
    assert not missing, "keys without a `description` in their schema:\n" + "\n".join(missing)


def test_every_kind_says_what_it_is() -> None:
    missing = [where for where, schema in every_schema()
               if where.endswith(" options") and not schema.get("description")]
    assert not missing


def test_defaults_in_schema_files_are_the_codes() -> None:
    zilla = schema_files()["ssekd:zilla"]
    assert zilla["properties"]["name"]["default"] == DEFAULT_NAMESPACE


def test_the_reference_names_every_kind_and_addition() -> None:
    page = render()
    for t in ssekd_types(discover()):
        for name in t.kinds:
            assert f"\n## {t.name} {name}\n" in page
    for key in ("options.limits.idle-timeout", "options.max-idle-time", "options.max-topics",
                "options.cache.max-bytes", "options.properties"):
        assert f"| `{key}` |" in page
