"""Request paths the filesystem binding accepts, and every way out of its root it refuses."""

from __future__ import annotations

import pytest

from ssekd.bindings.filesystem import safe_segments


@pytest.mark.parametrize("path,ok", [
    ("index.html", True), ("docs/", True), ("a%20b.txt", True), ("", True),
    ("../x", False), ("%2e%2e/x", False), ("a/../../x", False), ("/etc/passwd", False),
    ("%2fetc", False), ("a\\..\\b", False), ("%00", False), ("%ff", False), ("./x", False),
])
def test_safe_segments(path: str, ok: bool) -> None:
    assert (safe_segments(path) is not None) == ok
