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


@pytest.mark.parametrize("path", [
    ".env", ".git/config", "docs/.secret", "%2eenv", "docs/%2Egit/HEAD", ".well-known/x",
])
def test_dotfiles_are_refused_unless_allowed(path: str) -> None:
    assert safe_segments(path) is None
    assert safe_segments(path, dotfiles=True) is not None


@pytest.mark.parametrize("path", ["docs%2findex.html", "docs%2Findex.html", "a%5cb", "%2F",
                                  "docs/%2e%2e%2f%2e%2e%2fsecret.txt"])
def test_an_encoded_slash_or_backslash_never_joins_segments(path: str) -> None:
    """The README promised `%2f` is 404: it was decoded before the split and served."""
    assert safe_segments(path) is None
    assert safe_segments(path, dotfiles=True) is None


def test_dot_segments_stay_refused_with_dotfiles_allowed() -> None:
    for path in ("..", "a/../b", "%2e%2e/x", ".", "./x", "a/%2e/b"):
        assert safe_segments(path, dotfiles=True) is None, path
