"""Which binding and guard types are installed: entry-point discovery, done once and handed to
the config loader and the engine.

Each entry point of the `ssekd.bindings` group names a module's `BINDING` (a `BindingType`), each
of `ssekd.guards` a module's `GUARD` (a `GuardType`). A type whose module fails to import is kept
aside with the reason, so a broken plugin stops only the configs that use it, and they say why.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from importlib.metadata import entry_points
from typing import Any

from ssekd.config.model import Binding
from ssekd.spi.binding import BindingType, GuardType, KindSpec

GROUP = "ssekd.bindings"
GUARDS_GROUP = "ssekd.guards"


@dataclass(frozen=True)
class Registry:
    """The binding types a config may use, by name."""

    types: Mapping[str, BindingType]
    #: Types that are registered but failed to load, with the reason.
    broken: Mapping[str, str] = field(default_factory=dict)

    def kind(self, binding: Binding) -> KindSpec:
        """The spec of a binding that passed schema validation (so its type and kind exist)."""
        return self.types[binding.type].kinds[binding.kind]


@dataclass(frozen=True)
class GuardTypes:
    """The guard types a config may use, by name."""

    types: Mapping[str, GuardType]
    #: Types that are registered but failed to load, with the reason.
    broken: Mapping[str, str] = field(default_factory=dict)


def load_entry_points(group: str) -> tuple[dict[str, Any], dict[str, str]]:
    """What each entry point of `group` names, by its `name` attribute, and the entry points
    that failed to load, with the reason."""
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
    """The binding types registered under the entry point `group`."""
    found, broken = load_entry_points(group)
    return Registry(found, broken)


@cache
def discover_guards(group: str = GUARDS_GROUP) -> GuardTypes:
    """The guard types registered under the entry point `group`."""
    found, broken = load_entry_points(group)
    return GuardTypes(found, broken)
