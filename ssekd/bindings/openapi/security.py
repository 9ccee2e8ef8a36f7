"""An OpenAPI operation's security, as a guard: the spec names security schemes
(`components.securitySchemes`), the binding maps each to a guard of the config
(`options.specs.<label>.security: {<scheme>: <guard>}`, Zilla's key), and the composed route
requires that guard with the requirement's scopes as roles.

ssekd fails closed where Zilla leaves a route open or drops it: a scheme mapped to no guard,
alternatives (`security: [{a: []}, {b: []}]`: one route checks one guard), and schemes mapped to
different guards are config errors at the spec's line, never a route served without its check.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ssekd.bindings.asyncapi.security import credentials_of
from ssekd.bindings.asyncapi.spec import Scheme
from ssekd.bindings.openapi.spec import OpenapiSpec, Operation
from ssekd.config.errors import ConfigError, ConfigIssue
from ssekd.config.model import Binding
from ssekd.spi.compose import ComposeContext

Path_ = tuple[str | int, ...]


@dataclass(frozen=True)
class Guarding:
    """The guard an operation requires, its roles (the requirement's scopes), and where a
    request carries the token (the http server's `authorization.<guard>.credentials`)."""

    guard: str
    roles: tuple[str, ...]
    credentials: Mapping[str, Mapping[str, str]]

    @property
    def identity(self) -> str:
        """What `{identity}` stands for in an http-kafka value."""
        return f"${{guarded['{self.guard}'].identity}}"


def guarding(ctx: ComposeContext, binding: Binding, spec: OpenapiSpec, op: Operation,
             option: Path_) -> Guarding | None:
    """The guard of `op`, or None when it requires no security. `option` is the spec's entry
    below the binding's `options` (`("specs", label)`)."""
    if not op.security:
        return None
    entry: Any = binding.options
    for part in option:
        entry = entry[part]
    mapping: Mapping[str, Any] = entry.get("security") or {}
    where = ("bindings", binding.name, "options") + option + ("security",)
    if len(op.security) > 1:
        raise ConfigError([spec.issue(op.security_path,
                                      f"operation {op.key!r} has {len(op.security)} alternative "
                                      f"security requirements; a route checks one guard: keep "
                                      f"one")])
    [requirement] = op.security
    if not requirement:
        return None  # `security: [{}]`: no security
    issues: list[ConfigIssue] = []
    guards: dict[str, list[str]] = {}
    credentials: dict[str, dict[str, str]] = {}
    schemes = (spec.data.get("components") or {}).get("securitySchemes") or {}
    for name, scopes in requirement.items():
        guard = mapping.get(name)
        if guard is None:
            issues.append(spec.issue(op.security_path,
                                     f"operation {op.key!r} requires security scheme {name!r}, "
                                     f"which binding {binding.name!r} maps to no guard: add "
                                     f"{name}: <guard> to its options."
                                     + ".".join(map(str, option)) + ".security"))
            continue
        if guard not in ctx.config.guards:
            issues.append(ctx.issue(where + (name,), f"guard {guard!r} is not defined under "
                                                     f"guards"))
            continue
        at: Path_ = ("components", "securitySchemes", name)
        if not isinstance(schemes, Mapping) or name not in schemes:
            issues.append(spec.issue(op.security_path, f"security scheme {name!r} is not in "
                                                       f"components.securitySchemes"))
            continue
        data = dict(spec.text.mapping(schemes[name], at, f"security scheme {name!r}"))
        if data.get("type") == "apiKey":  # OpenAPI's name for what AsyncAPI calls httpApiKey
            data["type"] = "httpApiKey"
        found = credentials_of(Scheme(str(name), data, at))
        if found is None:
            issues.append(spec.issue(at, f"security scheme {name!r} (type "
                                         f"{data.get('type')!r}) carries no token a guard can "
                                         f"check: expected http bearer, apiKey (header, query "
                                         f"or cookie), openIdConnect or oauth2"))
            continue
        roles = guards.setdefault(str(guard), [])
        roles += [str(s) for s in scopes or () if str(s) not in roles]
        for place, values in found.items():
            credentials.setdefault(place, {}).update(values)
    if issues:
        raise ConfigError(issues)
    if len(guards) > 1:
        raise ConfigError([spec.issue(op.security_path,
                                      f"operation {op.key!r} maps its security schemes to "
                                      f"several guards ({', '.join(guards)}); a request is "
                                      f"checked by one guard: map them to one")])
    [(guard, roles)] = guards.items()
    return Guarding(guard, tuple(roles), credentials)
