"""The tcp binding's port option: single ports, ranges and lists, and what is refused; a
connection that no route takes; routes by `cidr`, and a route on `authority` refused."""

from __future__ import annotations

import ipaddress
import socket
from pathlib import Path
from typing import Any

import pytest
from twisted.internet.address import IPv4Address
from twisted.internet.testing import MemoryReactorClock

from ssekd.bindings.connection_limits import ConnectionLimits, OpenConnections
from ssekd.bindings.tcp import Condition, TcpRoute, TcpServer, expand_ports
from ssekd.config import ConfigError
from ssekd.engine import Engine
from ssekd.telemetry.events import EventLog
from tests.support.static_site import write_site


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


@pytest.mark.daemon
def test_tcp_route_by_cidr(tmp_path: Path, run_daemon: Any, port: int) -> None:
    config = write_site(tmp_path)
    text = config.read_text()
    for cidr, served in (("127.0.0.0/8", True), ("10.0.0.0/8", False)):
        config.write_text(text.replace(
            "    exit: http0\n",
            f"    routes:\n      - when: [{{cidr: {cidr}}}]\n        exit: http0\n", 1))
        daemon = run_daemon(config, env={"HTTP_PORT": str(port)}, wait_ports=[port])
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            try:
                s.sendall(b"GET /index.html HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n" % port)
                answer = s.recv(4096)
            except ConnectionResetError:
                answer = b""  # closed at once: no route for this peer
        assert answer.startswith(b"HTTP/1.1 200") if served else answer == b"", (cidr, answer)
        daemon.stop()


TCP_AUTHORITY = """\
name: t
bindings:
  tcp0:
    type: tcp
    kind: server
    options: {port: 7114}
    routes:
      - when:
          - port: 7114
          - authority: example.com
        exit: http0
  http0:
    type: http
    kind: server
    exit: files_map
  files_map:
    type: http-filesystem
    kind: proxy
    routes: [{when: [{path: "/{p}"}], exit: files, with: {path: "${params.p}"}}]
  files: {type: filesystem, kind: server, options: {location: .}}
"""


def test_tcp_route_on_authority_is_refused_at_its_line(tmp_path: Path) -> None:
    """At accept there is no host name to match (no SNI, no Host header yet): a route on
    `authority` would have matched every connection, so the config is refused instead."""
    config = tmp_path / "zilla.yaml"
    config.write_text(TCP_AUTHORITY)
    with pytest.raises(ConfigError) as caught:
        Engine(config, reactor=MemoryReactorClock(), environ={})
    (issue,) = caught.value.issues
    assert (issue.file, issue.line) == (config, 10), str(caught.value)
    assert issue.path == "bindings.tcp0.routes[0].when[1].authority"
    assert "tcp routes cannot match authority" in issue.message
