"""The tcp binding's port option: single ports, ranges and lists, and what is refused; a
connection that no route takes."""

from __future__ import annotations

import ipaddress

import pytest
from twisted.internet.address import IPv4Address

from ssekd.bindings.connection_limits import ConnectionLimits, OpenConnections
from ssekd.bindings.tcp import Condition, TcpRoute, TcpServer, expand_ports
from ssekd.telemetry.events import EventLog


def test_expand_ports() -> None:
    assert expand_ports(7114) == [7114]
    assert expand_ports("8080-8082") == [8080, 8081, 8082]
    assert expand_ports([7143, "7114-7115", 7143]) == [7143, 7114, 7115]
    for bad in ("9-1", 0, "70000", "1-70000"):
        with pytest.raises(ValueError):
            expand_ports(bad)


def test_a_connection_no_route_takes_is_closed_and_said() -> None:
    """A route for some peers only, no `exit`: another peer's connection is closed, and an
    event says so (before, it was reset with nothing logged)."""
    events = EventLog("t")
    nowhere = TcpServer("tcp0", "127.0.0.1", [7114],
                        [TcpRoute((Condition(None, ipaddress.ip_network("10.0.0.0/8")),),
                                  exit=None)],  # type: ignore[arg-type]  # never reached
                        None, ConnectionLimits(10), events, OpenConnections(10))
    assert nowhere.build_protocol(7114, IPv4Address("TCP", "192.0.2.7", 50000)) is None
    [line] = events.recent
    assert "BINDING_TCP_NO_ROUTE 192.0.2.7 to port 7114: no route takes it, closed" in line
