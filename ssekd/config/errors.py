"""Config errors that name the file, the line, the path and what was expected."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ConfigIssue:
    """One thing wrong with a config. `path` is dotted, with `[i]` for list items."""

    file: Path
    line: int | None
    path: str
    message: str
    #: True when the config is fine but this machine lacks something it names (a store file):
    #: `ssekd check` reports it as a warning, the daemon still refuses to start.
    environment: bool = False

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else str(self.file)
        return f"{where}: {self.path or '<root>'}: {self.message}"


class ConfigError(Exception):
    """The config cannot be used. Carries every issue found, in file order."""

    def __init__(self, issues: list[ConfigIssue]) -> None:
        self.issues = sorted(issues, key=lambda i: (i.line or 0, i.path))
        super().__init__("\n".join(str(i) for i in self.issues))


def format_path(parts: tuple[str | int, ...]) -> str:
    """`('bindings', 'tls', 'options', 'alpn', 1)` -> `bindings.tls.options.alpn[1]`."""
    out = ""
    for p in parts:
        if isinstance(p, int):
            out += f"[{p}]"
        else:
            out += f".{p}" if out else str(p)
    return out
