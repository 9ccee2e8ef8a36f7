"""What counts as the same origin for the http binding's same-origin policy."""

from __future__ import annotations

from ssekd.bindings.http.cors import same_origin


def test_same_origin_uses_default_ports() -> None:
    assert same_origin("http://localhost", "http", "localhost:80")
    assert same_origin("https://LOCALHOST:7143", "https", "localhost:7143")
    assert not same_origin("http://localhost:7143", "https", "localhost:7143")
    assert not same_origin("null", "http", "localhost:80")
    assert not same_origin("http://[::1", "http", "localhost:80")
