"""http bindings (docs/config-reference.md): the server (routing by pseudo-headers, CORS, limits,
HTTP/1.1 and h2) and the client (requests to one upstream over HTTP/1.1 or h2: an sse client's
streams, and an http server's routes as a reverse proxy)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ssekd.bindings._schemas import STRING_LIST
from ssekd.bindings.http.asyncapi import SCHEMA as ASYNCAPI_SCHEMA
from ssekd.bindings.http.asyncapi import AsyncApiDocument
from ssekd.bindings.http.authorization import Authorization, Credentials
from ssekd.bindings.http.channel import LIMITS_SCHEMA, Limits
from ssekd.bindings.http.client import HttpClient
from ssekd.bindings.http.cors import AccessControl
from ssekd.bindings.http.health import SCHEMA as HEALTH_SCHEMA
from ssekd.bindings.http.health import HealthPaths
from ssekd.bindings.http.roles import HttpBinding, HttpClientBinding, HttpServerBinding
from ssekd.bindings.http.routing import Condition, HeaderPattern
from ssekd.bindings.http.server import HttpRoot, HttpRoute, HttpServer, HttpSite, HttpStats
from ssekd.bindings.http.validation import (
    CLIENT_REQUESTS_SCHEMA,
    REQUESTS_SCHEMA,
    ResponseValidation,
    build_for,
    catalogs_named,
)
from ssekd.config import ConfigError
from ssekd.config.model import Binding
from ssekd.spi.binding import BindingType, BuildContext, Dependencies, Exit, KindSpec
from ssekd.spi.connection import Connector
from ssekd.spi.guard import CertificateGuard
from ssekd.telemetry.attributes import BindingAttributes, compile_attributes

DEFAULT_VERSIONS = ("http/1.1", "h2")
#: `alt-svc.max-age` by default: a day, as common servers advertise HTTP/3.
DEFAULT_ALT_SVC_AGE = 86400
#: An http client's `versions` when the config gives none (Zilla's default).
CLIENT_VERSIONS = ("http/1.1", "h2")


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
        routes.append(HttpRoute(conditions, ctx.exit(route.exit, HttpBinding), route.guarded))
    document = options.get("asyncapi")
    if document is not None:  # before every route: its path is the binding's own
        path = str(document["path"])
        routes.insert(0, HttpRoute((Condition((HeaderPattern.compile(":path", path),)),),
                                   AsyncApiDocument(ctx.config, ctx.catalogs,
                                                    path.endswith(".json"))))
    default = ctx.exit(binding.exit, HttpBinding) if binding.exit else None
    authorization = _authorization(ctx, binding)
    limits = Limits.from_options(options.get("limits"))
    _check_keepalive(ctx, binding, limits)
    cors = AccessControl.from_options(options.get("access-control"))
    if cors.credentials and cors.origins is None:
        raise ConfigError([ctx.issue(
            ("bindings", binding.name, "options", "access-control", "allow", "credentials"),
            "expected `allow.origins` beside `credentials: true`: with any origin allowed, "
            "every site a user visits could read these responses with the user's cookies")])
    root = HttpRoot(binding.name, routes, default, cors, ctx.events, authorization,
                    HttpStats(ctx.metrics, binding.name, ctx.reactor,
                              _attributes(ctx, binding, authorization)),
                    HealthPaths.from_options(options.get("health"), ctx.health), ctx.siblings,
                    ctx.reactor, build_for(ctx, binding, responses=False))
    alt_svc = options.get("alt-svc")
    if alt_svc is not None:
        root.alt_svc = b'h3=":%d"; ma=%d' % (int(alt_svc["h3"]),
                                             int(alt_svc.get("max-age", DEFAULT_ALT_SVC_AGE)))
    site = HttpSite(root, limits, ctx.reactor)
    versions = tuple(options.get("versions", DEFAULT_VERSIONS))
    return HttpServer(binding.name, site, versions)


def _authorization(ctx: BuildContext, binding: Binding) -> Authorization | None:
    """The guards this binding reads credentials for (`options.authorization`) or whose roles
    its routes require (`guarded`); None when it names none."""
    options = binding.options.get("authorization") or {}
    names = list(options) + [g for r in binding.routes for g in r.guarded if g not in options]
    if not names:
        return None
    guards = {g: ctx.guard(g) for g in names}
    issues = [ctx.issue(("bindings", binding.name, "options", "authorization", g),
                        f"guard {g!r} checks client certificates, which only a tls server's "
                        f"options.authorization hands it: a request's header, cookie or query "
                        f"is no certificate; name it there, and its routes here may require "
                        f"its roles") for g in options if isinstance(guards[g], CertificateGuard)]
    if issues:
        raise ConfigError(issues)
    return Authorization(guards, {g: Credentials.from_options(o.get("credentials") or {})
                                  for g, o in options.items()})


def _attributes(ctx: BuildContext, binding: Binding,
                authorization: Authorization | None) -> BindingAttributes:
    """The binding's `telemetry.attributes`, read from each request (`ssekd.telemetry.attributes`);
    one that names no field of a request or response, or a credential, is a config error."""
    never = authorization.header_names if authorization is not None else frozenset()
    found, problems = compile_attributes(binding.attributes, never)
    if problems:
        raise ConfigError([ctx.issue(("bindings", binding.name, "telemetry", "attributes", name),
                                     f"attribute {name!r}: {why}")
                           for name, why in problems.items()])
    return BindingAttributes(found)


def _check_keepalive(ctx: BuildContext, binding: Binding, limits: Limits) -> None:
    """An exit that keeps streams open with keepalives must write more often than this binding's
    idle timeout, or HTTP/2 connections carrying only quiet streams are closed under them."""
    issues = []
    for name in binding.exits:
        target = ctx.exit(name, HttpBinding)
        max_idle = target.max_idle
        if max_idle is not None and max_idle >= limits.idle_timeout:
            # the option that sets it: sse's `max-idle-time`, or the exit's own (`idle_option`)
            option = str(getattr(target, "idle_option", "max-idle-time"))
            issues.append(ctx.issue(
                ("bindings", name, "options", option),
                f"expected less than the idle-timeout of http binding {binding.name!r} "
                f"({limits.idle_timeout:g} s), which closes connections that stay quiet that "
                f"long; got {max_idle:g}"))
    if issues:
        raise ConfigError(issues)


def _build_client(ctx: BuildContext, binding: Binding) -> HttpClient:
    assert binding.exit is not None  # the schema requires it
    base: tuple[str | int, ...] = ("bindings", binding.name)
    options = binding.options
    issues = []
    versions = tuple(str(v) for v in options.get("versions", CLIENT_VERSIONS))
    overrides = {str(k): str(v) for k, v in (options.get("overrides") or {}).items()}
    for name in overrides:
        if name.startswith(":") and name != ":authority":
            issues.append(ctx.issue(base + ("options", "overrides", name),
                                    f"expected `:authority` or a header name; {name} is set by "
                                    f"the request itself"))
    connector = ctx.exit(binding.exit, Connector)
    if connector.address is None:
        issues.append(ctx.issue(base + ("exit",),
                                f"exit {binding.exit!r} of http client {binding.name!r} must say "
                                f"where to connect: give the tcp client options.host and port"))
    if issues:
        raise ConfigError(issues)
    requests = build_for(ctx, binding, responses=True)
    return HttpClient(binding.name, ctx.reactor, connector, overrides, versions, ctx.events,
                      response_check=ResponseValidation(requests) if requests else None)


_CREDENTIALS = {"type": "object", "additionalProperties": False,
                "description": "Where the token is carried, tried in the order cookies, headers, "
                               "query; `{credentials}` marks the token in the value.",
                "properties": {
    "headers": {"type": "object", "additionalProperties": {"type": "string"},
                "description": "Header name to value pattern, e.g. "
                               "`authorization: Bearer {credentials}`."},
    "query": {"type": "object", "additionalProperties": {"type": "string"},
              "description": "Query parameter to value pattern."},
    "cookies": {"type": "object", "additionalProperties": {"type": "string"},
                "description": "Cookie name to value pattern."},
}}

_ORIGINS = "any origin"
_ECHO = "the request's (echoed)"

OPTIONS = {"type": "object", "additionalProperties": False,
           "description": "Serves HTTP/1.1 and HTTP/2 (ALPN over TLS, prior knowledge in "
                          "cleartext) on the same routes. Each request goes to the first route "
                          "whose `when` matches, else to `exit`; with neither it is `404`.",
           "properties": {
    "versions": {"type": "array", "minItems": 1, "items": {"enum": ["http/1.1", "h2"]},
                 "default": list(DEFAULT_VERSIONS),
                 "description": "HTTP versions spoken (and offered by a tls server in front)."},
    "access-control": {
        "type": "object", "additionalProperties": False,
        "description": "CORS. A request whose `Origin` is not allowed is `403`.",
        "properties": {
            "policy": {"enum": ["same-origin", "cross-origin"], "default": "same-origin",
                       "description": "`same-origin` allows only the server's own origin; "
                                      "`cross-origin` applies `allow` and answers preflights with "
                                      "`204`."},
            "allow": {"type": "object", "additionalProperties": False,
                      "description": "What cross-origin requests may do.", "properties": {
                "origins": {**STRING_LIST, "x-ssekd-default": _ORIGINS,
                            "description": "Origins allowed besides the server's own."},
                "methods": {**STRING_LIST, "x-ssekd-default": _ECHO,
                            "description": "`Access-Control-Allow-Methods` of a preflight."},
                "headers": {**STRING_LIST, "x-ssekd-default": _ECHO,
                            "description": "`Access-Control-Allow-Headers` of a preflight."},
                "credentials": {"type": "boolean", "default": False,
                                "description": "Allow cookies and credentials; needs `origins`."}}},
            "max-age": {"type": "integer", "minimum": 0, "x-ssekd-default": "not sent",
                        "description": "Seconds a browser may cache a preflight answer."},
            "expose": {"type": "object", "additionalProperties": False,
                       "description": "Response headers scripts may read.",
                       "properties": {"headers": {**STRING_LIST, "x-ssekd-default": "none",
                                                  "description": "`Access-Control-Expose-Headers`."}}},
        },
    },
    "authorization": {"type": "object", "additionalProperties": {
        "type": "object", "additionalProperties": False, "required": ["credentials"],
        "properties": {"credentials": _CREDENTIALS}},
        "description": "Per guard name: where requests carry their token. A request with a "
                       "valid token gets that guard's session (identity, roles) whatever its "
                       "route; a `POST` with `Content-Type: application/x-challenge-response` "
                       "and a fresh token renews the streams it opened (`204`)."},
    "limits": LIMITS_SCHEMA,
    "alt-svc": {
        "type": "object", "additionalProperties": False, "required": ["h3"],
        "x-ssekd-addition": True, "x-ssekd-default": "not sent",
        "description": "Advertise HTTP/3 (`Alt-Svc: h3=\":port\"; ma=max-age`) on every "
                       "response, so browsers move to a quic binding serving these routes. "
                       "Off by default: a client told to try a UDP port its network blocks "
                       "falls back to TCP, but only after a delay.",
        "properties": {
            "h3": {"type": "integer", "minimum": 1, "maximum": 65535,
                   "description": "The UDP port clients reach the quic binding on (behind a "
                                  "balancer or NAT, the outside one)."},
            "max-age": {"type": "integer", "minimum": 0, "default": DEFAULT_ALT_SVC_AGE,
                        "description": "Seconds a browser remembers the advertisement."}}},
    "health": HEALTH_SCHEMA,
    "asyncapi": ASYNCAPI_SCHEMA,
    "requests": REQUESTS_SCHEMA,
}}

WHEN = {"type": "object", "additionalProperties": False, "properties": {
    "headers": {"type": "object", "minProperties": 1,
                "additionalProperties": {"type": "string"},
                "description": "Header name to pattern; all must match the whole value. "
                               "Pseudo-headers: `:scheme` (`http`/`https`), `:authority` (always "
                               "`host:port`), `:path` (a pattern not ending in `*` also matches with "
                               "any query string), `:method`. `*` matches anything, `{name}` "
                               "captures one path segment."}}}

CLIENT_OPTIONS = {"type": "object", "additionalProperties": False,
                  "description": "Sends requests to where its exit connects: a tcp client "
                                 "(`http`), or a tls client in front of one (`https`). As an "
                                 "http server's exit it is a reverse proxy: any method, the "
                                 "path and query, the request's headers but hop-by-hop ones "
                                 "and its body go up; the status, headers and body come back "
                                 "as they arrive, with flow control; connections are pooled "
                                 "(HTTP/2 requests share one). An upstream that refuses, cannot "
                                 "be reached or resets is `502`, one that does not answer in "
                                 "60 s `504`. An sse client's streams get an HTTP/1.1 "
                                 "connection each.",
                  "properties": {
    "versions": {"type": "array", "minItems": 1, "items": {"enum": ["http/1.1", "h2"]},
                 "default": list(CLIENT_VERSIONS),
                 "description": "HTTP versions spoken upstream: HTTP/2 when a tls client's "
                                "`alpn` negotiates `h2`, or - `[h2]` alone - with prior "
                                "knowledge (TLS or cleartext); in cleartext with both, a "
                                "connection's first request offers `Upgrade: h2c` (HTTP/2 if "
                                "the upstream switches, HTTP/1.1 for good if it declines); "
                                "HTTP/1.1 otherwise. An sse client's streams are HTTP/1.1."},
    "overrides": {"type": "object", "additionalProperties": {"type": "string"},
                  "x-ssekd-default": "none",
                  "description": "Headers set on every request; `:authority` replaces the "
                                 "`Host` (by default the request's own when proxying, the tcp "
                                 "client's `host:port` for an sse client's streams)."},
    "requests": CLIENT_REQUESTS_SCHEMA,
}}

def server_depends(options: Mapping[str, Any]) -> Dependencies:
    """The guards an http server reads credentials for (`options.authorization`); with
    `options.asyncapi`, every catalog and the whole config, which its document describes."""
    document = bool(options.get("asyncapi"))
    return Dependencies(guards={g: ("authorization", g) for g in options.get("authorization") or {}},
                        catalogs=catalogs_named(options.get("requests")),
                        every_catalog=document, whole_config=document)


def client_depends(options: Mapping[str, Any]) -> Dependencies:
    """The catalogs the models of its `requests` name."""
    return Dependencies(catalogs=catalogs_named(options.get("requests")))


BINDING = BindingType("http", {
    "server": KindSpec(role=HttpServerBinding, build=_build, exit=Exit.REQUIRED,
                       exit_roles=(HttpBinding,), depends=server_depends,
                       options=OPTIONS, when=WHEN),
    "client": KindSpec(role=HttpClientBinding, build=_build_client, exit=Exit.REQUIRED,
                       exit_roles=(Connector,), options=CLIENT_OPTIONS, depends=client_depends,
                       summary=lambda o: str((o.get("overrides") or {}).get(":authority", ""))),
})
