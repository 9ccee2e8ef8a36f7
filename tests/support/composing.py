"""For tests of the bindings composed from API specs (asyncapi, openapi, openapi-asyncapi): an
example's config and specs copied with text edits, the config loaded as the daemon loads it, and
what a config error says."""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Mapping
from pathlib import Path

import pytest
from twisted.internet.testing import MemoryReactorClock

from ssekd.config import ConfigError
from ssekd.config.load import load_config
from ssekd.config.model import Config
from ssekd.engine import Engine, Graph
from ssekd.spi.plugins import discover
from ssekd.telemetry.events import EventLog


def edited_copy(source: Path, folder: Path, files: Mapping[str, str],
                edits: Mapping[str, list[tuple[str, str]]]) -> Path:
    """`source` (an example's etc/) copied to `folder`, the files named in `files` (name ->
    path in it; `zilla` the config) each with its text edits (each must apply once); the
    config's path."""
    shutil.copytree(source, folder)
    for name, changes in edits.items():
        file = folder / files[name]
        text = file.read_text()
        for old, new in changes:
            assert text.count(old) == 1, (name, old)
            text = text.replace(old, new)
        file.write_text(text)
    return folder / files["zilla"]


def load(config: Path) -> Config:
    """The config as the daemon loads it (composed, checked)."""
    return load_config(config, discover())


def problems(config: Path) -> list[str]:
    """What loading the config refuses, issue by issue (`file:line: path: message`)."""
    with pytest.raises(ConfigError) as e:
        load(config)
    return [str(i) for i in e.value.issues]


def without_origin(config: Config) -> dict[str, object]:
    """The bindings without where they were composed from, to compare with a hand-written
    config's."""
    return {n: dataclasses.replace(b, origin=None) for n, b in config.bindings.items()}


class Rebuilds:
    """The engine of a config (on a memory reactor) and its builds after each edit of a spec,
    each from the one before: what a reload keeps (`reused`) is what the edit left alone."""

    def __init__(self, config: Path) -> None:
        self.config = config
        self.engine = Engine(config, reactor=MemoryReactorClock(), events=EventLog("t"),
                             print_events=False)
        built = self.engine.built
        assert built is not None
        self.first: Graph = built
        self.last = built

    def after(self, file: Path, old: str, new: str, count: int = -1) -> Graph:
        """`file` with `old` replaced by `new` (the first `count` times), then built again."""
        file.write_text(file.read_text().replace(old, new, count))
        self.last = self.engine._build(load(self.config), previous=self.last)
        return self.last
