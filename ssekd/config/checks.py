"""Checks of a whole config that no schema can make: names that must match a metric of ssekd,
attributes that must not take a label ssekd sets, vaults that must open though no binding uses
them yet. The engine runs them before it builds a graph.
"""

from __future__ import annotations

from ssekd.config.errors import ConfigError, ConfigIssue
from ssekd.config.model import Config
from ssekd.telemetry.metrics import known_names, label_name, matches
from ssekd.vaults import open_vault

#: Labels every metric carries or some carry: an attribute may not take their names.
RESERVED_LABELS = frozenset({"namespace", "binding", "topic", "partition", "route", "outcome",
                             "limit", "protocol", "le", "quantile"})


def telemetry_problems(config: Config) -> list[ConfigIssue]:
    """A `telemetry.metrics` entry (top level or a binding's) that matches no metric ssekd has
    is a mistake (a typo would otherwise silently export nothing); so is an attribute whose
    label name collides with one ssekd sets."""
    issues: list[ConfigIssue] = []
    names = known_names()
    lists: list[tuple[tuple[str | int, ...], tuple[str, ...]]] = []
    if config.telemetry.metrics is not None:
        lists.append((("telemetry", "metrics"), config.telemetry.metrics))
    for b in config.bindings.values():
        if b.metrics is not None:
            lists.append((("bindings", b.name, "telemetry", "metrics"), b.metrics))
    for base, patterns in lists:
        for i, pattern in enumerate(patterns):
            if not any(matches((pattern,), n) for n in names):
                issues.append(config.issue(base + (i,), f"{pattern!r} matches no metric of "
                                           f"ssekd; expected a name or glob of: "
                                           f"{', '.join(names)}"))
    for key in config.telemetry.attributes:
        if label_name(key) in RESERVED_LABELS:
            issues.append(config.issue(("telemetry", "attributes", key),
                                       f"attribute {key!r} would be the label "
                                       f"{label_name(key)!r}, which ssekd's metrics set "
                                       f"themselves; choose another name"))
    everywhere = {label_name(k) for k in config.telemetry.attributes}
    for b in config.bindings.values():
        for key in b.attributes:
            label = label_name(key)
            if label in RESERVED_LABELS or label in everywhere:
                whose = "ssekd's metrics" if label in RESERVED_LABELS else \
                    "telemetry.attributes (on every metric)"
                issues.append(config.issue(("bindings", b.name, "telemetry", "attributes", key),
                                           f"attribute {key!r} would be the label {label!r}, "
                                           f"which {whose} set already; choose another name"))
    return issues


def unused_vault_problems(config: Config, found: list[ConfigIssue]) -> list[ConfigIssue]:
    """Open the vaults no binding uses: a wrong password or a missing store is reported when
    the config is checked, not on the day a binding starts using the vault."""
    used = {b.vault for b in config.bindings.values() if b.vault}
    issues: list[ConfigIssue] = []
    for name in config.vaults:
        if name not in used:
            try:
                open_vault(config, name)
            except ConfigError as e:
                issues.extend(i for i in e.issues if i not in found)
    return issues

