"""Which server key covers a requested server name: exact names and one-level wildcards."""

from __future__ import annotations

from ssekd.bindings.tls import ServerKey


def test_sni_matching_covers_exact_and_wildcard_names() -> None:
    key = ServerKey("k", ("a.example", "*.b.example"), None)  # type: ignore[arg-type]
    assert key.covers("a.example")
    assert key.covers("x.b.example")
    assert not key.covers("b.example")
    assert not key.covers("y.x.b.example")
