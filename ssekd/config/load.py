"""Loading a zilla.yaml: read, substitute, validate against the schema, build the model, and
check every reference. `load_config` is the one entry point; it raises `ConfigError`.

The binding types come in as a `Registry` (see `ssekd.spi.plugins`), so this module knows no
binding by name and imports none of them: what a binding's options name outside it, its kind
says (`KindSpec.depends`).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from pathlib import Path

from ssekd.config.compose import RemoteTexts, compose
from ssekd.config.document import Document, read_document
from ssekd.config.errors import ConfigError, ConfigIssue
from ssekd.config.model import Binding, Config, build_model
from ssekd.config.schema import validate
from ssekd.spi.binding import Exit, plays, role_name
from ssekd.spi.plugins import Registry


def load_config(file: Path | str, registry: Registry,
                environ: Mapping[str, str] | None = None,
                texts: RemoteTexts | None = None) -> Config:
    """Read and check a config file completely, or raise ConfigError listing every problem.
    Composite bindings (asyncapi) are composed here (`ssekd.config.compose`); `texts` keeps
    the specs a daemon read from schema registries between its loads."""
    file = Path(file)
    doc = read_document(file, environ)
    issues = validate(doc, registry)
    if issues:
        raise ConfigError(issues)
    issues = check_references(build_model(file, doc.data, doc), doc, registry)
    if issues:
        raise ConfigError(issues)
    config = compose(file, doc, registry, texts)
    if config.composites:  # what the composites made must fit together as well
        issues = check_references(config, config.document, registry)
        if issues:
            raise ConfigError(issues)
    return config


def check_references(config: Config, doc: Document, registry: Registry) -> list[ConfigIssue]:
    """Every `exit`, `vault` and guard name must exist, and every exit play a role that fits."""
    issues: list[ConfigIssue] = []

    def exit_issue(binding: Binding, path: tuple[str | int, ...], target: str) -> None:
        spec = registry.kind(binding)
        other = config.bindings.get(target)
        if other is None:
            near = difflib.get_close_matches(target, list(config.bindings), n=1, cutoff=0.75)
            expected = f"did you mean {near[0]!r}?" if near else \
                f"expected one of {', '.join(sorted(config.bindings))}"
            issues.append(doc.issue(path, f"exit {target!r} of binding {binding.name!r} is not a "
                                          f"binding; {expected}"))
            return
        role = registry.kind(other).role
        if not any(plays(role, r) for r in spec.exit_roles):
            expected = " or ".join(role_name(r) for r in spec.exit_roles) or "nothing"
            issues.append(doc.issue(path, f"exit {target!r} of binding {binding.name!r} is a "
                                          f"{other.type} {other.kind} ({role_name(role)}); "
                                          f"expected a binding that is {expected}"))

    for name, b in config.bindings.items():
        base: tuple[str | int, ...] = ("bindings", name)
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
        if registry.kind(b).exit is Exit.REQUIRED and not b.exits:
            issues.append(doc.issue(base, f"binding {name!r} leads nowhere: expected an exit"))
        if b.vault and b.vault not in config.vaults:
            issues.append(doc.issue(base + ("vault",), f"vault {b.vault!r} used by binding "
                                    f"{name!r} is not defined under vaults"))
        depends = registry.kind(b).depends(b.options)
        for guard, where in depends.guards.items():
            if guard not in config.guards:
                issues.append(doc.issue(base + ("options", *where),
                                        f"guard {guard!r} used by binding {name!r} is not "
                                        f"defined under guards"))
        for vault, where in depends.vaults.items():
            if vault not in config.vaults:
                issues.append(doc.issue(base + ("options", *where), f"vault {vault!r} used by "
                                        f"binding {name!r} is not defined under vaults"))
    return issues
