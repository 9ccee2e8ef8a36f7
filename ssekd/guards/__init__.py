"""Which guard types are installed: entry-point discovery (group `ssekd.guards`), as for binding
types (`ssekd.bindings.registry`), so the engine builds a guard by its `type` without naming it.

Each entry point names a module's `GUARD`, a `ssekd.bindings.api.GuardType`. A type whose module
fails to import is kept aside with the reason, so only configs that use it stop, saying why.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache

from ssekd.bindings.api import GuardType
from ssekd.bindings.registry import load_entry_points

GROUP = "ssekd.guards"


@dataclass(frozen=True)
class GuardTypes:
    """The guard types a config may use, by name."""

    types: Mapping[str, GuardType]
    #: Types that are registered but failed to load, with the reason.
    broken: Mapping[str, str] = field(default_factory=dict)


@cache
def discover(group: str = GROUP) -> GuardTypes:
    """The guard types registered under the entry point `group`."""
    found, broken = load_entry_points(group)
    return GuardTypes(found, broken)
