"""http server binding (SPEC §4): routing by pseudo-headers, CORS, limits, HTTP/1.1 and h2."""

from __future__ import annotations

from ssekd.bindings._schemas import STRING_LIST
from ssekd.bindings.api import BindingType, BuildContext, Exit, HttpBinding, KindSpec, Role
from ssekd.bindings.http.channel import LIMITS_SCHEMA, Limits
from ssekd.bindings.http.cors import AccessControl
from ssekd.bindings.http.routing import Condition, HeaderPattern
from ssekd.bindings.http.server import HttpRoot, HttpRoute, HttpServer, HttpSite
from ssekd.config import ConfigError
from ssekd.config.model import Binding

DEFAULT_VERSIONS = ("http/1.1", "h2")


def _build(ctx: BuildContext, binding: Binding) -> HttpServer:
    options = binding.options
    routes = []
    for route in binding.routes:
        conditions = tuple(
            Condition(tuple(HeaderPattern.compile(n, str(v))
                            for n, v in (when.get("headers") or {}).items()))
            for when in route.when
        )
        assert route.exit is not None
        routes.append(HttpRoute(conditions, ctx.exit(route.exit, HttpBinding)))
    default = ctx.exit(binding.exit, HttpBinding) if binding.exit else None
    limits = Limits.from_options(options.get("limits"))
    _check_keepalive(ctx, binding, limits)
    cors = AccessControl.from_options(options.get("access-control"))
    if cors.credentials and cors.origins is None:
        raise ConfigError([ctx.issue(
            ("bindings", binding.name, "options", "access-control", "allow", "credentials"),
            "expected `allow.origins` beside `credentials: true`: with any origin allowed, "
            "every site a user visits could read these responses with the user's cookies")])
    root = HttpRoot(binding.name, routes, default, cors, ctx.events)
    site = HttpSite(root, limits, ctx.reactor)
    versions = tuple(options.get("versions", DEFAULT_VERSIONS))
    return HttpServer(binding.name, site, versions)


def _check_keepalive(ctx: BuildContext, binding: Binding, limits: Limits) -> None:
    """An exit that keeps streams open with keepalives must write more often than this binding's
    idle timeout, or HTTP/2 connections carrying only quiet streams are closed under them."""
    issues = []
    for name in binding.exits:
        max_idle = ctx.exit(name, HttpBinding).max_idle
        if max_idle is not None and max_idle >= limits.idle_timeout:
            issues.append(ctx.issue(
                ("bindings", name, "options", "max-idle-time"),
                f"expected less than the idle-timeout of http binding {binding.name!r} "
                f"({limits.idle_timeout:g} s), which closes connections that stay quiet that "
                f"long; got {max_idle:g}"))
    if issues:
        raise ConfigError(issues)


_CREDENTIALS = {"type": "object", "additionalProperties": False, "properties": {
    "headers": {"type": "object", "additionalProperties": {"type": "string"}},
    "query": {"type": "object", "additionalProperties": {"type": "string"}},
    "cookies": {"type": "object", "additionalProperties": {"type": "string"}},
}}

OPTIONS = {"type": "object", "additionalProperties": False, "properties": {
    "versions": {"type": "array", "minItems": 1, "items": {"enum": ["http/1.1", "h2"]}},
    "access-control": {
        "type": "object", "additionalProperties": False,
        "properties": {
            "policy": {"enum": ["same-origin", "cross-origin"]},
            "allow": {"type": "object", "additionalProperties": False, "properties": {
                "origins": STRING_LIST, "methods": STRING_LIST, "headers": STRING_LIST,
                "credentials": {"type": "boolean"}}},
            "max-age": {"type": "integer", "minimum": 0},
            "expose": {"type": "object", "additionalProperties": False,
                       "properties": {"headers": STRING_LIST}},
        },
    },
    "authorization": {"type": "object", "additionalProperties": {
        "type": "object", "additionalProperties": False, "required": ["credentials"],
        "properties": {"credentials": _CREDENTIALS}}},
    "limits": LIMITS_SCHEMA,
}}

WHEN = {"type": "object", "additionalProperties": False, "properties": {
    "headers": {"type": "object", "minProperties": 1,
                "additionalProperties": {"type": "string"}}}}

BINDING = BindingType("http", {
    "server": KindSpec(role=Role.STREAM, build=_build, exit=Exit.REQUIRED,
                       exit_roles=(Role.HTTP,),
                       options=OPTIONS, when=WHEN),
})
