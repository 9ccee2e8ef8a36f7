"""The `x509` guard (docs/config-reference.md): who a client is, from the certificate it presented
in a TLS handshake.

A tls server whose `options.authorization` names the guard hands it the chain the client sent
(leaf first) once the handshake has verified it against the server's trusted CAs: the guard
checks no signature itself, it reads the leaf. It turns the leaf into fields:

- `subject.dn`, `issuer.dn`: the whole name in RFC 4514 form, in lower case
  (`cn=client-1,ou=development,o=aklivity,c=us`);
- `subject.<attribute>`, `issuer.<attribute>`: each attribute of the name, by its RFC 4514
  keyword in lower case (`cn`, `o`, `ou`, `c`, `l`, `st`, `street`, `dc`, `uid`) or, for
  others, its dotted OID; an attribute given twice (two `ou`) has both values, in the
  certificate's order;
- `san.dns`, `san.email`, `san.uri`, `san.ip`: the subject alternative names of each kind;
- `x5t.s256`: the SHA-256 thumbprint of the certificate, base64url without padding.

The session's identity is the first value of the `identity` field (default `subject.dn`); each
`attributes` entry names a field too. A role is granted when any of its matches holds; a match
holds when every field it names has a value matching its glob (`*` any text, `?` one character,
case ignored, the whole value); a field the certificate lacks matches nothing. These are Zilla's
rules; the names are compared in Zilla's canonical form only approximately (RFC 4514 text in
lower case, where Zilla collapses inner spaces too).

The session expires when the leaf does (`notAfter`); nothing ends a connection then, as Zilla's
does not.

Only certificates count: `verify` (a token from a request) refuses every one, and the config
loader refuses an http binding's `authorization` naming the guard (`ssekd.spi.guard.CertificateGuard`).
"""

from __future__ import annotations

import base64
import ipaddress
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.x509.oid import NameOID

from ssekd.config.model import Guard as GuardConfig
from ssekd.spi.binding import BuildContext, GuardType
from ssekd.spi.guard import Refusal, Session
from ssekd.telemetry.events import EventLog

FAILED = "GUARD_X509_AUTHORIZATION_FAILED"
DEFAULT_IDENTITY = "subject.dn"

#: RFC 4514's attribute keywords (those a name is written with); other attributes by their OID.
KEYWORDS: Mapping[x509.ObjectIdentifier, str] = {
    NameOID.COMMON_NAME: "cn", NameOID.LOCALITY_NAME: "l", NameOID.STATE_OR_PROVINCE_NAME: "st",
    NameOID.ORGANIZATION_NAME: "o", NameOID.ORGANIZATIONAL_UNIT_NAME: "ou",
    NameOID.COUNTRY_NAME: "c", NameOID.STREET_ADDRESS: "street",
    NameOID.DOMAIN_COMPONENT: "dc", NameOID.USER_ID: "uid"}

Fields = Mapping[str, Sequence[str]]


@dataclass(frozen=True)
class X509Session:
    """What a verified certificate says (the `Session` of this guard)."""

    identity: str | None
    roles: frozenset[str]
    expires_at: float | None
    #: `options.attributes` name -> the value of its field (absent when the leaf lacks it).
    attributes: Mapping[str, str] = field(default_factory=dict)


def certificate_fields(leaf: x509.Certificate) -> dict[str, list[str]]:
    """The fields of `leaf` the guard's options name (module docstring)."""
    fields: dict[str, list[str]] = {}

    def add(name: str, value: str) -> None:
        fields.setdefault(name, []).append(value)

    for prefix, name in (("subject", leaf.subject), ("issuer", leaf.issuer)):
        add(f"{prefix}.dn", name.rfc4514_string().lower())
        for rdn in name.rdns:
            for attribute in rdn:
                value = attribute.value
                if isinstance(value, str):
                    key = KEYWORDS.get(attribute.oid, attribute.oid.dotted_string)
                    add(f"{prefix}.{key}", value)
    try:
        san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (x509.ExtensionNotFound, ValueError):
        san = None
    if san is not None:
        for kind, general in (("dns", x509.DNSName), ("email", x509.RFC822Name),
                              ("uri", x509.UniformResourceIdentifier)):
            for value in san.get_values_for_type(general):
                add(f"san.{kind}", str(value))
        for ip in san.get_values_for_type(x509.IPAddress):
            if isinstance(ip, ipaddress.IPv4Address | ipaddress.IPv6Address):
                add("san.ip", str(ip))
    digest = leaf.fingerprint(hashes.SHA256())
    add("x5t.s256", base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii"))
    return fields


def _translate(pattern: str) -> str:
    """A role match's glob as a regular expression: `*` any text, `?` one character, the rest
    literal (used with case ignored, against the whole value)."""
    return "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)


@dataclass(frozen=True)
class Match:
    """One item of a role's list: field -> glob, all of which must hold."""

    conditions: tuple[tuple[str, re.Pattern[str]], ...]

    def holds(self, fields: Fields) -> bool:
        return bool(self.conditions) and all(
            any(glob.fullmatch(value) for value in fields.get(name, ()))
            for name, glob in self.conditions)


def compile_roles(options: Mapping[str, Any]) -> dict[str, tuple[Match, ...]]:
    """`options.roles`: role -> the matches any of which grants it."""
    def match(item: Mapping[str, Any]) -> Match:
        return Match(tuple((str(name), re.compile(_translate(str(glob)), re.IGNORECASE | re.DOTALL))
                           for name, glob in item.items()))
    return {str(role): tuple(match(item) for item in matches)
            for role, matches in (options.get("roles") or {}).items()}


class X509Guard:
    """Runtime of an `x509` guard: a `CertificateGuard`."""

    #: Certificates are not renewed on a connection: nothing to ask for before they expire.
    challenge = 0.0

    def __init__(self, name: str, options: Mapping[str, Any], events: EventLog) -> None:
        self.guard_name = name
        self.events = events
        self.identity = str(options.get("identity", DEFAULT_IDENTITY))
        self.attributes = {str(k): str(v) for k, v in (options.get("attributes") or {}).items()}
        self.roles = compile_roles(options)

    def verify(self, token: str) -> Refusal:
        """A token from a request is never a certificate this guard may trust."""
        return self._refuse("the x509 guard takes client certificates from a tls server, "
                            "not tokens")

    def verify_chain(self, chain: Sequence[x509.Certificate]) -> Session | Refusal:
        if not chain:
            return self._refuse("empty certificate chain")
        leaf = chain[0]
        try:
            fields = certificate_fields(leaf)
        except Exception as e:  # noqa: BLE001 - an odd certificate must cost its connection only
            return self._refuse(f"unreadable certificate ({type(e).__name__})")
        roles = frozenset(role for role, matches in self.roles.items()
                          if any(m.holds(fields) for m in matches))
        attributes = {name: fields[f][0] for name, f in self.attributes.items() if fields.get(f)}
        return X509Session(_first(fields, self.identity), roles,
                           leaf.not_valid_after_utc.timestamp(), attributes)

    def report(self, reason: str) -> None:
        self.events.emit(self.guard_name, FAILED, reason)

    def _refuse(self, reason: str) -> Refusal:
        self.report(reason)
        return Refusal(403, reason, reported=True)


def _first(fields: Fields, name: str) -> str | None:
    values = fields.get(name)
    return values[0] if values else None


def _build(ctx: BuildContext, guard: GuardConfig) -> X509Guard:
    return X509Guard(guard.name, guard.options, ctx.events)


GUARD = GuardType("x509", _build)

__all__ = ["GUARD", "X509Guard", "X509Session", "certificate_fields"]
