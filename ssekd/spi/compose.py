"""Composite kinds (asyncapi): what a `KindSpec.compose` may use, and what it answers with.

The loader (`ssekd.config.compose`) replaces a composite binding with the ordinary bindings it
stands for before anything is built.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ssekd.config.errors import ConfigIssue
from ssekd.config.model import Config

#: A place in a file: (file, line), for errors about what a composed binding came from.
Where = tuple[Path, int | None]


@dataclass(frozen=True)
class Source:
    """Text a composite binding read through a catalog (an AsyncAPI spec), and where its lines
    are, so that a problem in it is reported at its own file and line."""

    text: str
    #: The file a problem is reported in: the schema file of a `filesystem` catalog, the config
    #: itself for an `inline` one, the subject's name for a `schema-registry` one.
    file: Path
    #: The line of `file` that the text's first line is (1 for a file of its own).
    first_line: int = 1
    #: The file to watch for changes (`--watch`), when the text is a file's.
    watch: Path | None = None


class ComposeContext(Protocol):
    """What a composite kind's `compose(ctx, binding)` may use."""

    @property
    def config(self) -> Config:
        """The config as written: composite bindings not composed yet."""

    def issue(self, path: tuple[str | int, ...], message: str) -> ConfigIssue:
        """A problem at `path` of the config as written, with its line."""

    def read(self, catalog: str, subject: str, version: str | int,
             path: tuple[str | int, ...]) -> Source:
        """The text of `subject` at `version` in catalog `catalog`. Raises `ConfigError` at
        `path` (where the config names it) when the catalog cannot give it."""


@dataclass
class Composition:
    """What a composite binding stands for: ordinary bindings (and catalogs), as a zilla.yaml
    would write them, with where each part came from."""

    #: Binding name -> the binding as zilla.yaml writes it. One has the composite's own name:
    #: the one its neighbours reach (exits to it, or the listener that starts its graph).
    bindings: dict[str, dict[str, Any]]
    #: Catalog name -> catalog entry (e.g. the message schemas of a spec, inline).
    catalogs: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: A path in the composed config -> where it came from (a spec's file and line): errors
    #: found later in a composed binding point there, not at generated text.
    where: dict[tuple[str | int, ...], Where] = field(default_factory=dict)
    #: Binding name -> what the composite says of it (`Binding.origin`), e.g. the spec
    #: operation each route stands for, read by the AsyncAPI document.
    origins: dict[str, Any] = field(default_factory=dict)
    #: Files read, for `--watch`.
    sources: list[Path] = field(default_factory=list)
    #: A line for `ssekd check`: what was composed from what.
    summary: str = ""
