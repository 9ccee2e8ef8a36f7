"""The filesystem vault's `type: jks`: Java KeyStores made by keytool (Java's own, installed by
`make test`), the `.jks` files of Zilla's http.kafka.oneway example (PKCS#12 inside, as keytool
writes them since Java 9), and what a wrong password, a key of its own password, a JCEKS store
or damaged bytes make of them: one-line config errors, never a traceback."""

from __future__ import annotations

import hashlib
import random
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from ssekd.config import ConfigError
from ssekd.config.load import load_config
from ssekd.dev.certs import Issued, issue, make_ca, write_store
from ssekd.spi.plugins import discover
from ssekd.vaults import open_vault
from ssekd.vaults.filesystem import read_entries
from ssekd.vaults.jks import read_jks
from ssekd.vaults.pkcs12 import StoreEntry, StoreError
from tests.support.daemon import Daemon
from tests.support.data import DATA
from tests.support.pki import ENV, PASSWORD, Pki, s_client, subject, tls_config

KEYTOOL = shutil.which("keytool")
EXAMPLE = DATA / "zilla-examples" / "http.kafka.oneway"
#: The example's store password (its compose.yaml: KEYSTORE_PASSWORD).
EXAMPLE_PASSWORD = "generated"
BIN = Path(sys.executable).parent


def keytool(*args: str | Path) -> None:
    assert KEYTOOL is not None, "keytool (Java, installed by make test) is needed"
    done = subprocess.run([KEYTOOL, *map(str, args)], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


@dataclass(frozen=True)
class Stores:
    ca: Issued
    other_ca: Issued
    localhost: Issued
    trust: Path  # JKS: trusted certificates `ca` and `other`
    keys: Path  # JKS: key entries `localhost` (EC, issued by ca, with it as chain) and `rsa`
    apart: Path  # JKS: key entry `apart`, its key under a password of its own
    jceks: Path


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> Stores:
    """JKS stores made by keytool, as Kafka users make them (`-storetype jks`)."""
    folder = tmp_path_factory.mktemp("jks")
    ca, other_ca = make_ca("jks test CA"), make_ca("jks other CA")
    localhost = issue(ca, ["localhost", "127.0.0.1"])
    trust = folder / "trust.jks"
    for alias, cert in (("ca", ca.cert), ("other", other_ca.cert)):
        pem = folder / f"{alias}.pem"
        pem.write_bytes(cert.public_bytes(Encoding.PEM))
        keytool("-importcert", "-noprompt", "-alias", alias, "-file", pem, "-storetype", "jks",
                "-keystore", trust, "-storepass", PASSWORD)
    write_store(folder / "localhost.p12", "localhost", localhost, PASSWORD,
                extra=[("ca", ca.cert)])
    keys = folder / "keys.jks"
    keytool("-importkeystore", "-noprompt", "-srckeystore", folder / "localhost.p12",
            "-srcstoretype", "pkcs12", "-srcstorepass", PASSWORD, "-destkeystore", keys,
            "-deststoretype", "jks", "-deststorepass", PASSWORD)
    keytool("-genkeypair", "-alias", "rsa", "-keyalg", "RSA", "-keysize", "2048",
            "-dname", "CN=rsa.test", "-validity", "2", "-storetype", "jks", "-keystore", keys,
            "-storepass", PASSWORD, "-keypass", PASSWORD)
    apart = folder / "apart.jks"
    keytool("-genkeypair", "-alias", "apart", "-keyalg", "EC", "-dname", "CN=apart.test",
            "-validity", "2", "-storetype", "jks", "-keystore", apart, "-storepass", PASSWORD,
            "-keypass", "a-password-of-its-own")
    jceks = folder / "store.jceks"
    keytool("-genkeypair", "-alias", "old", "-keyalg", "EC", "-dname", "CN=old.test",
            "-validity", "2", "-storetype", "jceks", "-keystore", jceks, "-storepass", PASSWORD)
    return Stores(ca, other_ca, localhost, trust, keys, apart, jceks)


def spki(thing: x509.Certificate | PrivateKeyTypes) -> bytes:
    return thing.public_key().public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo)


def read(path: Path, role: str, password: str | None = PASSWORD) -> dict[str, StoreEntry]:
    return {e.alias: e for e in read_entries(path.read_bytes(), password, role, path, "jks")}


def test_keytool_jks_stores_give_their_certificates_keys_and_chains(stores: Stores) -> None:
    assert stores.keys.read_bytes()[:4] == b"\xfe\xed\xfe\xed"  # a real JKS, not PKCS#12
    trust = read(stores.trust, "trust")
    assert sorted(trust) == ["ca", "other"]
    assert trust["ca"].certificate == stores.ca.cert and trust["ca"].key is None
    assert trust["other"].certificate == stores.other_ca.cert

    keys = read(stores.keys, "keys")
    assert sorted(keys) == ["localhost", "rsa"]
    for entry in keys.values():  # each key is the one of its certificate
        assert entry.key is not None and spki(entry.key) == spki(entry.certificate)
    assert keys["localhost"].certificate == stores.localhost.cert
    assert keys["localhost"].chain == (stores.ca.cert,)
    assert keys["rsa"].certificate.subject.rfc4514_string() == "CN=rsa.test"


def test_a_trust_store_leaves_keys_unread_and_without_a_password_only_certificates(
        stores: Stores) -> None:
    """Keys are read for a `keys` store only; without a password certificates are read (as Java
    does) and a key cannot be."""
    as_trust = read(stores.keys, "trust")
    assert sorted(as_trust) == ["localhost", "rsa"]
    assert all(e.key is None for e in as_trust.values())
    assert sorted(read(stores.trust, "trust", password=None)) == ["ca", "other"]
    with pytest.raises(StoreError, match="cannot be read without the store's password"):
        read(stores.keys, "keys", password=None)


def test_a_key_under_a_password_of_its_own_is_named(stores: Stores) -> None:
    with pytest.raises(StoreError, match="the key of alias 'apart' does not open with the "
                                         "store's password"):
        read(stores.apart, "keys")
    assert sorted(read(stores.apart, "trust")) == ["apart"]  # its certificate is usable


def write_config(folder: Path, store: Path, password: str, role: str = "trust") -> Path:
    """A config whose vault `clients` has `store` as its `role` store, `type: jks`."""
    path = folder / "zilla.yaml"
    path.write_text(f"""\
name: jks
vaults:
  clients:
    type: filesystem
    options:
      {role}:
        store: {store}
        type: jks
        password: {password}
bindings:
  tcp_in:
    type: tcp
    kind: server
    options: {{host: 127.0.0.1, port: 7114}}
    exit: http_in
  http_in:
    type: http
    kind: server
    exit: files
  files:
    type: http-filesystem
    kind: proxy
    routes:
      - when: [{{path: "/{{path}}"}}]
        exit: www
        with: {{path: "${{params.path}}"}}
  www:
    type: filesystem
    kind: server
    options: {{location: {folder}}}
""")
    return path


@pytest.mark.parametrize("case", ["keytool-jks", "example-truststore", "example-keystore"])
def test_the_vault_reads_them_under_type_jks(tmp_path: Path, stores: Stores, case: str) -> None:
    """Zilla's example names PKCS#12 files `.jks` with `type: jks`: they read, as in Java."""
    store, password, role, expected = {
        "keytool-jks": (stores.trust, PASSWORD, "trust", ["ca", "other"]),
        "example-truststore": (EXAMPLE / "truststore" / "kafka.truststore.jks",
                               EXAMPLE_PASSWORD, "trust", ["kafka"]),
        "example-keystore": (EXAMPLE / "keystore" / "kafka.keystore.jks", EXAMPLE_PASSWORD,
                             "keys", ["localhost"]),
    }[case]
    config = load_config(write_config(tmp_path, store, password, role), discover(), {})
    vault = open_vault(config, "clients")
    held = vault.stores[role].entries
    assert [a for a in expected if a in held] == expected
    if role == "keys":
        assert all(held[a].key is not None for a in expected)


@pytest.mark.parametrize("case", ["keytool-jks", "example-truststore"])
def test_a_wrong_password_is_one_line_naming_the_vault(tmp_path: Path, stores: Stores,
                                                       case: str) -> None:
    store = stores.trust if case == "keytool-jks" else \
        EXAMPLE / "truststore" / "kafka.truststore.jks"
    path = write_config(tmp_path, store, "not-the-password")
    with pytest.raises(ConfigError) as err:
        open_vault(load_config(path, discover(), {}), "clients")
    [problem] = err.value.issues
    assert problem.path == "vaults.clients.options.trust.store"
    assert "vault 'clients' trust store" in problem.message
    assert "wrong password" in problem.message
    assert "\n" not in problem.message and "not-the-password" not in problem.message

    # and as `ssekd check` says it: one line, file and line first
    done = subprocess.run([str(BIN / "ssekd"), "check", "--config", str(path)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"error: {path}:7: vaults.clients.options.trust.store: vault "
                               f"'clients' trust store {store}: wrong password"), lines


def test_a_jceks_store_is_refused_with_the_keytool_command(stores: Stores) -> None:
    with pytest.raises(StoreError) as err:
        read(stores.jceks, "trust")
    message = str(err.value)
    assert message.startswith("a JCEKS store, which ssekd does not read: convert it with "
                              "keytool -importkeystore")
    assert "-deststoretype pkcs12" in message and "\n" not in message


def test_not_a_store_under_type_jks_says_both_formats(tmp_path: Path) -> None:
    junk = tmp_path / "junk.jks"
    junk.write_bytes(b"not a store at all")
    with pytest.raises(StoreError, match="wrong password, or neither a JKS nor a PKCS#12 "
                                         "store"):
        read(junk, "trust")


def reseal(body: bytes, password: str) -> bytes:
    """`body` with the integrity digest a store with `password` ends with."""
    secret = password.encode("utf-16-be")
    return body + hashlib.sha1(secret + b"Mighty Aphrodite" + body).digest()


@pytest.mark.filterwarnings("ignore:Parsed a serial number:UserWarning")
def test_damaged_stores_are_store_errors_never_anything_else(stores: Stores) -> None:
    """Truncated, flipped and resealed bytes (the digest made right again, so the walk and the
    key protector see them): a StoreError or entries, never another exception."""
    rng = random.Random(37)
    original = stores.keys.read_bytes()
    body = original[:-20]
    outcomes = {"error": 0, "read": 0}
    for n in range(400):
        data = bytearray(body)
        if n % 4 == 0:
            data = data[:rng.randrange(len(data))]
        else:
            for _ in range(rng.randint(1, 4)):
                data[rng.randrange(len(data))] = rng.randrange(256)
        try:
            read_jks(reseal(bytes(data), PASSWORD), PASSWORD, keys=True)
            read_jks(bytes(data) + b"\0" * 20, None, keys=False)
            outcomes["read"] += 1
        except StoreError:
            outcomes["error"] += 1
    assert outcomes["error"] > 200, outcomes  # most damage is noticed
    with pytest.raises(StoreError, match="wrong password, or a damaged store"):
        read_jks(original[:-1] + bytes([original[-1] ^ 1]), PASSWORD)


@pytest.mark.daemon
def test_a_tls_server_serves_the_key_of_a_jks_store(tmp_path: Path, pki: Pki,
                                                    stores: Stores,
                                                    run_daemon: Callable[..., Daemon]) -> None:
    """The key and chain of a keytool JKS store reach a real handshake: openssl verifies the
    server's certificate against the CA."""
    path, tls_port, clear_port = tls_config(tmp_path, pki, "{keys: [localhost]}",
                                            store=stores.keys)
    text = path.read_text()
    assert "type: pkcs12" in text
    path.write_text(text.replace("type: pkcs12", "type: jks", 1))
    ca = tmp_path / "jks-ca.pem"
    ca.write_bytes(stores.ca.cert.public_bytes(Encoding.PEM))
    run_daemon(path, env=ENV, wait_ports=[tls_port, clear_port])
    out = s_client(tls_port, "-servername", "localhost", "-CAfile", str(ca)).stdout
    assert subject(out) == "CN=localhost"
    assert "Verify return code: 0 (ok)" in out, out
