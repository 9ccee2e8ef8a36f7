"""The filesystem vault: aliases from PKCS#12 stores, and config errors that name what is wrong."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.serialization import PrivateFormat, pkcs12
from twisted.internet.testing import MemoryReactorClock

from ssekd.config import ConfigError
from ssekd.config.load import load_config
from ssekd.dev.certs import DEV_PASSWORD, ensure_dev_store, issue, make_ca, write_store
from ssekd.engine import Engine
from ssekd.spi.plugins import discover
from ssekd.vaults import open_vault
from ssekd.vaults.pkcs12 import StoreError, read_store
from tests.support.daemon import start_daemon
from tests.support.pki import ENV, PASSWORD, Pki, tls_config


def test_aliases_are_friendly_names_with_the_key_first(pki: Pki) -> None:
    entries = read_store(pki.keys.read_bytes(), PASSWORD)
    assert [(e.alias, e.key is not None) for e in entries] == [("localhost", True), ("ca", False)]
    assert entries[0].chain == (entries[1].certificate,)


def test_every_key_of_a_keytool_store(pki: Pki) -> None:
    assert pki.multi is not None, "keytool (Java, installed by make test) is needed"
    entries = {e.alias: e for e in read_store(pki.multi.read_bytes(), PASSWORD)}
    assert sorted(entries) == ["localhost", "other"]
    assert all(e.key is not None for e in entries.values())
    # each key is paired with its own certificate
    assert entries["other"].certificate.subject.rfc4514_string() == "CN=other.test"


def test_alias_falls_back_to_the_common_name(tmp_path: Path) -> None:
    ca = make_ca()
    write_store(tmp_path / "s.p12", None, issue(ca, ["nameless.test"]), "pw")
    assert [e.alias for e in read_store((tmp_path / "s.p12").read_bytes(), "pw")] == \
        ["nameless.test"]


def test_legacy_3des_store_still_yields_its_key(tmp_path: Path) -> None:
    ca = make_ca()
    leaf = issue(ca, ["old.test"])
    enc = (PrivateFormat.PKCS12.encryption_builder()
           .key_cert_algorithm(pkcs12.PBES.PBESv1SHA1And3KeyTripleDESCBC).build(b"pw"))
    data = pkcs12.serialize_key_and_certificates(b"old", leaf.key, leaf.cert, None, enc)
    [entry] = read_store(data, "pw")
    assert entry.alias == "old" and entry.key is not None


def test_wrong_password_is_a_store_error(pki: Pki) -> None:
    with pytest.raises(StoreError, match="wrong password"):
        read_store(pki.keys.read_bytes(), "not-it")


def _config(tmp_path: Path, pki: Pki, **kw: Any) -> Path:
    return tls_config(tmp_path, pki, "{keys: [localhost], alpn: [h2, http/1.1]}", **kw)[0]


@pytest.mark.parametrize("case, expected", [
    ("password", ["vault 'server' keys store", "keys.p12", "wrong password"]),
    ("missing", ["vault 'server' keys store", "nowhere.p12", "does not exist"]),
])
def test_unreadable_store_names_vault_and_store(tmp_path: Path, pki: Pki, case: str,
                                                expected: list[str]) -> None:
    env = dict(ENV)
    store = None
    if case == "password":
        env["KEYSTORE_PASSWORD"] = "wrong"
    else:
        store = tmp_path / "nowhere.p12"
    config = load_config(_config(tmp_path, pki, store=store), discover(), env)
    with pytest.raises(ConfigError) as err:
        open_vault(config, "server")
    [issue_] = err.value.issues
    assert issue_.path == "vaults.server.options.keys.store"
    assert issue_.line is not None
    for text in expected:
        assert text in issue_.message


def test_unknown_alias_names_vault_alias_and_what_is_there(tmp_path: Path, pki: Pki) -> None:
    path = tls_config(tmp_path, pki, "{keys: [localhost, nosuch]}")[0]
    with pytest.raises(ConfigError) as err:
        Engine(path, MemoryReactorClock(), environ=ENV)
    [issue_] = err.value.issues
    assert issue_.path == "bindings.tls_in.options.keys[1]"
    assert "alias 'nosuch' is not in vault 'server'" in issue_.message
    assert "holds: ca, localhost" in issue_.message


def test_a_certificate_alias_is_not_a_key(tmp_path: Path, pki: Pki) -> None:
    path = tls_config(tmp_path, pki, "{keys: [ca]}")[0]
    with pytest.raises(ConfigError, match="'ca' .* is a certificate without a private key"):
        Engine(path, MemoryReactorClock(), environ=ENV)


@pytest.mark.parametrize("options, env, words", [
    ("{keys: [localhost]}", {"KEYSTORE_PASSWORD": "wrong"},
     ["vaults.server.options.keys.store", "vault 'server'", "keys.p12", "wrong password"]),
    ("{keys: [localhost, nosuch]}", ENV,
     ["bindings.tls_in.options.keys[1]", "alias 'nosuch'", "vault 'server'"]),
])
@pytest.mark.daemon
def test_daemon_does_not_start(tmp_path: Path, pki: Pki, options: str, env: dict[str, str],
                               words: list[str]) -> None:
    path = tls_config(tmp_path, pki, options)[0]
    daemon = start_daemon(path, env)
    try:
        code = daemon.process.wait(30)
    finally:
        daemon.stop()
    out = daemon.output()
    assert code != 0, out
    for w in words:
        assert w in out, out
    assert "Traceback" not in out
    assert "ENGINE_LISTENING" not in out


def test_devcert_creates_once_and_keeps_a_current_store(tmp_path: Path) -> None:
    store, written = ensure_dev_store(tmp_path)
    assert written and store.name == "localhost.p12" and (tmp_path / "ca.pem").exists()
    assert oct(store.stat().st_mode & 0o777) == "0o600"
    before = store.read_bytes()
    assert ensure_dev_store(tmp_path) == (store, False)
    assert store.read_bytes() == before
    entries = {e.alias: e for e in read_store(before, DEV_PASSWORD)}
    assert entries["localhost"].key is not None
    assert "ssekd-dev-ca" in entries


DEV_VAULT = """\
name: t
vaults:
  v:
    type: filesystem
    options:
      keys: {store: tls/localhost.p12, type: pkcs12, password: %s}
bindings:
  tcp0: {type: tcp, kind: server, options: {host: 127.0.0.1, port: 7114}, exit: tls0}
  tls0: {type: tls, kind: server, vault: v, options: {keys: [localhost]}, exit: http0}
  http0: {type: http, kind: server, exit: files_map}
  files_map:
    type: http-filesystem
    kind: proxy
    routes: [{when: [{path: "/{path}"}], exit: files, with: {path: "${params.path}"}}]
  files: {type: filesystem, kind: server, options: {location: .}}
"""


def test_a_missing_or_refusing_development_store_says_how_to_get_one(tmp_path: Path) -> None:
    """The dev secret: a missing development store says `make run` makes it; one made with
    another password says so, and how to make it again."""
    config = tmp_path / "zilla.yaml"
    config.write_text(DEV_VAULT % DEV_PASSWORD)
    with pytest.raises(ConfigError) as missing:
        Engine(config, reactor=MemoryReactorClock(), environ={})
    assert "does not exist; `make run` makes a development store there" in str(missing.value)
    ensure_dev_store(tmp_path / "tls", "another-password")
    with pytest.raises(ConfigError) as refused:
        Engine(config, reactor=MemoryReactorClock(), environ={})
    assert "wrong password, or not a PKCS#12 store; it is a development store made by `make " \
           f"run` with another password: give that one, or remove {tmp_path / 'tls'} and " \
           "`make run` makes it again" in str(refused.value), str(refused.value)
