"""tls client (docs/config-reference.md): TLS toward an `https` upstream, or toward a kafka
client's brokers, trusting the vault's `trust` entries (or, with `trustcacerts: true`, the
system's CA certificates).

Between an http client and its tcp client (which says where to connect), it makes the
connections itself: the server's certificate must chain to what is trusted and name the host the
tcp client connects to (or `sni`), checked by Twisted's `optionsForClientTLS`
(service_identity): an upstream with a certificate that does not is a failed connection, never a
stream of unverified data. `alpn` is what its connections offer (`h2`, `http/1.1`): the http
client speaks HTTP/2 on those that negotiate `h2`, and asks for connections offering no `h2`
when it speaks HTTP/1.1 (`endpoint_offering`). `trust` and `trustcacerts: true` together trust
both the vault's entries and the system's CA certificates, as Zilla's http.proxy configures.

On a kafka client's way out (its tcp client has no host: the kafka client's `servers` say where,
and librdkafka makes the connections), it makes none: it only says what to trust (`trusted`) and
which name (`server_name`), and the kafka client hands that to librdkafka
(`ssekd.bindings.kafka.way_out`). librdkafka offers no ALPN, so `alpn` changes nothing there
(Zilla's http.kafka.oneway offers `h2` to its broker, which negotiates nothing either).
"""

from __future__ import annotations

import os
import ssl
import warnings
from collections.abc import Sequence
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding
from cryptography.utils import CryptographyDeprecationWarning
from twisted.internet.endpoints import wrapClientTLS
from twisted.internet.ssl import Certificate, optionsForClientTLS, platformTrust, trustRootFromCertificates

from ssekd.bindings._schemas import STRING_LIST
from ssekd.config.errors import ConfigError, ConfigIssue
from ssekd.config.model import Binding
from ssekd.spi.binding import BuildContext, Exit, KindSpec
from ssekd.spi.connection import Connector
from ssekd.vaults import open_vault


class TlsClient:
    """Runtime of a tls client: its tcp client's connections, wrapped in verified TLS; or, on a
    kafka client's way out, what librdkafka is to trust (module docstring)."""

    secure = True

    def __init__(self, name: str, inner: Connector, creator: Any,
                 trusted: tuple[x509.Certificate, ...] | None = None,
                 server_name: str | None = None, alpn: tuple[str, ...] = (),
                 trust_root: Any = None) -> None:
        self.name = name
        self.inner = inner
        self._creator = creator
        #: The protocols offered by ALPN (`options.alpn`).
        self.alpn = alpn
        self._trust_root = trust_root
        self._creators: dict[tuple[str, ...], Any] = {alpn: creator}
        #: The certificates a server's must chain to; None: the system's CA certificates.
        self.trusted = trusted
        #: `sni`, when the config gives one.
        self.server_name = server_name

    @property
    def address(self) -> tuple[str, int] | None:
        return self.inner.address

    def endpoint(self) -> Any:
        if self._creator is None:
            raise ValueError(f"tls client {self.name!r} has no host to connect to: its tcp "
                             f"client has no options.host")
        return wrapClientTLS(self._creator, self.inner.endpoint())

    def endpoint_offering(self, protocols: Sequence[str]) -> Any:
        """`endpoint()`, with `protocols` offered by ALPN instead of `alpn`."""
        offer = tuple(protocols)
        creator = self._creators.get(offer)
        if creator is None:
            if self._creator is None or self.inner.address is None:
                return self.endpoint()  # raises: nowhere to connect
            creator = self._creators[offer] = optionsForClientTLS(
                self.server_name or self.inner.address[0], trustRoot=self._trust_root,
                acceptableProtocols=[p.encode("ascii") for p in offer] or None)
        return wrapClientTLS(creator, self.inner.endpoint())


def _trusted(ctx: BuildContext, binding: Binding) -> tuple[x509.Certificate, ...] | None:
    """What the server's certificate must chain to: named `trust` entries, else the whole trust
    store of the vault, else - with `trustcacerts: true` - the platform's CA certificates
    (None)."""
    options = binding.options
    base: tuple[str | int, ...] = ("bindings", binding.name)
    aliases = list(options.get("trust") or ())
    if options.get("trustcacerts") and not aliases:
        return None
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
    return tuple(e.certificate for e in entries)


def _trust_root(trusted: tuple[x509.Certificate, ...] | None, system: bool = False) -> Any:
    """What Twisted checks the server's certificate against: `trusted`, the platform's CA
    certificates (None), or both (`system`)."""
    if trusted is None:
        return platformTrust()
    certificates = [Certificate.loadPEM(c.public_bytes(Encoding.PEM)) for c in trusted]
    if system:
        certificates += _system_certificates()
    return trustRootFromCertificates(certificates)


def _system_certificates() -> list[Certificate]:
    """The system's CA certificates, as OpenSSL's default bundle file holds them (none when
    there is no such file)."""
    paths = ssl.get_default_verify_paths()
    for name in (paths.cafile, paths.openssl_cafile):
        if name and os.path.isfile(name):
            with open(name, "rb") as bundle, warnings.catch_warnings():
                # a few CA certificates of old bundles have serial numbers RFC 5280 forbids:
                # OpenSSL trusts them, and a warning per start would only be noise
                warnings.simplefilter("ignore", CryptographyDeprecationWarning)
                found = x509.load_pem_x509_certificates(bundle.read())
            return [Certificate.loadPEM(c.public_bytes(Encoding.PEM)) for c in found]
    return []


def _build(ctx: BuildContext, binding: Binding) -> TlsClient:
    assert binding.exit is not None  # the schema requires it
    inner = ctx.exit(binding.exit, Connector)
    base: tuple[str | int, ...] = ("bindings", binding.name)
    if inner.secure:
        raise ConfigError([ctx.issue(base + ("exit",),
                                     f"expected a tcp client as the exit of tls client "
                                     f"{binding.name!r}")])
    trusted = _trusted(ctx, binding)
    sni = binding.options.get("sni")
    server_name = str(sni[0]) if sni else None
    alpn = [str(p) for p in binding.options.get("alpn") or ()]
    if inner.address is None:  # a kafka client's way out: librdkafka connects (docstring)
        if binding.options.get("trustcacerts") and binding.options.get("trust"):
            raise ConfigError([ctx.issue(base + ("options", "trustcacerts"),
                                         "expected either `trust` or `trustcacerts: true` on a "
                                         "kafka client's way out: librdkafka is given one "
                                         "trust store")])
        return TlsClient(binding.name, inner, None, trusted, server_name)
    issues = [ctx.issue(base + ("options", "alpn", i),
                        f"expected h2 or http/1.1, the protocols the http client speaks; {p} "
                        f"would be offered to its upstream")
              for i, p in enumerate(alpn) if p not in ("h2", "http/1.1")]
    if issues:
        raise ConfigError(issues)
    root = _trust_root(trusted, bool(binding.options.get("trustcacerts")))
    creator = optionsForClientTLS(server_name or inner.address[0], trustRoot=root,
                                  acceptableProtocols=[p.encode("ascii") for p in alpn] or None)
    return TlsClient(binding.name, inner, creator, trusted, server_name, tuple(alpn), root)


OPTIONS = {"type": "object", "additionalProperties": False,
           "description": "Opens TLS (1.2 and 1.3) to the upstream its tcp client connects to, "
                          "verifying the server's certificate: it must chain to what is trusted "
                          "and name the host (or `sni`). As the exit of a kafka client (its tcp "
                          "client then has no host), it gives librdkafka what to trust and the "
                          "client connects to its brokers over TLS (`SSL`, or `SASL_SSL` with "
                          "an `authorization`).",
           "properties": {
    "trust": {**STRING_LIST, "x-ssekd-default": "every entry of the vault's `trust` store",
              "description": "Aliases of the vault's `trust` store entries (CA or server "
                             "certificates) the upstream's certificate must chain to."},
    "trustcacerts": {"type": "boolean", "default": False,
                     "description": "Trust the system's CA certificates (for a public "
                                    "upstream); with `trust`, those entries as well (toward an "
                                    "http upstream)."},
    "sni": {**STRING_LIST, "maxItems": 1, "x-ssekd-default": "the tcp client's `host`",
            "description": "The server name sent and checked against the certificate. On a "
                           "kafka client's way out, librdkafka sends each broker's own host "
                           "name and checks that, so `sni` must be the host of every "
                           "`servers` entry."},
    "alpn": {"type": "array", "items": {"type": "string", "minLength": 1},
             "x-ssekd-default": "none offered",
             "description": "Protocols offered by ALPN toward an http upstream: `h2` "
                            "(the http client then speaks HTTP/2 when the upstream chooses "
                            "it) and `http/1.1`; on a kafka client's "
                            "way out none is offered whatever this says (librdkafka has no "
                            "ALPN, and a Kafka broker negotiates none)."},
}}

KIND = KindSpec(role=Connector, build=_build, exit=Exit.REQUIRED,
                exit_roles=(Connector,), vault=True, options=OPTIONS)
