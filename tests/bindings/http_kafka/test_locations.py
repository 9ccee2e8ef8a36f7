"""Async locations bound to what issued them (`locations.py`): the token in a location answers
only for the params it was issued for, the identity that asked, and the key that signed it; the
correlation part never reaches a log line."""

from __future__ import annotations

import pytest

from ssekd.bindings.http_kafka.locations import LocationSigner, LocationTemplate

SIGNER = LocationSigner("hk0", b"k" * 32)
TEMPLATE = LocationTemplate.compile("/items/${params.id};cid=${correlationId}")
CORRELATION = "3f96592e-c8f1-4167-8c46-85f2aabb70a5-ee284177921a96f23e9b3166f12ca058"


def location(correlation: str = CORRELATION, item: str = "a1",
             identities: dict[str, str] | None = None) -> str:
    token = SIGNER.token(correlation, TEMPLATE.names, {"id": item}, identities or {})
    return f"/items/{item};cid={token}"


def resolve(path: str, identities: dict[str, str] | None = None,
            signer: LocationSigner = SIGNER) -> str | None:
    found = TEMPLATE.match(path)
    assert found is not None, path
    token, params = found
    return signer.correlation(token, TEMPLATE.names, params, identities or {})


def test_a_location_names_its_correlation_id_for_the_path_it_was_issued_for() -> None:
    assert TEMPLATE.names == ("id",)
    assert resolve(location()) == CORRELATION


def test_the_same_token_under_another_item_is_no_location() -> None:
    """`{id}` is checked against the request that made the location."""
    issued = location(item="a1")
    assert resolve(issued.replace("/items/a1;", "/items/b2;")) is None


def test_on_a_guarded_route_only_the_identity_that_asked_may_read_it() -> None:
    issued = location(identities={"jwt0": "alice"})
    assert resolve(issued, {"jwt0": "alice"}) == CORRELATION
    assert resolve(issued, {"jwt0": "bob"}) is None
    assert resolve(issued, {"jwt0": ""}) is None


@pytest.mark.parametrize("token", ["", ".", "x", CORRELATION, f"{CORRELATION}.",
                                   f"{CORRELATION}.AAAAAAAAAAAAAAAAAAAAAA", "%ZZ.x"])
def test_a_token_nobody_issued_is_no_location(token: str) -> None:
    path = f"/items/a1;cid={token}"
    found = TEMPLATE.match(path)
    if found is not None:
        assert SIGNER.correlation(found[0], TEMPLATE.names, found[1], {}) is None


def test_another_key_or_another_binding_does_not_accept_it() -> None:
    issued = location()
    assert resolve(issued, signer=LocationSigner("hk0", b"o" * 32)) is None
    assert resolve(issued, signer=LocationSigner("hk1", b"k" * 32)) is None
    assert resolve(issued, signer=LocationSigner("hk0", b"k" * 32)) == CORRELATION


@pytest.mark.parametrize("key", ["a/b", "a;cid=b", "100%", "a.b.c", "a?b#c", "~!$&'()*+,=:@"])
def test_any_visible_idempotency_key_keeps_the_location_one_path(key: str) -> None:
    correlation = f"{key}-ee284177921a96f23e9b3166f12ca058"
    issued = location(correlation)
    assert issued.count("/") == 2 and "?" not in issued and "#" not in issued
    assert resolve(issued) == correlation


def test_values_cannot_shift_into_each_other() -> None:
    """The MAC's input keeps each value's bounds: moving text from one param (or the
    identity) to the next makes another tag."""
    two = LocationTemplate.compile("/x/${params.a}/${params.b};${correlationId}")
    one = SIGNER.token(CORRELATION, two.names, {"a": "1\x00b=2", "b": ""}, {})
    other = SIGNER.token(CORRELATION, two.names, {"a": "1", "b": "2\x00b="}, {})
    assert one != other
    assert SIGNER.token(CORRELATION, two.names, {"a": "1", "b": "2"}, {"g": "x"}) != \
        SIGNER.token(CORRELATION, two.names, {"a": "1", "b": "2x"}, {"g": ""})


def test_the_correlation_part_never_reaches_a_log_line() -> None:
    issued = location()
    assert TEMPLATE.redact(issued) == "/items/a1;cid=…"
    assert TEMPLATE.redact(issued + "?x=1") == "/items/a1;cid=…?x=1"
    assert TEMPLATE.redact("/items/a1") == "/items/a1"
