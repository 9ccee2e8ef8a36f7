"""tls server (docs/config-reference.md): keys from a vault, SNI, ALPN, mutual TLS, routes by
authority and alpn.

Every key named in `options.keys` (or found through `options.signers`) gets one OpenSSL context,
built when the binding is built and shared by all its connections. A connection starts on the
first key's context; the SNI callback moves it to the context whose certificate names the
requested host, so an unknown name (or none) is served by the first key.

ALPN follows Zilla: the *client's* order decides, among the protocols listed in `alpn` that the
exit reached for that protocol can speak (an exit's `versions`, e.g. an http binding limited to
`[http/1.1]`, is respected). Zilla's seed config lists `http/1.1` before `h2`, and a browser must
still get h2 from it - with server preference it would be held to six SSE streams per origin.
Without `alpn`, no protocol is negotiated (HTTP/1.1).

The exit is chosen after the handshake, when the server name and the protocol are known:
`_Handshake` stands in as the TLS layer's application protocol until then, and then hands the
decrypted stream to the exit's protocol. A handshake that fails (garbage, an old protocol
version, a missing or untrusted client certificate) or stalls ends only its own connection, with
one `BINDING_TLS_HANDSHAKE_FAILED` event line.

Client certificates as credentials (`options.authorization`, as in Zilla): the chain a client
presented, once the handshake verified it, goes to the guard named there (an `x509` guard),
whose session (identity, roles) decides the routes with `guarded` and travels with the
connection to the layers inside (`ConnectionInfo.sessions`: an http server's routes may require
its roles too). A route whose `guarded` roles the connection lacks does not match; when no route
does, the connection is closed right after the handshake. ALPN is settled before the client's
certificate arrives (TLS 1.3 sends it last), so it is negotiated on the routes' other conditions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from cryptography import x509
from OpenSSL import SSL, crypto
from twisted.internet.interfaces import (
    IHandshakeListener,
    IOpenSSLServerConnectionCreator,
    IProtocol,
)
from twisted.internet.protocol import Factory, Protocol
from twisted.logger import Logger
from twisted.protocols.tls import TLSMemoryBIOFactory, TLSMemoryBIOProtocol
from twisted.python.failure import Failure
from zope.interface import implementer

from ssekd.bindings import tls_client
from ssekd.bindings._schemas import STRING_LIST
from ssekd.config.errors import ConfigError, ConfigIssue
from ssekd.config.model import Binding
from ssekd.patterns import Pattern
from ssekd.spi.binding import BindingType, BuildContext, Dependencies, Exit, KindSpec
from ssekd.spi.connection import ConnectionInfo, StreamBinding
from ssekd.spi.guard import CertificateGuard, Refusal, Session
from ssekd.telemetry.events import EventLog
from ssekd.telemetry.metrics import Metrics
from ssekd.vaults import FilesystemVault, StoreEntry, open_vault

#: A client must finish its handshake within this many seconds (a stalled one holds a socket).
HANDSHAKE_TIMEOUT = 10.0

#: TLS 1.2 suites: forward-secret AEAD only, which is also what HTTP/2 requires (RFC 9113 §9.2.2).
TLS12_CIPHERS = b"ECDHE+AESGCM:ECDHE+CHACHA20"

HANDSHAKE_FAILED = "BINDING_TLS_HANDSHAKE_FAILED"

_log = Logger()


def _pattern(value: str) -> Pattern:
    """A `when` value (`ssekd.patterns`); host names and protocol ids ignore case."""
    return Pattern.compile(value, ignore_case=True)


@dataclass(frozen=True)
class TlsCondition:
    authority: Pattern | None
    alpn: Pattern | None

    def matches(self, authority: str | None, alpn: str | None) -> bool:
        if self.authority is not None and (authority is None
                                           or self.authority.match(authority) is None):
            return False
        return self.alpn is None or (alpn is not None and self.alpn.match(alpn) is not None)


@dataclass(frozen=True)
class TlsRoute:
    conditions: tuple[TlsCondition, ...]
    exit: StreamBinding
    #: guard name -> roles the connection's session must have (`guarded`).
    guarded: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def matches(self, authority: str | None, alpn: str | None) -> bool:
        return not self.conditions or any(c.matches(authority, alpn) for c in self.conditions)

    def missing(self, sessions: Mapping[str, Session]) -> str | None:
        """Why the connection's sessions do not meet `guarded`, or None when they do."""
        for guard, roles in self.guarded.items():
            session = sessions.get(guard)
            if session is None:
                return "no client certificate"
            lacking = sorted(set(roles) - session.roles)
            if lacking:
                return f"{session.identity or 'certificate'} lacks role(s) {' '.join(lacking)}"
        return None


#: Anything a route's `guarded` can ask: ALPN is chosen before a client certificate is known.
ANY_SESSION: Mapping[str, Session] | None = None


@dataclass(frozen=True)
class ServerKey:
    """One key of the binding: its alias, the host names its certificate covers, its context."""

    alias: str
    names: tuple[str, ...]
    context: SSL.Context

    def covers(self, host: str) -> bool:
        return covers(self.names, host)


def covers(names: Sequence[str], host: str) -> bool:
    """Whether a certificate naming `names` (`certificate_names`) serves `host`: the same
    name, or a wildcard one label deep (`*.example.com` serves `a.example.com`)."""
    for name in names:
        if name == host:
            return True
        if name.startswith("*.") and "." in host and host.split(".", 1)[1] == name[2:]:
            return True
    return False


def every_key(vault: FilesystemVault) -> list[StoreEntry]:
    """The keys of a vault's `keys` store that hold a private key: what a server serves with
    when its options name none (Zilla's default)."""
    store = vault.stores.get("keys")
    return [e for e in store.entries.values() if e.key is not None] if store else []


def certificate_names(cert: x509.Certificate) -> tuple[str, ...]:
    """DNS names of the certificate (SAN, else CN), lower-case, for SNI matching."""
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        names = [n.lower() for n in san.get_values_for_type(x509.DNSName)]
    except x509.ExtensionNotFound:
        names = []
    if not names:
        cns = cert.subject.get_attributes_for_oid(x509.oid.NameOID.COMMON_NAME)
        names = [str(cns[0].value).lower()] if cns else []
    return tuple(names)


class TlsServer:
    """Runtime of a tls server binding: a `StreamBinding` that wraps connections in TLS."""

    def __init__(self, name: str, keys: Sequence[ServerKey], sni: Sequence[str] | None,
                 alpn: Sequence[str] | None, routes: Sequence[TlsRoute],
                 default: StreamBinding | None, events: EventLog, reactor: Any,
                 handshake_timeout: float = HANDSHAKE_TIMEOUT,
                 metrics: Metrics | None = None,
                 guard: tuple[str, CertificateGuard] | None = None) -> None:
        self.name = name
        #: (name, runtime) of the guard `options.authorization` names, which client
        #: certificates are checked by.
        self.guard = guard
        self.metrics = metrics or Metrics()
        self.keys = list(keys)
        self.sni = {n.lower() for n in sni} if sni else None
        self.alpn = tuple(alpn) if alpn else ()
        self.routes = list(routes)
        self.default = default
        self.events = events
        self.reactor = reactor
        self.handshake_timeout = handshake_timeout
        for key in self.keys:
            key.context.set_tlsext_servername_callback(self._on_server_name)
            if self.alpn:
                key.context.set_alpn_select_callback(self._select_alpn)
        # The wrapped factory is never asked for a protocol: `build_protocol` passes its own.
        creator: Any = _ConnectionCreator(self.keys[0].context)
        wrapped: Any = Factory()
        self._factory = TLSMemoryBIOFactory(creator, False, wrapped, clock=reactor)

    @property
    def versions(self) -> None:
        """TLS carries whatever its exits speak; ALPN is negotiated per exit (`_select_alpn`)."""
        return None

    # -- per connection ------------------------------------------------------------------

    def build_protocol(self, conn: ConnectionInfo) -> IProtocol | None:
        protocol: Any = self._factory.protocol(self._factory, _Handshake(self, conn))
        return cast(IProtocol, protocol)

    def authority(self, connection: SSL.Connection) -> str | None:
        """The SNI name when `sni` accepts it (no `sni` option: any name), else None."""
        raw = connection.get_servername()
        if not raw:
            return None
        host = raw.decode("ascii", "replace").lower()
        return host if self.sni is None or host in self.sni else None

    def key_for(self, host: str | None) -> ServerKey:
        if host is not None:
            for key in self.keys:
                if key.covers(host):
                    return key
        return self.keys[0]

    def route(self, authority: str | None, alpn: str | None,
              sessions: Mapping[str, Session] | None = ANY_SESSION) -> StreamBinding | None:
        """The exit for a connection: the first route whose conditions match and whose
        `guarded` roles `sessions` has (`ANY_SESSION`: as if it had them all), else `exit`."""
        for route in self.routes:
            if route.matches(authority, alpn) and (sessions is None
                                                   or route.missing(sessions) is None):
                return route.exit
        return self.default

    def sessions(self, connection: SSL.Connection) -> dict[str, Session]:
        """The session the client's verified certificate opens with the binding's guard; none
        without a guard or a certificate (as in Zilla, no certificate opens no session)."""
        if self.guard is None:
            return {}
        leaf = connection.get_peer_certificate(as_cryptography=True)
        if leaf is None:
            return {}
        # On the server side OpenSSL's peer chain leaves the leaf out: the guard gets it first.
        sent = connection.get_peer_cert_chain(as_cryptography=True) or []
        name, guard = self.guard
        verdict = guard.verify_chain([leaf, *(c for c in sent if c != leaf)])
        return {} if isinstance(verdict, Refusal) else {name: verdict}

    def _refused(self, authority: str | None, alpn: str | None,
                 sessions: Mapping[str, Session]) -> None:
        """No route took a connection: say why with the guard, when a guarded route would have
        taken it but for its roles."""
        if self.guard is None:
            return
        for route in self.routes:
            if route.matches(authority, alpn):
                why = route.missing(sessions)
                if why is not None:
                    self.guard[1].report(f"{why}: no route of tls server {self.name} takes "
                                         f"the connection")
                    return

    def _on_server_name(self, connection: SSL.Connection) -> None:
        key = self.key_for(self.authority(connection))
        if key.context is not connection.get_context():
            connection.set_context(key.context)

    def _select_alpn(self, connection: SSL.Connection, offered: list[bytes]) -> Any:
        authority = self.authority(connection)
        for raw in offered:
            proto = raw.decode("ascii", "replace")
            if proto not in self.alpn:
                continue
            exit_ = self.route(authority, proto)
            if exit_ is not None and (exit_.versions is None or proto in exit_.versions):
                return raw
        return SSL.NO_OVERLAPPING_PROTOCOLS

    def handshake_done(self, tls: TLSMemoryBIOProtocol, conn: ConnectionInfo) -> IProtocol | None:
        """The exit's protocol for a connection whose handshake just completed."""
        authority = self.authority(tls.getHandle())
        negotiated = tls.negotiatedProtocol
        alpn = negotiated.decode("ascii", "replace") if negotiated else None
        self.metrics.counter("tls.handshakes", self.name, outcome="ok",
                             protocol=alpn or "none").value += 1
        sessions = self.sessions(tls.getHandle())
        exit_ = self.route(authority, alpn, sessions)
        if exit_ is None:
            self._refused(authority, alpn, sessions)
            return None
        return exit_.build_protocol(ConnectionInfo(local=conn.local, peer=conn.peer, secure=True,
                                                   server_name=authority, alpn=alpn,
                                                   sessions={**conn.sessions, **sessions}))

    def handshake_failed(self, conn: ConnectionInfo, why: str) -> None:
        peer = conn.peer
        where = f"{getattr(peer, 'host', peer)}:{getattr(peer, 'port', '')}"
        self.metrics.counter("tls.handshakes", self.name, outcome="failed",
                             protocol="none").value += 1
        self.events.emit(self.name, HANDSHAKE_FAILED, f"{where} {why}")


@implementer(IOpenSSLServerConnectionCreator)
class _ConnectionCreator:
    """Every connection starts on the first key's context; SNI may move it (see TlsServer)."""

    def __init__(self, context: SSL.Context) -> None:
        self.context = context

    def serverConnectionForTLS(self, protocol: TLSMemoryBIOProtocol) -> SSL.Connection:
        return SSL.Connection(self.context, None)


@implementer(IHandshakeListener)
class _Handshake(Protocol):
    """The TLS layer's application protocol until the handshake completes.

    It then builds the exit's protocol (now that SNI and ALPN are known), puts it in its own
    place under the TLS layer, so that the rest of the connection runs exactly as if the exit's
    protocol had been there from the start, and connects it.
    """

    def __init__(self, server: TlsServer, conn: ConnectionInfo) -> None:
        self.server = server
        self.conn = conn
        self._deadline: Any = None  # an IDelayedCall
        self._reported = False

    def connectionMade(self) -> None:
        self._deadline = self.server.reactor.callLater(self.server.handshake_timeout,
                                                       self._too_slow)

    def handshakeCompleted(self) -> None:
        self._disarm()
        tls: Any = self.transport
        assert isinstance(tls, TLSMemoryBIOProtocol)
        try:
            inner = self.server.handshake_done(tls, self.conn)
        except Exception:  # noqa: BLE001 - a bug in an exit must cost one connection only
            inner = None
            _log.failure("tls {name}: building the exit's protocol",
                         name=self.server.name)  # a bug in an exit; this connection only
        if inner is None:
            tls.loseConnection()
            return
        tls.wrappedProtocol = inner
        cast(Any, inner).makeConnection(tls)

    def dataReceived(self, data: bytes) -> None:
        """Nothing arrives before the handshake completes; afterwards the exit gets it."""

    def connectionLost(self, reason: Failure | None = None) -> None:
        self._disarm()
        error = reason.value if reason is not None else None
        if not self._reported and isinstance(error, SSL.Error):
            self._reported = True
            self.server.handshake_failed(self.conn, _describe(error))

    def _too_slow(self) -> None:
        self._deadline = None
        self._reported = True
        self.server.handshake_failed(self.conn, f"handshake not completed within "
                                                f"{self.server.handshake_timeout:g}s")
        transport: Any = self.transport
        if transport is not None:
            transport.abortConnection()

    def _disarm(self) -> None:
        if self._deadline is not None and self._deadline.active():
            self._deadline.cancel()
        self._deadline = None


def _describe(error: BaseException) -> str:
    """OpenSSL's reason strings (`wrong version number`, `peer did not return a certificate`)."""
    args = error.args[0] if error.args else None
    if isinstance(args, list):
        reasons = [str(item[2]) for item in args if isinstance(item, tuple) and len(item) == 3]
        if reasons:
            return "; ".join(reasons)
    return str(error) or error.__class__.__name__


# -- building --------------------------------------------------------------------------------


def build_context(binding: str, entry: StoreEntry, trust: Sequence[x509.Certificate],
                  mutual: str) -> SSL.Context:
    """One server context for one key: TLS 1.2+, AEAD suites, the trust store when mutual."""
    assert entry.key is not None
    ctx = SSL.Context(SSL.TLS_SERVER_METHOD)
    ctx.set_min_proto_version(SSL.TLS1_2_VERSION)
    ctx.set_options(SSL.OP_NO_COMPRESSION | SSL.OP_CIPHER_SERVER_PREFERENCE
                    | SSL.OP_NO_RENEGOTIATION)
    ctx.set_cipher_list(TLS12_CIPHERS)
    # Idle SSE connections are the common case: give their read/write buffers back.
    ctx.set_mode(SSL.MODE_RELEASE_BUFFERS)
    ctx.use_certificate(entry.certificate)
    ctx.use_privatekey(entry.key)  # type: ignore[arg-type]
    for cert in entry.chain:
        if cert.issuer != cert.subject:  # roots are the client's business, not ours to send
            ctx.add_extra_chain_cert(cert)
    ctx.check_privatekey()
    # Sessions must be tied to this binding, or OpenSSL refuses resumption once verify is on.
    ctx.set_session_id(f"ssekd:{binding}"[:32].encode())
    if mutual != "none":
        store = ctx.get_cert_store()
        assert store is not None
        for cert in trust:
            store.add_cert(crypto.X509.from_cryptography(cert))
            ctx.add_client_ca(cert)
        mode = SSL.VERIFY_PEER
        if mutual == "required":
            mode |= SSL.VERIFY_FAIL_IF_NO_PEER_CERT
        ctx.set_verify(mode)
    return ctx


def aliases(binding: Binding, ctx: BuildContext, vault: FilesystemVault, option: str, role: str,
            issues: list[ConfigIssue]) -> list[StoreEntry]:
    """The entries of the vault's `role` store that `options.<option>` names; each alias it
    lacks is added to `issues`, with its path."""
    found = []
    for i, alias in enumerate(binding.options.get(option) or ()):
        entry = vault.entry(role, alias)
        if entry is None or (role == "keys" and entry.key is None):
            issues.append(ctx.issue(("bindings", binding.name, "options", option, i),
                                    vault.missing(role, alias)))
        else:
            found.append(entry)
    return found


def _signed_keys(vault: FilesystemVault, signers: Sequence[StoreEntry]) -> list[StoreEntry]:
    """Keys of the keys store whose certificate was issued by one of `signers` (as Zilla)."""
    store = vault.stores.get("keys")
    if store is None:
        return []
    subjects = {s.certificate.subject for s in signers}
    return [e for e in store.entries.values() if e.key is not None
            and (e.certificate.issuer in subjects
                 or any(c.subject in subjects for c in e.chain))]


def _build(ctx: BuildContext, binding: Binding) -> TlsServer:
    options = binding.options
    base: tuple[str | int, ...] = ("bindings", binding.name)
    if binding.vault is None:
        raise ConfigError([ctx.issue(base, f"tls server {binding.name!r} needs a `vault` "
                                           f"holding its keys")])
    if options.get("trustcacerts"):
        raise ConfigError([ctx.issue(base + ("options", "trustcacerts"),
                                     "trustcacerts: true is not supported: ssekd trusts only "
                                     "the vault's `trust` entries for client certificates; "
                                     "put the CA certificates you trust there")])
    vault = open_vault(ctx.config, binding.vault)
    issues: list[ConfigIssue] = []
    keys = aliases(binding, ctx, vault, "keys", "keys", issues)
    trust = aliases(binding, ctx, vault, "trust", "trust", issues)
    signers = aliases(binding, ctx, vault, "signers", "signers", issues)
    if issues:
        raise ConfigError(issues)
    if signers:
        keys += [k for k in _signed_keys(vault, signers) if k not in keys]
    if not options.get("keys") and not signers:
        keys = every_key(vault)
    if not keys:
        raise ConfigError([ctx.issue(base + ("options",), f"tls server {binding.name!r} has no "
                                     f"key to serve with: vault {binding.vault!r} keys store "
                                     f"holds no private key")])
    mutual = options.get("mutual") or ("required" if trust else "none")
    if mutual != "none" and not trust:
        store = vault.stores.get("trust")
        trust = list(store.entries.values()) if store else []
        if not trust:
            raise ConfigError([ctx.issue(base + ("options", "mutual"),
                                         f"mutual: {mutual} needs trusted certificates: name "
                                         f"them in `trust`, from vault {binding.vault!r}'s "
                                         f"trust store")])
    server_keys = []
    for entry in keys:
        try:
            context = build_context(binding.name, entry, [t.certificate for t in trust], mutual)
        except SSL.Error as e:
            raise ConfigError([ctx.issue(base + ("options", "keys"),
                                         f"key {entry.alias!r} of vault {binding.vault!r} "
                                         f"cannot be used: {_describe(e)}")]) from e
        server_keys.append(ServerKey(entry.alias, certificate_names(entry.certificate), context))

    routes = []
    for route in binding.routes:
        conditions = tuple(
            TlsCondition(_pattern(w["authority"]) if "authority" in w else None,
                         _pattern(w["alpn"]) if "alpn" in w else None)
            for w in route.when)
        assert route.exit is not None
        routes.append(TlsRoute(conditions, ctx.exit(route.exit, StreamBinding), route.guarded))
    default = ctx.exit(binding.exit, StreamBinding) if binding.exit else None
    return TlsServer(binding.name, server_keys, options.get("sni"), options.get("alpn"),
                     routes, default, ctx.events, ctx.reactor, metrics=ctx.metrics,
                     guard=_guard(ctx, binding, mutual))


def _guard(ctx: BuildContext, binding: Binding,
           mutual: str) -> tuple[str, CertificateGuard] | None:
    """The guard of `options.authorization` (client certificates as credentials); the routes'
    `guarded` may name only it: nothing else can give a connection a session."""
    base: tuple[str | int, ...] = ("bindings", binding.name)
    names = list(binding.options.get("authorization") or {})
    issues = []
    for i, route in enumerate(binding.routes):
        for name in route.guarded:
            if name not in names:
                issues.append(ctx.issue(base + ("routes", i, "guarded", name),
                                        f"a tls route can require only the guard of its "
                                        f"binding's options.authorization, which checks client "
                                        f"certificates; {name!r} is not named there"))
    if issues:
        raise ConfigError(issues)
    if not names:
        return None
    name = names[0]
    guard = ctx.guard(name)
    path = base + ("options", "authorization", name)
    if not isinstance(guard, CertificateGuard):
        raise ConfigError([ctx.issue(path, f"guard {name!r} does not read client certificates; "
                                           f"expected an x509 guard")])
    if mutual == "none":
        raise ConfigError([ctx.issue(path, "client certificates are never asked for with "
                                           "mutual: none; set mutual: requested (or required) "
                                           "and the CAs to trust")])
    return name, guard


def _depends(options: Mapping[str, Any]) -> Dependencies:
    """The guard that checks client certificates (`options.authorization`)."""
    return Dependencies(guards={g: ("authorization", g)
                                for g in options.get("authorization") or {}})


OPTIONS = {"type": "object", "additionalProperties": False,
           "description": "Terminates TLS (1.2 and 1.3) with keys from its `vault`, then hands the "
                          "decrypted stream to the route matching the server name and the "
                          "negotiated protocol. A failed or stalled handshake ends only its own "
                          "connection.",
           "properties": {
    "keys": {**STRING_LIST, "x-ssekd-default": "every key of the vault's `keys` store",
             "description": "Aliases of the keys to serve with. SNI picks the key whose "
                            "certificate names the requested host; any other name gets the first."},
    "trust": {**STRING_LIST, "description": "Aliases of the vault's `trust` store entries trusted "
                                            "for client certificates."},
    "signers": {**STRING_LIST, "description": "Aliases of CA certificates in the vault's `signers` "
                                              "store: every key of `keys` they issued is served too."},
    "trustcacerts": {"type": "boolean", "default": False,
                     "description": "Zilla's switch for the system's CA certificates. `false` is "
                                    "what ssekd does: only `trust` entries are trusted for client "
                                    "certificates; `true` is refused (trusting every public CA to "
                                    "vouch for clients is not supported)."},
    "sni": {**STRING_LIST, "x-ssekd-default": "any name",
            "description": "Server names accepted. Another name is treated as if none was sent: "
                           "the first key, and only routes without `authority` match."},
    "alpn": {"type": "array", "items": {"type": "string", "minLength": 1, "maxLength": 255},
             "x-ssekd-default": "no ALPN (HTTP/1.1)",
             "description": "Protocols offered by ALPN (`h2`, `http/1.1`, or any name a route's "
                            "`alpn` takes, such as `echo`). As in Zilla, the client's order decides "
                            "among them, limited to what the exit for that protocol speaks."},
    "mutual": {"enum": ["required", "requested", "none"],
               "x-ssekd-default": "`required` when `trust` is given, else `none`",
               "description": "Client certificates: `required` refuses a handshake without a "
                              "trusted one, `requested` asks for one. Without `trust`, the whole "
                              "trust store is used."},
    "authorization": {
        "type": "object", "maxProperties": 1,
        "propertyNames": {"type": "string", "pattern": "^[a-zA-Z]+[a-zA-Z0-9._-]*$"},
        "x-ssekd-default": "none",
        "additionalProperties": {
            "type": "object", "additionalProperties": False,
            "properties": {"credentials": {
                "type": "object", "additionalProperties": False,
                "description": "What the guard is given.",
                "properties": {"certificates": {
                    "const": "pem", "description": "The client's verified certificate chain "
                                                   "(leaf first)."}}}}},
        "description": "One guard (an `x509` guard) that turns the client's verified "
                       "certificate into a session: identity and roles for the routes' "
                       "`guarded`, carried on to the layers inside (an http server's routes). "
                       "No certificate, no session."},
}}

BINDING = BindingType("tls", {
    "server": KindSpec(
        role=StreamBinding, build=_build, exit=Exit.REQUIRED, exit_roles=(StreamBinding,),
        vault=True, depends=_depends,
        options=OPTIONS,
        when={"type": "object", "additionalProperties": False, "properties": {
            "authority": {"type": "string", "description": "Pattern for the SNI server name "
                                                           "(case-insensitive)."},
            "alpn": {"type": "string", "description": "Pattern for the negotiated ALPN protocol."}}},
    ),
    "client": tls_client.KIND,
})

__all__ = ["BINDING", "TlsServer", "aliases", "build_context", "certificate_names", "covers",
           "every_key"]
