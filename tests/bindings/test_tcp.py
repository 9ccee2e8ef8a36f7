"""The tcp binding's port option: single ports, ranges and lists, and what is refused."""

from __future__ import annotations

import pytest

from ssekd.bindings.tcp import expand_ports


def test_expand_ports() -> None:
    assert expand_ports(7114) == [7114]
    assert expand_ports("8080-8082") == [8080, 8081, 8082]
    assert expand_ports([7143, "7114-7115", 7143]) == [7143, 7114, 7115]
    for bad in ("9-1", 0, "70000", "1-70000"):
        with pytest.raises(ValueError):
            expand_ports(bad)
