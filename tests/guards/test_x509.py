"""The x509 guard: the fields it reads from a client's leaf certificate, the identity, roles and
attributes they give (Zilla's rules: matches OR'd, fields of a match AND'd, globs case-blind,
an absent field matching nothing), its refusals, and where a config may and may not use it
(`ssekd check`: a tls server's `authorization` only, and a tls route's `guarded` only with it)."""

from __future__ import annotations

import base64
import datetime
import ipaddress
import shutil
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from ssekd.cli import main
from ssekd.guards.x509 import FAILED, X509Guard, X509Session, certificate_fields
from ssekd.spi.guard import CertificateGuard, Guard, Refusal
from ssekd.telemetry.events import EventLog, severity
from tests.support.data import DATA

NOT_AFTER = datetime.datetime(2036, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)


def _name(*parts: tuple[x509.ObjectIdentifier, str]) -> x509.Name:
    return x509.Name([x509.NameAttribute(oid, value) for oid, value in parts])


def certificate(subject: x509.Name, issuer: x509.Name,
                san: list[x509.GeneralName] | None = None) -> x509.Certificate:
    key = ec.generate_private_key(ec.SECP256R1())
    builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer)
               .public_key(key.public_key()).serial_number(7)
               .not_valid_before(datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC))
               .not_valid_after(NOT_AFTER))
    if san:
        builder = builder.add_extension(x509.SubjectAlternativeName(san), critical=False)
    return builder.sign(key, hashes.SHA256())


INTERNAL_CA = _name((NameOID.COUNTRY_NAME, "US"), (NameOID.ORGANIZATION_NAME, "Example Inc"),
                    (NameOID.COMMON_NAME, "Internal CA"))
PLATFORM = certificate(
    _name((NameOID.COUNTRY_NAME, "US"), (NameOID.ORGANIZATION_NAME, "Example Inc"),
          (NameOID.ORGANIZATIONAL_UNIT_NAME, "Platform"),
          (NameOID.ORGANIZATIONAL_UNIT_NAME, "Engineering"),
          (NameOID.COMMON_NAME, "platform.example.com"),
          (NameOID.EMAIL_ADDRESS, "ops@example.com")),
    INTERNAL_CA,
    [x509.DNSName("platform.internal.example.com"), x509.DNSName("events.internal.example.com"),
     x509.UniformResourceIdentifier("spiffe://example.com/ns/prod/sa/platform"),
     x509.RFC822Name("platform@example.com"), x509.IPAddress(ipaddress.ip_address("10.0.0.7"))])


def test_the_fields_of_a_leaf() -> None:
    fields = certificate_fields(PLATFORM)
    assert fields["subject.dn"] == ["1.2.840.113549.1.9.1=ops@example.com,"
                                    "cn=platform.example.com,ou=engineering,ou=platform,"
                                    "o=example inc,c=us"]
    assert fields["subject.cn"] == ["platform.example.com"]
    assert fields["subject.ou"] == ["Platform", "Engineering"], "both, in the certificate's order"
    assert fields["subject.o"] == ["Example Inc"] and fields["subject.c"] == ["US"]
    assert fields["subject.1.2.840.113549.1.9.1"] == ["ops@example.com"]
    assert fields["issuer.dn"] == ["cn=internal ca,o=example inc,c=us"]
    assert fields["issuer.cn"] == ["Internal CA"]
    assert fields["san.dns"] == ["platform.internal.example.com", "events.internal.example.com"]
    assert fields["san.uri"] == ["spiffe://example.com/ns/prod/sa/platform"]
    assert fields["san.email"] == ["platform@example.com"]
    assert fields["san.ip"] == ["10.0.0.7"]
    digest = base64.urlsafe_b64encode(PLATFORM.fingerprint(hashes.SHA256())).rstrip(b"=")
    assert fields["x5t.s256"] == [digest.decode()]


def guard(events: EventLog | None = None, **options: object) -> X509Guard:
    return X509Guard("x509_0", options, events or EventLog("test"))


def test_identity_attributes_and_roles_of_a_verified_chain() -> None:
    g = guard(identity="subject.cn",
              attributes={"organization": "subject.o", "tenant": "san.uri",
                          "missing": "subject.street"},
              roles={"partner": [{"issuer.cn": "Partner Issuing CA"}],
                     "internal": [{"issuer.cn": "Internal CA", "subject.ou": "Platform"},
                                  {"issuer.cn": "Internal CA",
                                   "san.dns": "*.internal.example.com"}],
                     "globbed": [{"subject.cn": "PLATFORM.?XAMPLE.*"}],
                     "both": [{"issuer.cn": "Internal CA", "subject.ou": "Sales"}],
                     "absent": [{"subject.street": "*"}]})
    session = g.verify_chain([PLATFORM])
    assert session == X509Session(
        "platform.example.com", frozenset({"internal", "globbed"}), NOT_AFTER.timestamp(),
        {"organization": "Example Inc", "tenant": "spiffe://example.com/ns/prod/sa/platform"})


def test_the_default_identity_is_the_subject_dn_and_no_role_is_granted_unasked() -> None:
    session = guard().verify_chain([PLATFORM])
    assert isinstance(session, X509Session)
    assert session.identity == certificate_fields(PLATFORM)["subject.dn"][0]
    assert session.roles == frozenset()
    lacking = guard(identity="subject.street").verify_chain([PLATFORM])
    assert isinstance(lacking, X509Session) and lacking.identity is None


def test_a_glob_is_the_whole_value_and_its_other_characters_are_literal() -> None:
    g = guard(roles={"dot": [{"subject.cn": "platform.example.co"}],
                     "regex": [{"subject.cn": "platform.example.c[o]m"}],
                     "prefix": [{"subject.cn": "platform*"}]})
    session = g.verify_chain([PLATFORM])
    assert isinstance(session, X509Session) and session.roles == {"prefix"}


def test_tokens_and_empty_chains_are_refused_and_reported() -> None:
    events = EventLog("test")
    g = guard(events)
    assert isinstance(g, Guard) and isinstance(g, CertificateGuard)
    refused = g.verify("-----BEGIN CERTIFICATE-----\nforged\n-----END CERTIFICATE-----")
    assert isinstance(refused, Refusal) and refused.status == 403 and refused.reported
    empty = g.verify_chain([])
    assert isinstance(empty, Refusal) and empty.reason == "empty certificate chain"
    assert [line.split(" ", 4)[3:] for line in events.recent] == [
        [FAILED, "the x509 guard takes client certificates from a tls server, not tokens"],
        [FAILED, "empty certificate chain"]]
    assert severity(FAILED) == "INFO", "a client's doing, as a refused token's is"


# -- where a config may use it ------------------------------------------------------------


@pytest.fixture
def tls_echo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Zilla's tls.echo example's config and stores in a folder, its passwords set."""
    shutil.copytree(DATA / "zilla-examples" / "tls.echo" / "etc", tmp_path / "etc")
    monkeypatch.setenv("KEYSTORE_PASSWORD", "generated")
    monkeypatch.setenv("TRUSTSTORE_PASSWORD", "generated")
    return tmp_path / "etc" / "zilla.yaml"


def check(config: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(["check", "--config", str(config)])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def test_the_tls_echo_example_passes_check(tls_echo: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    code, out = check(tls_echo, capsys)
    assert code == 0, out


JWT_GUARD = ("guards:\n", "guards:\n  tokens:\n    type: jwt\n    options:\n      keys: "
                           "[{kty: oct, kid: k, alg: HS256, k: c2VjcmV0}]\n")
ROUTE_NAMES_JWT = ("          my_clients:\n            - client\n",
                   "          tokens:\n            - client\n")


@pytest.mark.parametrize("change,says", [
    ((JWT_GUARD, ROUTE_NAMES_JWT),
     "routes[0].guarded.tokens: a tls route can require only the guard of its binding's "
     "options.authorization"),
    ((("mutual: requested", "mutual: none"),),
     "options.authorization.my_clients: client certificates are never asked for with mutual: "
     "none"),
    ((JWT_GUARD, ("      authorization:\n        my_clients:",
                  "      authorization:\n        tokens:"), ROUTE_NAMES_JWT),
     "options.authorization.tokens: guard 'tokens' does not read client certificates; "
     "expected an x509 guard"),
], ids=["route-guard-not-the-bindings", "mutual-none", "jwt-guard-on-tls"])
def test_tls_uses_of_the_guard_that_cannot_work_are_refused(
        tls_echo: Path, capsys: pytest.CaptureFixture[str],
        change: tuple[tuple[str, str], ...], says: str) -> None:
    text = tls_echo.read_text()
    for old, new in change:
        assert old in text
        text = text.replace(old, new, 1)
    tls_echo.write_text(text)
    code, out = check(tls_echo, capsys)
    assert code == 1, out
    assert f"bindings.north_tls_server.{says}" in out, out


def test_an_http_binding_may_not_read_certificates_from_requests(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A chain in a header would be whatever the client typed: the x509 guard only takes one a
    tls server verified."""
    config = tmp_path / "zilla.yaml"
    config.write_text("""\
name: x
guards:
  certs:
    type: x509
bindings:
  tcp0:
    type: tcp
    kind: server
    options: {host: 127.0.0.1, port: 8080}
    exit: http0
  http0:
    type: http
    kind: server
    options:
      authorization:
        certs:
          credentials:
            headers: {x-client-cert: "{credentials}"}
    exit: echo0
  echo0:
    type: echo
    kind: server
""")
    code, out = check(config, capsys)
    assert code == 1, out
    assert "bindings.http0.options.authorization.certs" in out
    assert "checks client certificates, which only a tls server" in out
