"""Loading a zilla.yaml: read, substitute, validate against the schema, build the model, and
check every reference. `load_config` is the one entry point; it raises `ConfigError`."""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from importlib.metadata import entry_points
from pathlib import Path

from ssekd.bindings import BindingType
from ssekd.config.errors import ConfigError, ConfigIssue
from ssekd.config.load import Document, read_document
from ssekd.config.model import Binding, Config, Route, build_model
from ssekd.config.schema import validate

__all__ = [
    "Binding",
    "Config",
    "ConfigError",
    "ConfigIssue",
    "Route",
    "binding_types",
    "check_references",
    "load_config",
]


@cache
def binding_types() -> Mapping[str, BindingType]:
    """Binding types registered under the `ssekd.bindings` entry point group.

    A type whose module fails to import is left out (see `broken_binding_types`), so a broken
    plugin only stops configs that use it, and they say why.
    """
    found: dict[str, BindingType] = {}
    for ep in entry_points(group="ssekd.bindings"):
        try:
            binding_type = ep.load()
        except Exception as e:
            _broken[ep.name] = f"{type(e).__name__}: {e}"
            continue
        found[binding_type.name] = binding_type
    return found


_broken: dict[str, str] = {}


def broken_binding_types() -> Mapping[str, str]:
    """Registered binding types that failed to load, with the reason."""
    binding_types()
    return _broken


def load_config(file: Path | str, environ: Mapping[str, str] | None = None) -> Config:
    """Read and check a config file completely, or raise ConfigError listing every problem."""
    file = Path(file)
    doc = read_document(file, environ)
    types = binding_types()
    issues = validate(doc, types)
    if issues:
        raise ConfigError(issues)
    config = build_model(file, doc.data, doc)
    issues = check_references(config, doc, types)
    if issues:
        raise ConfigError(issues)
    return config


def check_references(config: Config, doc: Document,
                     types: Mapping[str, BindingType]) -> list[ConfigIssue]:
    """Every `exit`, `vault` and guard name must exist and be of a role that fits."""
    issues: list[ConfigIssue] = []

    def exit_issue(binding: Binding, path: tuple[str | int, ...], target: str) -> None:
        spec = types[binding.type].kinds[binding.kind]
        other = config.bindings.get(target)
        if other is None:
            issues.append(doc.issue(path, f"exit {target!r} of binding {binding.name!r} is not a "
                                          f"binding; expected one of "
                                          f"{', '.join(sorted(config.bindings))}"))
            return
        role = types[other.type].kinds[other.kind].role
        if spec.exit_roles and role not in spec.exit_roles:
            issues.append(doc.issue(path, f"exit {target!r} of binding {binding.name!r} is a "
                                          f"{other.type} {other.kind} ({role}); expected a "
                                          f"binding that is {' or '.join(spec.exit_roles)}"))

    for name, b in config.bindings.items():
        base: tuple[str | int, ...] = ("bindings", name)
        spec = types[b.type].kinds[b.kind]
        if b.exit:
            exit_issue(b, base + ("exit",), b.exit)
        for i, route in enumerate(b.routes):
            if route.exit:
                exit_issue(b, base + ("routes", i, "exit"), route.exit)
            for guard in route.guarded:
                if guard not in config.guards:
                    issues.append(doc.issue(base + ("routes", i, "guarded", guard),
                                            f"guard {guard!r} used by binding {name!r} is not "
                                            f"defined under guards"))
        if spec.exit == "required" and not b.exits:
            issues.append(doc.issue(base, f"binding {name!r} leads nowhere: expected an exit"))
        if b.vault and b.vault not in config.vaults:
            issues.append(doc.issue(base + ("vault",), f"vault {b.vault!r} used by binding "
                                    f"{name!r} is not defined under vaults"))
        for guard in (b.options.get("authorization") or {}):
            if guard not in config.guards:
                issues.append(doc.issue(base + ("options", "authorization", guard),
                                        f"guard {guard!r} used by binding {name!r} is not "
                                        f"defined under guards"))
    return issues
