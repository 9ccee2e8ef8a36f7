"""A development certificate for `make run`: a throwaway CA and a `localhost` key in PKCS#12.

    python -m ssekd.dev.certs [--dir etc/tls] [--password PW] [--name localhost ...] [--force]

writes `<dir>/localhost.p12` (alias `localhost`: the server key and its certificate, plus the CA
certificate under alias `ssekd-dev-ca`) and `<dir>/ca.pem` (give it to curl with `--cacert`, or
import it into a browser to trust the dev server). Nothing happens when the store already exists
and its certificate is still valid, so `make run` can call this every time.

`make run` gives it the password the config names for it; the shipped configs name
`DEV_PASSWORD` below - a published value, because this store protects nothing: it exists so
`etc/zilla.yaml` checks and runs as it is. From the command line the password is
`$KEYSTORE_PASSWORD` when set, else that one. The CA's private key is never written anywhere, so
it cannot be used to mint certificates for other names later.

The helpers (`make_ca`, `issue`, `write_store`) are also what the TLS tests use to build stores.
"""

from __future__ import annotations

import argparse
import datetime
import ipaddress
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import (
    BestAvailableEncryption,
    Encoding,
    NoEncryption,
    pkcs12,
)
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

#: The documented password of the development store (see the module docstring).
DEV_PASSWORD = "ssekd-dev-password"
DEV_DIR = Path("etc/tls")
STORE_NAME = "localhost.p12"
CA_NAME = "ca.pem"
CA_ALIAS = "ssekd-dev-ca"
#: The common name of the development CA, by which `is_dev_store` knows a store made here.
DEV_CA_NAME = "ssekd development CA"


@dataclass(frozen=True)
class Issued:
    """A private key with its certificate."""

    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def make_ca(common_name: str = DEV_CA_NAME, days: int = 3650) -> Issued:
    """A self-signed CA certificate (P-256: small and fast to handshake with)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = _now()
    cert = (
        x509.CertificateBuilder()
        .subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                     content_commitment=False, key_encipherment=False,
                                     data_encipherment=False, key_agreement=False,
                                     encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                       critical=False)
        .sign(key, hashes.SHA256())
    )
    return Issued(key, cert)


def issue(ca: Issued, names: Sequence[str], days: int = 365, client: bool = False) -> Issued:
    """A leaf certificate signed by `ca`; CN is the first name, every name goes in the SAN.

    Names that parse as IP addresses become IP SANs. `client=True` makes a client certificate
    (for mutual TLS tests) instead of a server one.
    """
    key = ec.generate_private_key(ec.SECP256R1())
    sans: list[x509.GeneralName] = []
    for n in names:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(n)))
        except ValueError:
            sans.append(x509.DNSName(n))
    now = _now()
    usage = ExtendedKeyUsageOID.CLIENT_AUTH if client else ExtendedKeyUsageOID.SERVER_AUTH
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
        .issuer_name(ca.cert.subject).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()),
                       critical=False)
        .sign(ca.key, hashes.SHA256())
    )
    return Issued(key, cert)


def write_store(path: Path, alias: str | None, issued: Issued | None, password: str | None,
                extra: Sequence[tuple[str, x509.Certificate]] = ()) -> None:
    """A PKCS#12 store with one key entry (or none: a trust store) and extra certificates."""
    cas = [pkcs12.PKCS12Certificate(cert, name.encode()) for name, cert in extra]
    encryption = BestAvailableEncryption(password.encode()) if password else NoEncryption()
    data = pkcs12.serialize_key_and_certificates(
        alias.encode() if alias else None,
        issued.key if issued else None,
        issued.cert if issued else None,
        cas or None,
        encryption,
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    tmp.replace(path)


def store_is_current(path: Path, password: str | None) -> bool:
    """Does `path` hold a readable store whose key certificate is valid for another day?"""
    try:
        loaded = pkcs12.load_pkcs12(path.read_bytes(),
                                    password.encode() if password is not None else None)
    except (OSError, ValueError):
        return False
    if loaded.cert is None:
        return False
    return loaded.cert.certificate.not_valid_after_utc > _now() + datetime.timedelta(days=1)


def ensure_dev_store(folder: Path = DEV_DIR, password: str | None = DEV_PASSWORD,
                     names: Sequence[str] = ("localhost", "127.0.0.1", "::1"),
                     force: bool = False) -> tuple[Path, bool]:
    """Create the development store in `folder` unless a current one exists.

    Returns (store path, whether it was written).
    """
    store = folder / STORE_NAME
    if not force and store.exists() and store_is_current(store, password):
        return store, False
    ca = make_ca()
    leaf = issue(ca, names)
    write_store(store, "localhost", leaf, password, extra=[(CA_ALIAS, ca.cert)])
    (folder / CA_NAME).write_bytes(ca.cert.public_bytes(Encoding.PEM))
    return store, True


def is_dev_store(store: Path) -> bool:
    """Whether `store` was made here: beside it is the `ca.pem` of a development CA."""
    try:
        ca = x509.load_pem_x509_certificate((store.parent / CA_NAME).read_bytes())
    except (OSError, ValueError):
        return False
    names = ca.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    return bool(names) and names[0].value == DEV_CA_NAME


def store_hint(store: Path, missing: bool) -> str:
    """What to do about a vault store that is missing or does not open with its password, when
    it is (or would be) a development store; "" otherwise. For the config error."""
    if missing and store.name == STORE_NAME:
        return (f"; `make run` makes a development store there (or: python -m ssekd.dev.certs "
                f"--dir {store.parent} --password ...)")
    if not missing and is_dev_store(store):
        return (f"; it is a development store made by `make run` with another password: give "
                f"that one, or remove {store.parent} and `make run` makes it again with the "
                f"password the config gives")
    return ""


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ssekd.dev.certs",
        description=f"Write a development TLS store: <dir>/{STORE_NAME} (alias localhost: a key "
                    f"and its certificate from a throwaway CA, plus the CA's certificate) and "
                    f"<dir>/{CA_NAME} (for curl --cacert, or a browser's trusted CAs). Nothing "
                    f"happens when a current store is there already. For development only: "
                    f"the default password, {DEV_PASSWORD}, is published.")
    parser.add_argument("--dir", type=Path, default=DEV_DIR, help="where to write (etc/tls)")
    parser.add_argument("--password", default=os.environ.get("KEYSTORE_PASSWORD", DEV_PASSWORD),
                        help="store password ($KEYSTORE_PASSWORD, else the dev password)")
    parser.add_argument("--name", action="append", dest="names",
                        help="a DNS name or IP for the certificate (repeatable; default "
                             "localhost, 127.0.0.1, ::1)")
    parser.add_argument("--force", action="store_true", help="replace an existing store")
    args = parser.parse_args(argv)
    names = args.names or ["localhost", "127.0.0.1", "::1"]
    store, written = ensure_dev_store(args.dir, args.password, names, args.force)
    if written:
        print(f"wrote {store} (alias localhost) and {args.dir / CA_NAME}; "
              f"trust it with: curl --cacert {args.dir / CA_NAME} https://localhost:7143/",
              file=sys.stderr)
    else:
        print(f"{store} exists and is current", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
