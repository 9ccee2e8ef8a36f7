"""Read a Java KeyStore (JKS) file: its trusted certificates and private keys, by alias.

Zilla's users have JKS stores (Kafka's own tooling writes them), and Zilla reads them with
`type: jks`. The format is small and documented by Java's source and the many readers of it:

- a header: the magic `FEEDFEED`, a version (1 or 2) and the number of entries;
- per entry: a tag (1 a private key, 2 a trusted certificate), the alias (Java's modified UTF-8
  behind a two-byte length), the creation time in milliseconds (8 bytes), then
  - a trusted certificate: its type (`X.509`, version 2 only, same encoding as the alias) and
    the DER certificate behind a four-byte length;
  - a private key: the key as a DER `EncryptedPrivateKeyInfo` behind a four-byte length, then
    the number of certificates in its chain and each one as above (the key's own first);
- the SHA-1 digest of the password (UTF-16BE), the bytes `Mighty Aphrodite` and everything before
  the digest: a wrong password, or a damaged file, does not give it.

A key is protected by Sun's own scheme (OID 1.3.6.1.4.1.42.2.17.1.1), made of SHA-1 alone: 20
bytes of salt, the PKCS#8 key XORed with a keystream of chained digests (`SHA1(password + salt)`,
then `SHA1(password + previous)`), and `SHA1(password + key)` to check the result. Keys are only
read when the caller needs them (a `keys` store), and only with the store's password: keytool
uses it for every key unless told otherwise. Certificates and keys are parsed by `cryptography`.

Why not a library: `pyjks` (the one there is) had its last release in 2020 and brings three
more packages (pycryptodomex, twofish, pyasn1) for formats ssekd does not read; this is SHA-1
from `hashlib` and bounds checks.

Without a password the certificates are read unchecked, as Java's `KeyStore.load(stream, null)`
reads them (what Zilla does for a store configured without one); keys then cannot be read.
Whatever the bytes, the outcome is a list of entries or a `StoreError` with one line of reason.
"""

from __future__ import annotations

import hashlib
import hmac
import struct

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes
from cryptography.hazmat.primitives.serialization import load_der_private_key

from ssekd.vaults.pkcs12 import StoreEntry, StoreError

#: The first four bytes of a JKS file, and of a JCEKS one (not read: its keys use other
#: ciphers and its secret keys are serialized Java objects).
JKS_MAGIC = b"\xfe\xed\xfe\xed"
JCEKS_MAGIC = b"\xce\xce\xce\xce"
_PRIVATE_KEY = 1
_TRUSTED_CERT = 2
#: What the integrity digest is keyed with, besides the password (fixed by the format).
_WHITENER = b"Mighty Aphrodite"
_DIGEST = 20  # SHA-1
#: DER of OID 1.3.6.1.4.1.42.2.17.1.1, Sun's JKS key protector.
_KEY_PROTECTOR = bytes.fromhex("060a2b060104012a02110101")


class _Reader:
    """The fields of a JKS file, in order; running off the end is a `StoreError`."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.at = 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.at + n > len(self.data):
            raise StoreError(f"not a readable JKS store (it ends inside an entry, at byte "
                             f"{self.at})")
        chunk = self.data[self.at:self.at + n]
        self.at += n
        return chunk

    def u16(self) -> int:
        return int(struct.unpack(">H", self.take(2))[0])

    def u32(self) -> int:
        return int(struct.unpack(">I", self.take(4))[0])

    def text(self) -> str:
        """Java's `writeUTF`: modified UTF-8 (NUL as C0 80, supplementary characters as two
        encoded surrogates) behind a two-byte length."""
        raw = self.take(self.u16()).replace(b"\xc0\x80", b"\x00")
        try:
            halves = raw.decode("utf-8", "surrogatepass")
            return halves.encode("utf-16-be", "surrogatepass").decode("utf-16-be")
        except UnicodeError as e:
            raise StoreError("not a readable JKS store (an alias is not text)") from e

    def certificate(self, version: int) -> x509.Certificate:
        if version == 2:
            kind = self.text()
            if kind != "X.509":
                raise StoreError(f"the store holds a {kind!r} certificate; ssekd reads X.509")
        der = self.take(self.u32())
        try:
            return x509.load_der_x509_certificate(der)
        except (ValueError, x509.InvalidVersion) as e:  # a version field out of range too
            raise StoreError("not a readable JKS store (a certificate does not parse)") from e


def _password_bytes(password: str) -> bytes:
    """A Java password as JKS hashes it: each UTF-16 code unit, big-endian."""
    return password.encode("utf-16-be", "surrogatepass")


def read_jks(data: bytes, password: str | None, keys: bool = True) -> list[StoreEntry]:
    """Every entry of a JKS store, key entries first, each in store order. With `keys` false
    the private keys are left unread (a trust store needs only certificates). Raises StoreError:
    a wrong password, a damaged or foreign file, a key that does not open with the password."""
    if len(data) < 12 + _DIGEST or data[:4] != JKS_MAGIC:
        raise StoreError("not a JKS store (it does not start with FEEDFEED)")
    secret = _password_bytes(password) if password is not None else None
    body, digest = data[:-_DIGEST], data[-_DIGEST:]
    if secret is not None:
        expected = hashlib.sha1(secret + _WHITENER + body).digest()
        if not hmac.compare_digest(expected, digest):
            raise StoreError("wrong password, or a damaged store (its integrity digest does "
                             "not match)")
    reader = _Reader(body)
    reader.take(4)
    version = reader.u32()
    if version not in (1, 2):
        raise StoreError(f"a JKS store of version {version}; ssekd reads versions 1 and 2")
    count = reader.u32()
    key_entries: list[StoreEntry] = []
    cert_entries: list[StoreEntry] = []
    for _ in range(count):
        tag = reader.u32()
        alias = reader.text()
        reader.take(8)  # the creation time
        if tag == _TRUSTED_CERT:
            cert_entries.append(StoreEntry(alias, reader.certificate(version)))
        elif tag == _PRIVATE_KEY:
            protected = reader.take(reader.u32())
            chain = [reader.certificate(version) for _ in range(reader.u32())]
            if not chain:
                continue  # a key without its certificate serves nothing
            key = _unprotect(alias, protected, secret) if keys else None
            key_entries.append(StoreEntry(alias, chain[0], key, tuple(chain[1:])))
        else:
            raise StoreError(f"entry {alias!r} is of a kind a JKS store does not hold "
                             f"(tag {tag}); is it a JCEKS store?")
    if reader.at != len(body):
        raise StoreError("not a readable JKS store (bytes after its last entry)")
    return key_entries + cert_entries


def _unprotect(alias: str, protected: bytes, secret: bytes | None) -> PrivateKeyTypes:
    """The private key of entry `alias`, from its `EncryptedPrivateKeyInfo` (module docstring)."""
    if secret is None:
        raise StoreError(f"the key of alias {alias!r} cannot be read without the store's "
                         f"password")
    encrypted = _encrypted_data(alias, protected)
    if len(encrypted) < 2 * _DIGEST:
        raise StoreError(f"the key of alias {alias!r} is too short to be a protected key")
    salt, body, check = encrypted[:_DIGEST], encrypted[_DIGEST:-_DIGEST], encrypted[-_DIGEST:]
    stream = bytearray()
    block = salt
    while len(stream) < len(body):
        block = hashlib.sha1(secret + block).digest()
        stream += block
    plain = bytes(a ^ b for a, b in zip(body, stream, strict=False))
    if not hmac.compare_digest(hashlib.sha1(secret + plain).digest(), check):
        raise StoreError(f"the key of alias {alias!r} does not open with the store's password "
                         f"(ssekd reads keys protected by the store's password, as keytool "
                         f"makes them)")
    try:
        return load_der_private_key(plain, None)
    except (ValueError, TypeError, UnsupportedAlgorithm) as e:
        raise StoreError(f"the key of alias {alias!r} is not a key ssekd can use "
                         f"({type(e).__name__})") from e


def _encrypted_data(alias: str, der: bytes) -> bytes:
    """The encrypted bytes of an `EncryptedPrivateKeyInfo` whose algorithm is the JKS key
    protector: SEQUENCE { SEQUENCE { OID [, NULL] }, OCTET STRING }."""
    try:
        tag, outer, _ = _tlv(der, 0)
        algorithm_tag, algorithm, after = _tlv(outer, 0)
        octets_tag, octets, _ = _tlv(outer, after)
        oid_tag, _, _ = _tlv(algorithm, 0)
    except IndexError as e:
        raise StoreError(f"the key of alias {alias!r} is not a protected key") from e
    if (tag, algorithm_tag, octets_tag, oid_tag) != (0x30, 0x30, 0x04, 0x06):
        raise StoreError(f"the key of alias {alias!r} is not a protected key")
    if not algorithm.startswith(_KEY_PROTECTOR):
        raise StoreError(f"the key of alias {alias!r} is protected by an algorithm other than "
                         f"JKS's own; convert the store with keytool -importkeystore ... "
                         f"-deststoretype pkcs12")
    return octets


def _tlv(data: bytes, i: int) -> tuple[int, bytes, int]:
    """One definite-length DER element at `i`: (tag, content, index after it)."""
    tag, length = data[i], data[i + 1]
    i += 2
    if length & 0x80:
        n = length & 0x7F
        if n == 0 or n > 4:
            raise IndexError("unsupported length")
        length = int.from_bytes(data[i:i + n], "big")
        i += n
    if i + length > len(data):
        raise IndexError("truncated element")
    return tag, data[i:i + length], i + length
