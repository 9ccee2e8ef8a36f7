"""Routes of the bindings composed from API specs: which operations of which spec a route's
`when` takes, and where an operation goes. The same rules for OpenAPI and AsyncAPI operations,
which both have a key (operation id) and tags."""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping
from typing import Any, Protocol

from ssekd.config.errors import ConfigError, ConfigIssue
from ssekd.config.model import Binding, Route
from ssekd.spi.compose import ComposeContext


class RoutedOperation(Protocol):
    """What routing needs of an operation of either format."""

    @property
    def key(self) -> str: ...

    @property
    def tags(self) -> Collection[str]: ...


def glob_match(pattern: str, value: str) -> bool:
    """An operation id against a `when.operation` (`*` matches any run of characters)."""
    return re.fullmatch(".*".join(map(re.escape, pattern.split("*"))), value) is not None


def matches(when: Mapping[str, Any], label: str, operation: RoutedOperation) -> bool:
    """Whether a `when` item takes `operation` of spec `label`: every field it gives must
    match (`spec` the label, `operation` the id or a glob of it, `tag` one of its tags)."""
    if "spec" in when and when["spec"] != label:
        return False
    if "operation" in when and not glob_match(str(when["operation"]), operation.key):
        return False
    return "tag" not in when or str(when["tag"]) in operation.tags


def unknown_specs(ctx: ComposeContext, binding: Binding, i: int, route: Route,
                  labels: Collection[str], what: str = "a spec") -> list[ConfigIssue]:
    """An issue for each `when` of route `i` that names a spec the binding does not have
    (`what` says which of its specs `when` names)."""
    return [ctx.issue(("bindings", binding.name, "routes", i, "when", j, "spec"),
                      f"{when['spec']!r} is not {what} of binding {binding.name!r}; "
                      f"expected one of {', '.join(labels)}")
            for j, when in enumerate(route.when)
            if "spec" in when and when["spec"] not in labels]


def exit_of(binding: Binding, label: str, op: RoutedOperation,
            issue: Callable[[str], ConfigIssue]) -> tuple[str, dict[str, list[str]]]:
    """The exit of the first route whose `when` takes the operation (and that route's
    `guarded`), else the binding's exit; with neither, `issue` (at the operation in its spec)
    says so."""
    for route in binding.routes:
        if route.exit is not None and any(matches(w, label, op) for w in route.when):
            return route.exit, {g: list(roles) for g, roles in route.guarded.items()}
    if binding.exit is None:
        raise ConfigError([issue(f"no route of binding {binding.name!r} takes operation "
                                 f"{op.key!r} and the binding has no exit")])
    return binding.exit, {}
