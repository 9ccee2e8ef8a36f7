"""A clean clone of this checkout for the tests that run what a newcomer runs (`make run`, the
README's commands), on ports nobody else uses.

The clone holds what `git clone` of the working tree would give (the tracked files and the new
ones `.gitignore` does not exclude, as they are now), with the venv made: `.venv` is a link to
this checkout's. The fixed ports of the shipped configs (7114, 7143, 9092, 7180, 7115, 7190) may be
in use by another daemon on a shared machine, so each is replaced by a free one in the clone's
`etc/*.yaml`, and `Ports.mapped` makes the same replacement in a command or in the output a
README promises: the commands run as the README shows them, on other numbers.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ssekd.dev.broker import free_port

ROOT = Path(__file__).resolve().parents[2]
#: The ports the shipped configs and the README use.
FIXED_PORTS = (7114, 7143, 9092, 7180, 7115, 7190)


def free_ports(count: int) -> list[int]:
    """`count` different ports free now (`free_port`'s, below the ephemeral range)."""
    ports: list[int] = []
    while len(ports) < count:
        port = free_port()
        if port not in ports:
            ports.append(port)
    return ports


@dataclass(frozen=True)
class Ports:
    """Fixed port -> the free port used instead."""

    by_fixed: dict[int, int]

    @classmethod
    def free(cls) -> Ports:
        return cls(dict(zip(FIXED_PORTS, free_ports(len(FIXED_PORTS)), strict=True)))

    def mapped(self, text: str) -> str:
        """`text` with each fixed port number replaced (as a whole number only)."""
        return re.sub(r"(?<![0-9])(7114|7143|9092|7180|7115|7190)(?![0-9])",
                      lambda m: str(self.by_fixed[int(m.group(1))]), text)

    def __getitem__(self, fixed: int) -> int:
        return self.by_fixed[fixed]


def tracked_files(root: Path = ROOT) -> list[str]:
    """The files a clone of the working tree would hold: tracked, and new but not ignored."""
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                         cwd=root, capture_output=True, check=True).stdout
    return [f for f in out.decode().split("\0") if f and (root / f).is_file()]


def clean_clone(dest: Path, ports: Ports) -> Path:
    """A clone of the checkout at `dest`, its venv linked, its configs on `ports`."""
    for name in tracked_files():
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, target)  # the times too: make must not think pyproject new
    (dest / ".venv").symlink_to(ROOT / ".venv")
    for config in (dest / "etc").glob("*.yaml"):
        config.write_text(ports.mapped(config.read_text()))
    return dest


def venv_is_current(clone: Path) -> bool:
    """Whether `make run` in the clone would install nothing: an install there would go into
    the linked venv of this checkout, and point it at the clone."""
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    planned = subprocess.run(["make", "-n", "-C", str(clone), "run"], capture_output=True,
                             text=True, check=True, env=env).stdout
    return "pip install" not in planned
