"""The kafka client's SASL from an inline guard (`authorization`) and its TLS from a tls client
on its way out, as Zilla's http.kafka.oneway writes them: what the engine builds hands
librdkafka (`sasl.*`, `security.protocol`, `ssl.ca.pem` from a JKS trust store), and the
configs librdkafka could not honour refused at their line.

No SASL broker runs here (the development broker, tansu 0.6, refuses every SASL handshake), so
what the client hands librdkafka is the behaviour; the TLS part also runs against a real TLS
endpoint in `test_tls_way_out.py`.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding
from twisted.internet.testing import MemoryReactorClock

from ssekd.bindings.kafka.client import KafkaClient
from ssekd.cli import main
from ssekd.config.errors import ConfigError
from ssekd.config.load import load_config
from ssekd.dev.certs import make_ca
from ssekd.engine import Engine
from ssekd.graph import Graph
from ssekd.guards.inline import InlineGuard
from ssekd.telemetry.events import EventLog

KEYTOOL = shutil.which("keytool")
PASSWORD = "store-password"
ENV = {"KEYSTORE_PASSWORD": PASSWORD, "SASL_USERNAME": "alice",
       "SASL_PASSWORD": "alice-secret"}

#: http.kafka.oneway's shape: an http-kafka write to a kafka client with SASL from an inline
#: guard, over a tls client trusting a JKS trust store.
CONFIG = """\
name: oneway
vaults:
  your_clients:
    type: filesystem
    options:
      trust:
        store: trust.jks
        type: jks
        password: ${{env.KEYSTORE_PASSWORD}}
guards:
  sasl_credentials:
    type: inline
    options:
      identity: ${{env.SASL_USERNAME}}
      credentials: ${{env.SASL_PASSWORD}}
bindings:
  tcp0:
    type: tcp
    kind: server
    options: {host: 127.0.0.1, port: 7114}
    exit: http0
  http0:
    type: http
    kind: server
    exit: hk
  hk:
    type: http-kafka
    kind: proxy
    routes:
      - when: [{path: /events}]
        exit: cc
        with: {capability: produce, topic: events}
  cc:
    type: kafka
    kind: cache_client
    exit: cs
  cs:
    type: kafka
    kind: cache_server
    exit: kc
  kc:
    type: kafka
    kind: client
    options:
      servers: [kafka:9092]
      authorization:
        sasl_credentials:
          credentials:
            mechanism: scram-sha-512
            username: "{identity}"
            password: "{credentials}"
    exit: tls_out
  tls_out:
    type: tls
    kind: client
    vault: your_clients
    options:
      trust: [kafka]
      sni: [kafka]
      alpn: [h2]
    exit: tcp_out
  tcp_out:
    type: tcp
    kind: client
"""


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, x509.Certificate]:
    """A JKS trust store made by keytool with one CA certificate, alias `kafka`."""
    assert KEYTOOL is not None, "keytool (Java, installed by make test) is needed"
    folder = tmp_path_factory.mktemp("trust")
    cert = make_ca("kafka test CA").cert
    pem = folder / "ca.pem"
    pem.write_bytes(cert.public_bytes(Encoding.PEM))
    store = folder / "trust.jks"
    subprocess.run([KEYTOOL, "-importcert", "-noprompt", "-alias", "kafka", "-file", str(pem),
                    "-storetype", "jks", "-keystore", str(store), "-storepass", PASSWORD],
                   check=True, capture_output=True, timeout=60)
    return store, cert


def write(tmp_path: Path, store: Path, text: str = CONFIG) -> Path:
    shutil.copy(store, tmp_path / "trust.jks")
    path = tmp_path / "zilla.yaml"
    path.write_text(text)
    return path


def client(path: Path, env: dict[str, str] = ENV) -> KafkaClient:
    engine = Engine(path, MemoryReactorClock(), environ=env, events=EventLog("t"),
                    print_events=False)
    assert engine._pending is not None
    runtime = engine._pending.runtimes["kc"]
    assert isinstance(runtime, KafkaClient)
    return runtime


def test_the_guard_s_credentials_and_the_vault_s_trust_reach_librdkafka(
        tmp_path: Path, ca: tuple[Path, x509.Certificate]) -> None:
    store, cert = ca
    settings = client(write(tmp_path, store)).settings
    conf = settings.consumer_config("g")
    assert (conf["security.protocol"], conf["sasl.mechanism"], conf["sasl.username"],
            conf["sasl.password"]) == ("SASL_SSL", "SCRAM-SHA-512", "alice", "alice-secret")
    assert conf["ssl.ca.pem"] == cert.public_bytes(Encoding.PEM).decode()
    assert "ssl.ca.location" not in conf  # nothing written to disk
    for producer in (settings.producer_config("leader_only"),
                     settings.admin_config(conf)):  # the write path and the admin client too
        assert {k: producer[k] for k in ("security.protocol", "sasl.mechanism",
                                         "sasl.username", "sasl.password", "ssl.ca.pem")} == \
            {k: conf[k] for k in ("security.protocol", "sasl.mechanism", "sasl.username",
                                  "sasl.password", "ssl.ca.pem")}


def test_a_literal_user_name_is_sent_as_written_and_the_guard_keeps_its_secret_out_of_repr(
        tmp_path: Path, ca: tuple[Path, x509.Certificate]) -> None:
    text = CONFIG.replace('username: "{identity}"', "username: service")
    settings = client(write(tmp_path, ca[0], text)).settings
    assert settings.sasl == {"mechanism": "scram-sha-512", "username": "service",
                             "password": "alice-secret"}
    guard = InlineGuard("g", "alice", "alice-secret")
    assert "alice-secret" not in repr(guard)


def test_trustcacerts_asks_librdkafka_for_the_system_s_cas(
        tmp_path: Path, ca: tuple[Path, x509.Certificate]) -> None:
    text = CONFIG.replace("    vault: your_clients\n", "").replace(
        "      trust: [kafka]\n", "      trustcacerts: true\n")
    conf = client(write(tmp_path, ca[0], text)).settings.consumer_config("g")
    assert (conf["ssl.ca.location"], conf["security.protocol"]) == ("probe", "SASL_SSL")
    assert "ssl.ca.pem" not in conf


def test_without_the_tls_client_sasl_goes_plaintext_and_without_authorization_nothing(
        tmp_path: Path, ca: tuple[Path, x509.Certificate]) -> None:
    text = CONFIG.replace("    exit: tls_out\n", "    exit: tcp_out\n")
    conf = client(write(tmp_path, ca[0], text)).settings.consumer_config("g")
    assert conf["security.protocol"] == "SASL_PLAINTEXT" and "ssl.ca.pem" not in conf
    start = text.index("      authorization:")
    plain = text[:start] + text[text.index("    exit: tcp_out"):]
    conf = client(write(tmp_path, ca[0], plain)).settings.consumer_config("g")
    assert "security.protocol" not in conf and "sasl.username" not in conf


REFUSED = [
    # (case, what to change in CONFIG, the line's needle, path, what the message says)
    ("sasl-and-authorization",
     ("      servers: [kafka:9092]\n",
      "      servers: [kafka:9092]\n      sasl: {mechanism: plain, username: u, password: p}\n"),
     "sasl: {mechanism", "bindings.kc.options.sasl", "expected either `sasl` or `authorization`"),
    ("guard-without-identity",
     ("      identity: ${{env.SASL_USERNAME}}\n", ""),
     'username: "{identity}"', "bindings.kc.options.authorization.sasl_credentials.credentials"
                               ".username", "guard 'sasl_credentials' has no `identity`"),
    ("jwt-guard-for-sasl",
     ("    type: inline\n    options:\n      identity: ${{env.SASL_USERNAME}}\n"
      "      credentials: ${{env.SASL_PASSWORD}}\n",
      "    type: jwt\n    options:\n      keys: https://idp.test/jwks.json\n"),
     "        sasl_credentials:", "bindings.kc.options.authorization.sasl_credentials",
     "(type jwt) used by binding 'kc' holds no credentials to present"),
    ("inline-guard-on-a-route",
     ("        exit: cc\n", "        exit: cc\n        guarded: {sasl_credentials: []}\n"),
     "guarded: {sasl_credentials", "bindings.hk.routes[0].guarded.sasl_credentials",
     "(type inline) used by binding 'hk' checks no credentials"),
    ("inline-guard-in-an-http-server-s-authorization",
     ("    kind: server\n    exit: hk\n",
      "    kind: server\n    options:\n      authorization:\n        sasl_credentials:\n"
      "          credentials: {headers: {authorization: \"Bearer {credentials}\"}}\n"
      "    exit: hk\n"),
     "        sasl_credentials:", "bindings.http0.options.authorization.sasl_credentials",
     "(type inline) used by binding 'http0' checks no credentials"),
    ("inline-guard-format",
     ("      credentials: ${{env.SASL_PASSWORD}}\n",
      "      credentials: ${{env.SASL_PASSWORD}}\n      format: \"{identity}:{credentials}\"\n"),
     "format:", "guards.sasl_credentials.options.format", "none reach an inline guard"),
    ("scram-sha-1",
     ("mechanism: scram-sha-512", "mechanism: scram-sha-1"),
     "mechanism: scram-sha-1",
     "bindings.kc.options.authorization.sasl_credentials.credentials.mechanism",
     "expected plain, scram-sha-256 or scram-sha-512"),
    ("sni-other-than-the-servers",
     ("      sni: [kafka]\n", "      sni: [broker.example]\n"),
     "sni: [broker.example]", "bindings.tls_out.options.sni[0]",
     "expected sni to be the host of the servers of kafka client 'kc' (kafka)"),
    ("plaintext-property-with-tls",
     ("      servers: [kafka:9092]\n",
      "      servers: [kafka:9092]\n      properties: {security.protocol: sasl_plaintext}\n"),
     "properties: {security.protocol", "bindings.kc.options.properties.security.protocol",
     "expected SSL or SASL_SSL"),
    ("a-ca-of-its-own-with-tls",
     ("      servers: [kafka:9092]\n",
      "      servers: [kafka:9092]\n      properties: {ssl.ca.location: /etc/ca.pem}\n"),
     "properties: {ssl.ca.location", "bindings.kc.options.properties.ssl.ca.location",
     "what tls client 'tls_out' trusts"),
    ("an-address-behind-the-tls-client",
     ("      alpn: [h2]\n    exit: tcp_out\n  tcp_out:\n    type: tcp\n    kind: client\n",
      "    exit: tcp_out\n  tcp_out:\n    type: tcp\n    kind: client\n"
      "    options: {host: kafka, port: 9093}\n"),
     "options: {host: kafka, port: 9093}", "bindings.tcp_out.options",
     "options.host and port on the exit of kafka client 'kc' would be ignored"),
    ("trust-and-cacerts-on-the-way-out",
     ("      trust: [kafka]\n      sni: [kafka]\n",
      "      trust: [kafka]\n      trustcacerts: true\n      sni: [kafka]\n"),
     "trustcacerts: true", "bindings.tls_out.options.trustcacerts",
     "expected either `trust` or `trustcacerts: true` on a kafka client's way out"),
    ("spdy-toward-an-http-upstream", None, "alpn: [spdy/3]", "bindings.up_tls.options.alpn[0]",
     "expected h2 or http/1.1, the protocols the http client speaks"),
]

RELAY = """\
name: relay
vaults:
  v:
    type: filesystem
    options:
      trust: {store: trust.jks, type: jks, password: "${{env.KEYSTORE_PASSWORD}}"}
bindings:
  tcp0:
    type: tcp
    kind: server
    options: {host: 127.0.0.1, port: 7114}
    exit: http0
  http0:
    type: http
    kind: server
    exit: sse0
  sse0:
    type: sse
    kind: server
    exit: relay
  relay:
    type: sse
    kind: client
    exit: up_http
  up_http:
    type: http
    kind: client
    exit: up_tls
  up_tls:
    type: tls
    kind: client
    vault: v
    options: {trust: [kafka], alpn: [spdy/3]}
    exit: up_tcp
  up_tcp:
    type: tcp
    kind: client
    options: {host: localhost, port: 9}
"""


@pytest.mark.parametrize("case,change,needle,path,says", REFUSED, ids=[r[0] for r in REFUSED])
def test_check_refuses_what_librdkafka_could_not_do_as_written(
        tmp_path: Path, ca: tuple[Path, x509.Certificate], capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch, case: str, change: tuple[str, str] | None,
        needle: str, path: str, says: str) -> None:
    if change is None:
        text = RELAY
    else:
        assert change[0] in CONFIG, change
        text = CONFIG.replace(change[0], change[1], 1)
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)
    config = write(tmp_path, ca[0], text)
    assert main(["check", "--config", str(config)]) == 1
    out = capsys.readouterr()
    line = next(i for i, t in enumerate(text.splitlines(), 1) if needle in t)
    wanted = f"{config}:{line}: {path}: "
    found = [x for x in out.err.splitlines() if wanted in x]
    assert found and says in found[0], f"{wanted!r} / {says!r} not in:\n{out.err}"
    assert "alice-secret" not in out.out + out.err


def test_the_shape_of_the_example_checks(tmp_path: Path, ca: tuple[Path, x509.Certificate],
                                         monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)
    assert main(["check", "--config", str(write(tmp_path, ca[0]))]) == 0, capsys.readouterr()


def test_a_wrong_store_password_stops_the_build_naming_the_vault(
        tmp_path: Path, ca: tuple[Path, x509.Certificate]) -> None:
    with pytest.raises(ConfigError) as err:
        client(write(tmp_path, ca[0]), {**ENV, "KEYSTORE_PASSWORD": "nope"})
    [problem] = err.value.issues
    assert problem.path == "vaults.your_clients.options.trust.store"
    assert "vault 'your_clients' trust store" in problem.message
    assert "wrong password" in problem.message


def test_new_credentials_in_the_guard_rebuild_the_client_and_nothing_else_does(
        tmp_path: Path, ca: tuple[Path, x509.Certificate]) -> None:
    """The client's `authorization` names its guard (`KindSpec.depends`): the graph a reload
    builds makes a client that presents the guard's new credentials, and keeps the client (its
    consumers and producers) when nothing it reads changed. (Built as a reload builds it, on the
    graph before, without starting the client's threads.)"""
    path = write(tmp_path, ca[0])
    env = dict(ENV)
    engine = Engine(path, MemoryReactorClock(), environ=env, events=EventLog("t"),
                    print_events=False)
    first = engine._pending
    assert first is not None
    before = first.runtimes["kc"]

    def rebuilt() -> Graph:
        assert first is not None
        return engine._build(load_config(path, engine.registry, env), previous=first)

    path.write_text(CONFIG.replace("port: 7114", "port: 7115"))
    assert rebuilt().runtimes["kc"] is before
    env["SASL_PASSWORD"] = "rotated-secret"
    after = rebuilt().runtimes["kc"]
    assert isinstance(after, KafkaClient) and after is not before
    assert after.settings.consumer_config("g")["sasl.password"] == "rotated-secret"
