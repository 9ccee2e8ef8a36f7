"""quic: `server` takes QUIC connections on a UDP port and hands each to an http server, which
speaks HTTP/3 over it into the same routes as its TCP connections. An ssekd addition: Zilla has
no QUIC binding. Its options follow the tls server's (`vault`, `keys`, `sni`, `alpn`, routes by
`authority`) and the tcp server's (`host`, `port`, connection `limits`).
"""

from __future__ import annotations

import re
from typing import Any

from ssekd.bindings._schemas import STRING_LIST
from ssekd.bindings.connection_limits import (
    DEFAULT_PER_IP,
    ConnectionLimits,
    OpenConnections,
)
from ssekd.bindings.tls import aliases, certificate_names, covers, every_key
from ssekd.config import ConfigError
from ssekd.config.errors import ConfigIssue
from ssekd.config.model import Binding
from ssekd.spi.binding import BindingType, BuildContext, Exit, KindSpec
from ssekd.spi.connection import DatagramListenerBinding, QuicSessionBinding
from ssekd.vaults import open_vault

#: Where a quic server listens when its options name no host.
DEFAULT_HOST = "0.0.0.0"
DEFAULT_ALPN = ("h3",)
#: QUIC connections a process holds by default, over every quic server: each costs its
#: streams and some tens of KiB of state, no file descriptor.
DEFAULT_CONNECTIONS = 20000
DEFAULT_STREAMS = 100
DEFAULT_IDLE_TIMEOUT = 60.0
DEFAULT_HANDSHAKE_TIMEOUT = 10.0

#: The process's count of QUIC connections (apart from the tcp servers': those hold sockets).
QUIC_CONNECTIONS = OpenConnections(DEFAULT_CONNECTIONS)


def _pattern(value: str) -> re.Pattern[str]:
    """A server-name pattern (`*` for any run of characters), matched case-insensitively."""
    return re.compile(".*".join(re.escape(p) for p in value.lower().split("*")))


def _build(ctx: BuildContext, binding: Binding) -> Any:
    from ssekd.bindings.quic.server import QuicLimits, QuicRoute, QuicServer

    options = binding.options
    base: tuple[str | int, ...] = ("bindings", binding.name)
    if binding.vault is None:
        raise ConfigError([ctx.issue(base, f"quic server {binding.name!r} needs a `vault` "
                                           f"holding its keys (QUIC is always TLS 1.3)")])
    vault = open_vault(ctx.config, binding.vault)
    issues: list[ConfigIssue] = []
    keys = aliases(binding, ctx, vault, "keys", "keys", issues)
    if issues:
        raise ConfigError(issues)
    if not options.get("keys"):
        keys = every_key(vault)
    if not keys:
        raise ConfigError([ctx.issue(base + ("options",), f"quic server {binding.name!r} has no "
                                     f"key to serve with: vault {binding.vault!r} keys store "
                                     f"holds no private key")])
    served = [(certificate_names(e.certificate), (e.certificate, list(e.chain), e.key))
              for e in keys]

    def choose(name: str | None) -> tuple[Any, list[Any], Any]:
        """The key whose certificate names `name` (as the tls binding chooses), else the first."""
        if name is not None:
            for names, key in served:
                if covers(names, name):
                    return key
        return served[0][1]

    routes = []
    for route in binding.routes:
        assert route.exit is not None
        patterns = tuple(_pattern(str(w["authority"])) for w in route.when if "authority" in w)
        routes.append(QuicRoute(patterns, ctx.exit(route.exit, QuicSessionBinding)))
    default = ctx.exit(binding.exit, QuicSessionBinding) if binding.exit else None
    o = options.get("limits") or {}
    limits = QuicLimits(
        connections=ConnectionLimits.from_options(o, QUIC_CONNECTIONS.budget),
        streams=int(o.get("streams", DEFAULT_STREAMS)),
        idle_timeout=float(o.get("idle-timeout", DEFAULT_IDLE_TIMEOUT)),
        handshake_timeout=float(o.get("handshake-timeout", DEFAULT_HANDSHAKE_TIMEOUT)))
    return QuicServer(binding.name, str(options.get("host", DEFAULT_HOST)), int(options["port"]),
                      choose, options.get("sni"), options.get("alpn") or list(DEFAULT_ALPN),
                      routes, default, limits, bool(options.get("retry", True)), ctx.events,
                      ctx.metrics, ctx.reactor, ctx.health, QUIC_CONNECTIONS)


LIMITS = {
    "type": "object", "additionalProperties": False,
    "description": "Bounds on what QUIC clients may cost.",
    "properties": {
        "connections": {"type": "integer", "minimum": 1, "default": DEFAULT_CONNECTIONS,
                        "description": "QUIC connections this server holds at most (the process "
                                       "holds at most this many over all its quic servers); a "
                                       "client's first packet past it is dropped unanswered, "
                                       "and it tries again."},
        "connections-per-ip": {"type": "integer", "minimum": 1, "default": DEFAULT_PER_IP,
                               "description": "QUIC connections one client address may hold "
                                              "(counted by the address the connection began "
                                              "from)."},
        "streams": {"type": "integer", "minimum": 1, "maximum": 10000,
                    "default": DEFAULT_STREAMS,
                    "description": "Requests one connection may have open at once: QUIC's "
                                   "stream credit (MAX_STREAMS), handed back as each ends. "
                                   "Each SSE stream holds one."},
        "idle-timeout": {"type": "number", "exclusiveMinimum": 0,
                         "default": DEFAULT_IDLE_TIMEOUT,
                         "description": "Seconds a connection may stay silent before it is "
                                        "dropped (QUIC's max_idle_timeout, the lower of both "
                                        "sides'). An sse exit's keepalives must come sooner."},
        "handshake-timeout": {"type": "number", "exclusiveMinimum": 0,
                              "default": DEFAULT_HANDSHAKE_TIMEOUT,
                              "description": "Seconds a client has to complete its handshake."},
    }}

OPTIONS = {
    "type": "object", "additionalProperties": False, "required": ["port"],
    "x-ssekd-addition": True,
    "description": "Listens for QUIC (RFC 9000) on a UDP port with keys from its `vault`, and "
                   "hands each connection to the route matching its server name: an http "
                   "server, which serves HTTP/3 on it. Clients prove their address (a Retry) "
                   "before the server keeps anything for them; a client whose address changes "
                   "(a phone leaving Wi-Fi) keeps its connection and its streams.",
    "properties": {
        "host": {"type": "string", "minLength": 1, "default": DEFAULT_HOST,
                 "description": "Address to listen on."},
        "port": {"type": "integer", "minimum": 0, "maximum": 65535,
                 "description": "UDP port to listen on (it may be the same number as a TCP "
                                "port: `Alt-Svc` usually names the HTTPS port)."},
        "keys": {**STRING_LIST, "x-ssekd-default": "every key of the vault's `keys` store",
                 "description": "Aliases of the keys to serve with. The server name picks the "
                                "key whose certificate names it; any other name gets the first."},
        "sni": {**STRING_LIST, "x-ssekd-default": "any name",
                "description": "Server names accepted. Another name is treated as if none "
                               "was sent: the first key, and only routes without "
                               "`authority` match."},
        "alpn": {"type": "array", "minItems": 1, "items": {"const": "h3"},
                 "default": list(DEFAULT_ALPN),
                 "description": "Protocols offered: HTTP/3 (`h3`)."},
        "retry": {"type": "boolean", "default": True,
                  "description": "Validate a client's address with a Retry before anything "
                                 "else (one round trip more on a first connection). `false` "
                                 "saves that round trip where a balancer in front already "
                                 "validates, and lets spoofed packets cost a handshake each."},
        "limits": LIMITS,
    }}

BINDING = BindingType("quic", {
    "server": KindSpec(
        role=DatagramListenerBinding, build=_build, exit=Exit.REQUIRED,
        exit_roles=(QuicSessionBinding,), vault=True, options=OPTIONS,
        when={"type": "object", "additionalProperties": False, "properties": {
            "authority": {"type": "string", "description": "Pattern for the server name the "
                                                           "client asked for (case-insensitive)."}}},
        summary=lambda o: f"udp {o.get('host', DEFAULT_HOST)}:{o.get('port')}",
    ),
})

__all__ = ["BINDING"]
