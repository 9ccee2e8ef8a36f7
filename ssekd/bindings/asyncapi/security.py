"""An operation's security, as guards: a spec names security schemes, the binding maps each
scheme to a guard of the config (`options.specs.<label>.security: {<scheme>: <guard>}`).

ssekd fails closed where Zilla drops what it cannot map: an operation that requires a scheme no
guard is mapped to is a config error, not a route left open.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ssekd.bindings.asyncapi.spec import Operation, Scheme, Spec
from ssekd.config.errors import ConfigError, ConfigIssue
from ssekd.config.model import Binding
from ssekd.spi.compose import ComposeContext

#: Scheme types whose credential is a bearer token in the `Authorization` header.
BEARER_TYPES = ("openIdConnect", "oauth2")


@dataclass(frozen=True)
class Guarding:
    """The guard an operation's security maps to, the roles it requires (the schemes'
    `scopes`), and where a request carries the token."""

    guard: str
    roles: tuple[str, ...]
    credentials: Mapping[str, Mapping[str, str]]


def credentials_of(scheme: Scheme) -> dict[str, dict[str, str]] | None:
    """Where a request carries the credential of `scheme`, as the http binding's
    `authorization.<guard>.credentials` says it; None for a scheme a guard cannot check."""
    data = scheme.data
    kind = data.get("type")
    if (kind == "http" and str(data.get("scheme", "")).lower() == "bearer") or \
            kind in BEARER_TYPES:
        return {"headers": {"authorization": "Bearer {credentials}"}}
    if kind == "httpApiKey" and isinstance(data.get("name"), str):
        where = {"header": "headers", "query": "query", "cookie": "cookies"}.get(
            str(data.get("in")))
        if where is not None:
            return {where: {str(data["name"]): "{credentials}"}}
    return None


def guarding(ctx: ComposeContext, binding: Binding, spec: Spec,
             operation: Operation) -> Guarding | None:
    """The guard of `operation`, or None when it requires no security."""
    schemes = list(spec.security(operation))
    if not schemes:
        return None
    mapping: Mapping[str, Any] = binding.options["specs"][spec.label].get("security") or {}
    issues: list[ConfigIssue] = []
    guards: dict[str, list[str]] = {}
    credentials: dict[str, dict[str, str]] = {}
    option = spec.option_path + ("security",)
    for scheme in schemes:
        guard = mapping.get(scheme.name)
        if guard is None:
            issues.append(spec.issue(scheme.path, f"operation {operation.key!r} requires "
                                                  f"security scheme {scheme.name!r}, which "
                                                  f"binding {binding.name!r} maps to no guard: "
                                                  f"add {scheme.name}: <guard> to its "
                                                  f"options.specs.{spec.label}.security"))
            continue
        if guard not in ctx.config.guards:
            issues.append(ctx.issue(option + (scheme.name,),
                                    f"guard {guard!r} is not defined under guards"))
            continue
        found = credentials_of(scheme)
        if found is None:
            issues.append(spec.issue(scheme.path, f"security scheme {scheme.name!r} (type "
                                                  f"{scheme.data.get('type')!r}) carries no "
                                                  f"token a guard can check: expected http "
                                                  f"bearer, httpApiKey (header, query or "
                                                  f"cookie), openIdConnect or oauth2"))
            continue
        roles = guards.setdefault(str(guard), [])
        roles += [str(s) for s in scheme.data.get("scopes") or () if str(s) not in roles]
        for where, entries in found.items():
            credentials.setdefault(where, {}).update(entries)
    if issues:
        raise ConfigError(issues)
    if len(guards) > 1:
        # AsyncAPI's list is of alternatives; one route checks its guards all together
        raise ConfigError([spec.issue(operation.path + ("security",),
                                      f"operation {operation.key!r} maps its security "
                                      f"schemes to several guards ({', '.join(guards)}); a "
                                      f"stream is checked by one guard: map them to one")])
    [(guard, roles)] = guards.items()
    return Guarding(guard, tuple(roles), credentials)
