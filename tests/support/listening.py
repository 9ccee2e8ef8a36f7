"""What a tree of processes listens on, as the kernel says (Linux's /proc): the TCP sockets in
LISTEN state that the processes hold, by address and port. Read from outside the processes, so a
helper that opens a socket nobody expected (a second port, a wildcard address) is seen too."""

from __future__ import annotations

import ipaddress
import os
import sys
from collections.abc import Iterable
from pathlib import Path

#: /proc/net/tcp's state of a listening socket.
LISTEN = "0A"


def descendants(pid: int) -> list[int]:
    """Every process whose parent chain leads to `pid`, whatever its session or group."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue  # gone meanwhile
        # `pid (comm) state ppid ...`: comm may hold spaces and parentheses
        fields = text[text.rindex(")") + 2:].split()
        parents[int(stat.parent.name)] = int(fields[1])
    found: list[int] = []
    todo = [pid]
    while todo:
        parent = todo.pop()
        children = [p for p, pp in parents.items() if pp == parent and p not in found]
        found += children
        todo += children
    return found


def _address(hex_address: str) -> tuple[str, int]:
    """`0100007F:1BCA` (IPv4) or 32 hex digits and a port (IPv6), each 32-bit word in the
    machine's byte order, as /proc/net/tcp and tcp6 write them."""
    host, port = hex_address.split(":")
    raw = bytes.fromhex(host)
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4)) \
        if sys.byteorder == "little" else raw
    return str(ipaddress.ip_address(words)), int(port, 16)


def listening(pids: Iterable[int]) -> set[tuple[str, int]]:
    """(address, port) of each listening TCP socket the processes `pids` hold."""
    inodes: set[str] = set()
    for pid in pids:
        try:
            fds = list(Path(f"/proc/{pid}/fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[len("socket:["):-1])
    found: set[tuple[str, int]] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == LISTEN and fields[9] in inodes:
                found.add(_address(fields[1]))
    return found


def is_loopback(host: str) -> bool:
    """Whether `host` is an address of this machine alone (127.0.0.0/8, ::1)."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
