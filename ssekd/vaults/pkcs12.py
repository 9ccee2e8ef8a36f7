"""Read every entry of a PKCS#12 store, with its alias.

`cryptography`'s `load_pkcs12` checks the password and the MAC and decrypts the certificates, but
it returns only the *first* private key. Stores written by Java's `keytool` (what Zilla users
have) often hold several key entries, one per server name, and SNI needs all of them. So
`load_pkcs12` stays the authority on whether the store is readable at all, and a small DER walk
over the unencrypted outer layers finds the other key bags; each shrouded key is an ordinary
encrypted PKCS#8 blob that `load_der_private_key` decrypts. Nothing here implements cryptography
itself. If the walk meets a layout it does not know (BER indefinite lengths, keys inside an
encrypted container), it gives up quietly and the store yields what `load_pkcs12` found.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    PublicFormat,
    load_der_private_key,
)
from cryptography.hazmat.primitives.serialization.pkcs12 import load_pkcs12
from cryptography.x509.oid import NameOID

_OID_DATA = bytes.fromhex("2a864886f70d010701")  # pkcs7-data
_OID_KEY_BAG = bytes.fromhex("2a864886f70d010c0a0101")
_OID_SHROUDED_KEY_BAG = bytes.fromhex("2a864886f70d010c0a0102")
_OID_FRIENDLY_NAME = bytes.fromhex("2a864886f70d010914")


class StoreError(Exception):
    """The store cannot be read: missing, unreadable, wrong password or not PKCS#12."""


@dataclass(frozen=True)
class StoreEntry:
    """One alias of a store: a certificate, with its private key when it is a key entry.

    `chain` holds the other certificates of the store that issued `certificate`, nearest first,
    so a server can send its intermediates.
    """

    alias: str
    certificate: x509.Certificate
    key: PrivateKeyTypes | None = None
    chain: tuple[x509.Certificate, ...] = ()


def common_name(cert: x509.Certificate) -> str | None:
    names = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    if not names:
        return None
    value = names[0].value
    return value if isinstance(value, str) else value.decode("utf-8", "replace")


def read_store(data: bytes, password: str | None) -> list[StoreEntry]:
    """Every entry of a PKCS#12 store, keys first, in store order. Raises StoreError."""
    secret = password.encode("utf-8") if password is not None else None
    try:
        loaded = load_pkcs12(data, secret)
    except (ValueError, TypeError) as e:
        raise StoreError("wrong password, or not a PKCS#12 store") from e
    except Exception as e:  # the Rust backend has raised other types on malformed input
        raise StoreError(f"not a readable PKCS#12 store ({e.__class__.__name__})") from e

    certs: list[tuple[x509.Certificate, str | None]] = []
    if loaded.cert is not None:
        certs.append((loaded.cert.certificate, _name(loaded.cert.friendly_name)))
    certs += [(c.certificate, _name(c.friendly_name)) for c in loaded.additional_certs]

    keys: list[tuple[PrivateKeyTypes, str | None]] = []
    if loaded.key is not None:
        keys.append((loaded.key, _name(loaded.cert.friendly_name) if loaded.cert else None))
    try:
        for key, alias in _key_bags(data, secret):
            if not any(_same_public_key(key, k) for k, _ in keys):
                keys.append((key, alias))
    except WALK_ERRORS:
        pass  # the first key, from load_pkcs12, is still there

    entries: list[StoreEntry] = []
    used: set[int] = set()
    for key, key_alias in keys:
        for i, (cert, cert_alias) in enumerate(certs):
            if i not in used and _same_public_key(key, cert):
                used.add(i)
                alias = key_alias or cert_alias or common_name(cert)
                if alias:
                    entries.append(StoreEntry(alias, cert, key, _chain(cert, certs)))
                break
    for i, (cert, cert_alias) in enumerate(certs):
        alias = cert_alias or common_name(cert)
        if i not in used and alias:
            entries.append(StoreEntry(alias, cert, None, _chain(cert, certs)))
    return entries


def _name(friendly: bytes | None) -> str | None:
    return friendly.decode("utf-8", "replace") if friendly else None


def _public_bytes(thing: PrivateKeyTypes | x509.Certificate) -> bytes | None:
    try:
        public = thing.public_key()
        return public.public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo)
    except (ValueError, TypeError, AttributeError):
        return None


def _same_public_key(a: PrivateKeyTypes | x509.Certificate,
                     b: PrivateKeyTypes | x509.Certificate) -> bool:
    pa = _public_bytes(a)
    return pa is not None and pa == _public_bytes(b)


def _chain(cert: x509.Certificate,
           certs: list[tuple[x509.Certificate, str | None]]) -> tuple[x509.Certificate, ...]:
    """Issuers of `cert` found in the store, nearest first, stopping at a self-signed root."""
    chain: list[x509.Certificate] = []
    current = cert
    while current.issuer != current.subject and len(chain) < 8:
        issuer = next((c for c, _ in certs
                       if c.subject == current.issuer and c != current and c not in chain), None)
        if issuer is None:
            break
        chain.append(issuer)
        current = issuer
    return tuple(chain)


class _Unsupported(Exception):
    """A layout the DER walk does not handle; the caller falls back to load_pkcs12's key."""


#: Not a key's fault: these pass through `_load_key` as they are.
_NOT_THE_KEY = (KeyboardInterrupt, SystemExit, GeneratorExit)

#: How the key-bag walk gives up: a layout it does not know, malformed DER, or a key the
#: backend cannot load (a bag decrypting to an unknown algorithm: `UnsupportedAlgorithm`).
WALK_ERRORS = (_Unsupported, ValueError, TypeError, IndexError, UnsupportedAlgorithm)


def _tlv(data: bytes, i: int) -> tuple[int, bytes, int]:
    """One definite-length DER element at `i`: (tag, content, index after it)."""
    tag = data[i]
    length = data[i + 1]
    i += 2
    if length == 0x80:
        raise _Unsupported("BER indefinite length")
    if length & 0x80:
        n = length & 0x7F
        length = int.from_bytes(data[i:i + n], "big")
        i += n
    end = i + length
    if end > len(data):
        raise _Unsupported("truncated element")
    return tag, data[i:end], end


def _children(data: bytes) -> Iterator[tuple[int, bytes, bytes]]:
    """(tag, content, whole encoding) of each element in a constructed value's content."""
    i = 0
    while i < len(data):
        start = i
        tag, content, i = _tlv(data, i)
        yield tag, content, data[start:i]


def _key_bags(data: bytes,
              secret: bytes | None) -> Iterator[tuple[PrivateKeyTypes, str | None]]:
    """Private keys from the key bags of the store's unencrypted SafeContents."""
    _, pfx, _ = _tlv(data, 0)
    parts = list(_children(pfx))  # version, authSafe, macData
    auth_safe = list(_children(parts[1][1]))  # contentType, [0] content
    if auth_safe[0][1] != _OID_DATA:
        raise _Unsupported("public-key protected store")
    _, octets, _ = _tlv(auth_safe[1][1], 0)
    _, safes, _ = _tlv(octets, 0)
    for _, content_info, _ in _children(safes):
        fields = list(_children(content_info))
        if fields[0][1] != _OID_DATA:
            continue  # encryptedData: certificates, already read by load_pkcs12
        _, inner, _ = _tlv(fields[1][1], 0)
        _, safe_contents, _ = _tlv(inner, 0)
        for _, bag, _ in _children(safe_contents):
            bag_fields = list(_children(bag))
            bag_id = bag_fields[0][1]
            if bag_id not in (_OID_KEY_BAG, _OID_SHROUDED_KEY_BAG):
                continue
            values = list(_children(bag_fields[1][1]))
            if not values:  # (a bare next() here would end the generator with RuntimeError)
                raise _Unsupported("empty bag value")
            _, _, value = values[0]
            alias = _friendly_name(bag_fields[2][1]) if len(bag_fields) > 2 else None
            yield _load_key(value, secret if bag_id == _OID_SHROUDED_KEY_BAG else None), alias


def _load_key(der: bytes, secret: bytes | None) -> PrivateKeyTypes:
    """`load_der_private_key`, with a panic of the Rust backend turned into `_Unsupported`.

    cryptography's Rust code panics on some keys (a PBKDF2 iteration count over 2**31, for
    one), and pyo3 raises a panic as `PanicException`, a BaseException that no `except
    Exception` catches. load_pkcs12 reads only the first key, so a store whose second key bag
    is like that reached the walk and came out of `read_store` as a traceback.
    """
    try:
        return load_der_private_key(der, secret)
    except (Exception, *_NOT_THE_KEY):
        raise  # ValueError, UnsupportedAlgorithm, ...: WALK_ERRORS
    except BaseException as e:
        raise _Unsupported(f"the key cannot be read ({e.__class__.__name__})") from e


def _friendly_name(attributes: bytes) -> str | None:
    for _, attribute, _ in _children(attributes):
        fields = list(_children(attribute))
        if fields[0][1] == _OID_FRIENDLY_NAME:
            for _, value, _ in _children(fields[1][1]):
                return value.decode("utf-16-be")  # a BMPString
    return None
