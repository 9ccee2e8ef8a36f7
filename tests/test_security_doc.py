"""docs/security.md stays true: every test it names as proof exists, the README points to it, and
the `--uid` story (docs/getting-started.md, where the README sends a newcomer to run the daemon)
says what workers read after privileges are dropped."""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SECURITY = ROOT / "docs" / "security.md"
README = ROOT / "README.md"
#: Where the `--uid`/`--gid` paragraph is, beside the daemon's other options.
GETTING_STARTED = ROOT / "docs" / "getting-started.md"

#: `tests/x/test_y.py::test_z`, or `::test_z` for another test of the file named before it.
_CITED = re.compile(r"`(tests/[\w/]+\.py)?::(\w+)`")


@cache
def _tests_in(file: str) -> frozenset[str]:
    tree = ast.parse((ROOT / file).read_text(encoding="utf-8"))
    return frozenset(n.name for n in tree.body if isinstance(n, ast.FunctionDef))


def cited() -> list[tuple[str, str]]:
    """(file, test) for every test docs/security.md names, in order."""
    out: list[tuple[str, str]] = []
    file: str | None = None
    for m in _CITED.finditer(SECURITY.read_text(encoding="utf-8")):
        file = m.group(1) or file
        assert file is not None, f"::{m.group(2)} names no file before it"
        out.append((file, m.group(2)))
    return out


def test_every_test_the_security_page_names_exists() -> None:
    found = cited()
    assert len(found) > 30, "the page names too few tests to mean anything"
    missing = [f"{f}::{t}" for f, t in found
               if not (ROOT / f).is_file() or t not in _tests_in(f)]
    assert missing == [], f"docs/security.md names tests that do not exist: {missing}"


def test_the_readme_points_to_the_security_page() -> None:
    assert "](docs/security.md" in README.read_text(encoding="utf-8")


def test_the_uid_story_says_workers_read_the_key_stores_after_the_drop() -> None:
    """With `--workers`, the workers are started after twistd dropped privileges and read the
    key stores themselves: the `--uid` paragraph of getting started has to say so (issue 23)."""
    readme = GETTING_STARTED.read_text(encoding="utf-8")
    start = readme.index("With `--uid`/`--gid`, twistd starts as root")
    story = " ".join(readme[start:readme.index("\n\n", start)].split())
    assert "With `--workers`, the workers start after the drop" in story
    assert "key stores as that user" in story
    security = " ".join(SECURITY.read_text(encoding="utf-8").split())
    assert "each worker is a new process started after the drop" in security
