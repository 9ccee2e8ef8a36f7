"""CHANGELOG.md keeps Keep a Changelog's shape: an Unreleased section on top, then each release
with its date, its changes under Added, Changed, Deprecated, Removed, Fixed or Security,
described as capabilities (no heading names an issue), and the newest release is the version
pyproject.toml gives the package."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHANGELOG = ROOT / "CHANGELOG.md"
KINDS = ("Added", "Changed", "Deprecated", "Removed", "Fixed", "Security")


def test_the_changelog_has_keep_a_changelogs_shape() -> None:
    text = CHANGELOG.read_text(encoding="utf-8")
    releases = re.findall(r"^## \[([^\]]+)\](?: - (\d{4}-\d{2}-\d{2}))?$", text, re.MULTILINE)
    assert releases[0] == ("Unreleased", ""), releases
    assert len(releases) >= 2 and all(date for _, date in releases[1:]), releases
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert releases[1][0] == version
    for heading in re.findall(r"^### (.+)$", text, re.MULTILINE):
        assert heading in KINDS, heading
    assert not re.search(r"^#.*\bissue \d+", text, re.MULTILINE | re.IGNORECASE)
    for name, _ in releases:  # each release has its link at the foot
        assert re.search(rf"^\[{re.escape(name)}\]: https://", text, re.MULTILINE), name
