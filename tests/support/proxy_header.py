"""PROXY protocol headers as a balancer writes them (HAProxy's `send-proxy` and
`send-proxy-v2`), for the tests that play the balancer."""

from __future__ import annotations

import ipaddress
import socket
import struct

#: The 12 bytes every version 2 header starts with (the protocol's specification).
V2_SIGNATURE = b"\r\n\r\n\x00\r\nQUIT\n"


def v1(client: str, port: int = 51000, to: str = "192.0.2.1", to_port: int = 443) -> bytes:
    family = "TCP4" if ipaddress.ip_address(client).version == 4 else "TCP6"
    return f"PROXY {family} {client} {to} {port} {to_port}\r\n".encode()


def v2(client: str, port: int = 51000, to: str = "", to_port: int = 443,
       local: bool = False) -> bytes:
    """A version 2 `PROXY` header over TCP (no TLVs); `local`: the `LOCAL` command a balancer
    sends on its own connections (health checks), naming nobody."""
    if local:
        return V2_SIGNATURE + bytes([0x20, 0x00]) + struct.pack("!H", 0)
    if ipaddress.ip_address(client).version == 4:
        af, family, to = socket.AF_INET, 0x11, to or "192.0.2.1"
    else:
        af, family, to = socket.AF_INET6, 0x21, to or "2001:db8::1"
    body = socket.inet_pton(af, client) + socket.inet_pton(af, to) + struct.pack(
        "!HH", port, to_port)
    return V2_SIGNATURE + bytes([0x21, family]) + struct.pack("!H", len(body)) + body
