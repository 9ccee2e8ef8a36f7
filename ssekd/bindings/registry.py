"""Which binding types are installed: entry-point discovery, done once and handed to the config
loader and the engine.

Each entry point of the `ssekd.bindings` group names a module's `BINDING`. A type whose module
fails to import is kept aside with the reason, so a broken plugin stops only the configs that
use it, and they say why.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from importlib.metadata import entry_points
from typing import Any

from ssekd.bindings.api import BindingType, KindSpec
from ssekd.config.model import Binding

GROUP = "ssekd.bindings"


@dataclass(frozen=True)
class Registry:
    """The binding types a config may use, by name."""

    types: Mapping[str, BindingType]
    #: Types that are registered but failed to load, with the reason.
    broken: Mapping[str, str] = field(default_factory=dict)

    def kind(self, binding: Binding) -> KindSpec:
        """The spec of a binding that passed schema validation (so its type and kind exist)."""
        return self.types[binding.type].kinds[binding.kind]


def load_entry_points(group: str) -> tuple[dict[str, Any], dict[str, str]]:
    """What each entry point of `group` names, by its `name` attribute, and the entry points
    that failed to load, with the reason (guard types are found the same way)."""
    found: dict[str, Any] = {}
    broken: dict[str, str] = {}
    for ep in entry_points(group=group):
        try:
            loaded = ep.load()
        except Exception as e:
            broken[ep.name] = f"{type(e).__name__}: {e}"
            continue
        found[loaded.name] = loaded
    return found, broken


@cache
def discover(group: str = GROUP) -> Registry:
    """The types registered under the entry point `group`."""
    found, broken = load_entry_points(group)
    return Registry(found, broken)
