"""tls client (docs/config-reference.md): TLS toward an `https` upstream, trusting the vault's
`trust` entries (or, with `trustcacerts: true`, the system's CA certificates).

It sits between an http client and its tcp client. The server's certificate must chain to what is
trusted and name the host the tcp client connects to (or `sni`), checked by Twisted's
`optionsForClientTLS` (service_identity): an upstream with a certificate that does not is a failed
connection, retried like any other, never a stream of unverified data.
"""

from __future__ import annotations

from typing import Any

from cryptography.hazmat.primitives.serialization import Encoding
from twisted.internet.endpoints import wrapClientTLS
from twisted.internet.ssl import Certificate, optionsForClientTLS, platformTrust, trustRootFromCertificates

from ssekd.bindings._schemas import STRING_LIST
from ssekd.config.errors import ConfigError, ConfigIssue
from ssekd.config.model import Binding
from ssekd.spi.binding import BuildContext, Exit, KindSpec
from ssekd.spi.connection import Connector
from ssekd.vaults import open_vault


class TlsClient:
    """Runtime of a tls client: its tcp client's connections, wrapped in verified TLS."""

    secure = True

    def __init__(self, name: str, inner: Connector, creator: Any) -> None:
        self.name = name
        self.inner = inner
        self._creator = creator

    @property
    def address(self) -> tuple[str, int] | None:
        return self.inner.address

    def endpoint(self) -> Any:
        return wrapClientTLS(self._creator, self.inner.endpoint())


def _trust_root(ctx: BuildContext, binding: Binding) -> Any:
    """What the server's certificate must chain to: named `trust` entries, else the whole trust
    store of the vault, else - with `trustcacerts: true` - the platform's CA certificates."""
    options = binding.options
    base: tuple[str | int, ...] = ("bindings", binding.name)
    aliases = list(options.get("trust") or ())
    if options.get("trustcacerts"):
        if aliases:
            raise ConfigError([ctx.issue(base + ("options", "trustcacerts"),
                                         "expected either `trust` or `trustcacerts: true`: ssekd "
                                         "does not combine the system's CA certificates with "
                                         "vault entries")])
        return platformTrust()
    if binding.vault is None:
        raise ConfigError([ctx.issue(base, f"tls client {binding.name!r} needs a `vault` with "
                                           f"a trust store, or `trustcacerts: true`")])
    vault = open_vault(ctx.config, binding.vault)
    issues: list[ConfigIssue] = []
    entries = []
    for i, alias in enumerate(aliases):
        entry = vault.entry("trust", alias)
        if entry is None:
            issues.append(ctx.issue(base + ("options", "trust", i), vault.missing("trust", alias)))
        else:
            entries.append(entry)
    if issues:
        raise ConfigError(issues)
    if not aliases:
        store = vault.stores.get("trust")
        entries = list(store.entries.values()) if store else []
    if not entries:
        raise ConfigError([ctx.issue(base + ("options",),
                                     f"tls client {binding.name!r} trusts nothing: vault "
                                     f"{binding.vault!r} has no trust store entries")])
    return trustRootFromCertificates(
        [Certificate.loadPEM(e.certificate.public_bytes(Encoding.PEM)) for e in entries])


def _build(ctx: BuildContext, binding: Binding) -> TlsClient:
    assert binding.exit is not None  # the schema requires it
    inner = ctx.exit(binding.exit, Connector)
    base: tuple[str | int, ...] = ("bindings", binding.name)
    if inner.address is None or inner.secure:
        raise ConfigError([ctx.issue(base + ("exit",),
                                     f"expected a tcp client with options.host and port as the "
                                     f"exit of tls client {binding.name!r}")])
    names = binding.options.get("sni") or [inner.address[0]]
    creator = optionsForClientTLS(str(names[0]), trustRoot=_trust_root(ctx, binding),
                                  acceptableProtocols=[p.encode("ascii") for p in
                                                       binding.options.get("alpn") or ()] or None)
    return TlsClient(binding.name, inner, creator)


OPTIONS = {"type": "object", "additionalProperties": False,
           "description": "Opens TLS (1.2 and 1.3) to the upstream its tcp client connects to, "
                          "verifying the server's certificate: it must chain to what is trusted "
                          "and name the host (or `sni`).",
           "properties": {
    "trust": {**STRING_LIST, "x-ssekd-default": "every entry of the vault's `trust` store",
              "description": "Aliases of the vault's `trust` store entries (CA or server "
                             "certificates) the upstream's certificate must chain to."},
    "trustcacerts": {"type": "boolean", "default": False,
                     "description": "Trust the system's CA certificates instead of vault "
                                    "entries (for a public upstream); not combined with `trust`."},
    "sni": {**STRING_LIST, "maxItems": 1, "x-ssekd-default": "the tcp client's `host`",
            "description": "The server name sent and checked against the certificate."},
    "alpn": {"type": "array", "items": {"enum": ["http/1.1"]}, "x-ssekd-default": "none offered",
             "description": "Protocols offered by ALPN; the http client speaks HTTP/1.1."},
}}

KIND = KindSpec(role=Connector, build=_build, exit=Exit.REQUIRED,
                exit_roles=(Connector,), vault=True, options=OPTIONS)
