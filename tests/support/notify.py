"""What systemd listens on for a `Type=notify` service: a Unix datagram socket (`$NOTIFY_SOCKET`)
that also receives each sender's credentials, as systemd does to know which process spoke."""

from __future__ import annotations

import array
import socket
import time
from pathlib import Path


class NotifySocket:
    """What systemd listens on for a `Type=notify` service: a Unix datagram socket that also
    receives each sender's credentials (SO_PASSCRED), as systemd does to know who spoke."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        #: (sender pid, assignments) in arrival order, and how many `wait_for` went past.
        self.messages: list[tuple[int, dict[str, str]]] = []
        self.taken = 0

    def receive(self, timeout: float) -> None:
        self.sock.settimeout(timeout)
        size = array.array("i").itemsize * 3
        while True:
            try:
                data, ancillary, _, _ = self.sock.recvmsg(4096, socket.CMSG_SPACE(size))
            except TimeoutError:
                return
            pid = 0
            for level, kind, payload in ancillary:
                if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                    pid = array.array("i", payload[:size])[0]
            pairs = (line.partition("=") for line in data.decode().splitlines())
            self.messages.append((pid, {k: v for k, _, v in pairs}))
            self.sock.settimeout(0.2)

    def wait_for(self, key: str, timeout: float = 20.0) -> dict[str, str]:
        """The next message (after the one the last call returned) that sets `key`."""
        deadline = time.monotonic() + timeout
        while True:
            for i in range(self.taken, len(self.messages)):
                if key in self.messages[i][1]:
                    self.taken = i + 1
                    return self.messages[i][1]
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no {key} in {self.messages[self.taken:]}")
            self.receive(min(1.0, left))

    def close(self) -> None:
        self.sock.close()
