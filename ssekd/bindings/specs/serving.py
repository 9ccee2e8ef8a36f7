"""The tcp, tls and http shapes a spec-composed binding is made of, the same whatever the spec
format: where a server listens, how tcp hands plain and TLS ports on, the tls server and client,
and the http server's authorization gathered from the operations' guards."""

from __future__ import annotations

import ipaddress
from collections.abc import Collection, Mapping
from typing import Any, Protocol

ALPN = ["h2", "http/1.1"]
ANY_ADDRESS = "0.0.0.0"  # noqa: S104 - where a server that names a host of its own listens


def listen_host(hosts: set[str]) -> str:
    """The address to listen on for servers with these host names: their own when they are
    all the same `localhost` or IP address (a private server stays private), else any."""
    if len(hosts) != 1:
        return ANY_ADDRESS
    [host] = hosts
    if host.lower() == "localhost":
        return "127.0.0.1"
    try:
        return str(ipaddress.ip_address(host.strip("[]")))
    except ValueError:
        return ANY_ADDRESS


def tcp_server(hosts: set[str], secure: Mapping[int, bool], http_name: str,
               tls_name: str) -> dict[str, Any]:
    """The tcp server on every port of `secure` (port -> whether it is TLS): plain ports exit
    to the http server, TLS ones to the tls server."""
    ports = sorted(secure)
    tcp: dict[str, Any] = {"type": "tcp", "kind": "server",
                           "options": {"host": listen_host(hosts), "port": ports}}
    plain = [p for p in ports if not secure[p]]
    tls = [p for p in ports if secure[p]]
    if plain and tls:
        tcp["routes"] = [{"when": [{"port": plain}], "exit": http_name},
                         {"when": [{"port": tls}], "exit": tls_name}]
    else:
        tcp["exit"] = tls_name if tls else http_name
    return tcp


def tls_server(vault: str | None, http_name: str) -> dict[str, Any]:
    """The tls server of the https ports: keys from the binding's vault, HTTP/2 or 1.1."""
    return {"type": "tls", "kind": "server", "vault": vault, "options": {"alpn": ALPN},
            "exit": http_name}


def tls_client(vault: str | None, tcp_name: str, options: dict[str, Any]) -> dict[str, Any]:
    """The tls client toward an https upstream: trusting the binding's vault, else the
    system's CAs."""
    tls: dict[str, Any] = {"type": "tls", "kind": "client", "exit": tcp_name, "options": options}
    if vault is not None:
        tls["vault"] = vault
    else:
        tls["options"]["trustcacerts"] = True
    return tls


class Guarding(Protocol):
    """What an operation's security asks of the http server, in either format."""

    @property
    def guard(self) -> str: ...

    @property
    def credentials(self) -> Mapping[str, Mapping[str, Any]]: ...

    @property
    def roles(self) -> Collection[str]: ...


def authorize(authorization: dict[str, dict[str, Any]], guarded: dict[str, list[str]],
              guard: Guarding) -> None:
    """Add an operation's guard to the http server's `authorization` (where its token is
    read) and to its route's `guarded` (the roles it requires)."""
    entry = authorization.setdefault(guard.guard, {"credentials": {}})
    for place, values in guard.credentials.items():
        entry["credentials"].setdefault(place, {}).update(values)
    roles = guarded.setdefault(guard.guard, [])
    roles += [r for r in guard.roles if r not in roles]
