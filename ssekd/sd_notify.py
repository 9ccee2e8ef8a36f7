"""Telling systemd how the daemon is doing (`Type=notify`): READY=1, RELOADING=1, STOPPING=1.

systemd gives a `Type=notify` service the path of a Unix datagram socket in `$NOTIFY_SOCKET`
(a path, or an abstract name written with a leading `@`); the service sends it newline-separated
`KEY=value` assignments (sd_notify(3)). That is a few lines of socket code, so there is no
dependency on libsystemd or a binding of it. Without `$NOTIFY_SOCKET` (not under systemd, or a
worker of the daemon, whose parent alone speaks for it) every call does nothing.

What ssekd says, and when (docs/operations.md, "Under systemd"):

- `READY=1` once it listens and serves (with workers: once every worker answered the parent);
- `RELOADING=1` with `MONOTONIC_USEC=` when a reload starts, `READY=1` when it is over (with a
  `STATUS=` saying whether the new config was taken);
- `STOPPING=1` when it starts to drain or stop.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Mapping

#: The variable systemd sets for a `Type=notify` service.
NOTIFY_SOCKET = "NOTIFY_SOCKET"


def address(environ: Mapping[str, str] | None = None) -> str | bytes | None:
    """Where to send notifications: a path, an abstract address (bytes starting with NUL), or
    None when the process is not asked to notify."""
    value = (os.environ if environ is None else environ).get(NOTIFY_SOCKET, "")
    if not value:
        return None
    if value.startswith("@"):
        return b"\0" + value[1:].encode("utf-8")
    if value.startswith("/"):
        return value
    return None  # vsock and other kinds ssekd does not speak: say nothing


def notify(*assignments: str, environ: Mapping[str, str] | None = None) -> bool:
    """Send `KEY=value` lines as one datagram; False when not under a notifying manager or
    when the socket refused it (systemd gone, say): a notification is never worth an error."""
    target = address(environ)
    if target is None:
        return False
    message = "\n".join(assignments).encode("utf-8")
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as s:
            s.connect(target)
            s.sendall(message)
    except OSError:
        return False
    return True


def ready(status: str | None = None, environ: Mapping[str, str] | None = None) -> bool:
    return notify("READY=1", *([f"STATUS={status}"] if status else []), environ=environ)


def reloading(environ: Mapping[str, str] | None = None) -> bool:
    """A reload starts. systemd (253 and later) wants the CLOCK_MONOTONIC time with it, to tell
    this reload from an earlier one."""
    usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    return notify("RELOADING=1", f"MONOTONIC_USEC={usec}", environ=environ)


def stopping(environ: Mapping[str, str] | None = None) -> bool:
    return notify("STOPPING=1", environ=environ)


def reload_announced(reload: Callable[[], object],
                     environ: Mapping[str, str] | None = None) -> bool:
    """Run `reload`, telling systemd `RELOADING=1` before and `READY=1` after, with whether the
    new config was taken (`systemctl reload` waits for the `READY=1`). True when it was."""
    reloading(environ)
    taken = False
    try:
        taken = bool(reload())
    finally:
        ready("config reloaded" if taken else "config not reloaded: see the events", environ)
    return taken


def without_notify_socket(environ: Mapping[str, str]) -> dict[str, str]:
    """`environ` for a child process that must not speak for the service (a worker)."""
    return {k: v for k, v in environ.items() if k != NOTIFY_SOCKET}
