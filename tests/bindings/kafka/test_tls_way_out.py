"""A kafka client whose exit is a tls client reaches its brokers over real TLS, trusting what the
tls client's vault trusts (a JKS trust store made by keytool), and nothing else.

The development broker cannot terminate TLS itself (tansu 0.6 refuses `--cert` beside `--key`),
so HAProxy (the Debian package, installed by `make test`) does it in front of it, and tansu
advertises HAProxy's address: every connection of librdkafka - the daemon's and the test's -
is TLS, with the broker's certificate (issued for `localhost` and `127.0.0.1` by the test's CA)
checked against the host name, as librdkafka does by default. The write path (http-kafka, whose
producer takes the client's security settings) shows it: a `POST` is `204` and its record is on
the topic; with a trust store holding another CA the same `POST` is refused and nothing is
written.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from cryptography.hazmat.primitives.serialization import Encoding

from ssekd.dev.broker import free_port, port_open, stop_process
from ssekd.dev.certs import issue, make_ca
from tests.support.broker import start_tansu, stop_tansu
from tests.support.daemon import Daemon
from tests.support.pki import write_pem
from tests.support.wait import wait_until
from tests.support.writes import read_records, request

pytestmark = [pytest.mark.daemon, pytest.mark.broker]

KEYTOOL = shutil.which("keytool")
PASSWORD = "trust-password"
TOPIC = "events"


@dataclass
class TlsBroker:
    """tansu behind HAProxy's TLS: `bootstrap` is the TLS address, `ca` what its certificate
    chains to."""

    bootstrap: str
    ca: Path
    folder: Path

    def security(self) -> dict[str, str]:
        return {"security.protocol": "SSL", "ssl.ca.location": str(self.ca)}


def keytool_trust(path: Path, alias: str, pem: Path) -> Path:
    assert KEYTOOL is not None, "keytool (Java, installed by make test) is needed"
    subprocess.run([KEYTOOL, "-importcert", "-noprompt", "-alias", alias, "-file", str(pem),
                    "-storetype", "jks", "-keystore", str(path), "-storepass", PASSWORD],
                   check=True, capture_output=True, timeout=60)
    return path


@pytest.fixture
def tls_broker(tmp_path: Path) -> Iterator[TlsBroker]:
    assert shutil.which("haproxy"), "haproxy (installed by make test) is needed"
    ca = make_ca("tls broker CA")
    pem = write_pem(tmp_path / "broker.pem", issue(ca, ["localhost", "127.0.0.1"]))
    ca_pem = tmp_path / "ca.pem"
    ca_pem.write_bytes(ca.cert.public_bytes(Encoding.PEM))
    plain, tls_port = free_port(), free_port()
    tansu, _ = start_tansu(tmp_path, plain, tls_port)
    config = tmp_path / "haproxy.cfg"
    config.write_text(f"""\
global
    maxconn 200
defaults
    mode tcp
    timeout connect 5s
    timeout client 120s
    timeout server 120s
frontend kafka_tls
    bind 127.0.0.1:{tls_port} ssl crt {pem}
    default_backend tansu
backend tansu
    server tansu 127.0.0.1:{plain}
""")
    log = tmp_path / "haproxy.log"
    with open(log, "wb") as out:
        haproxy = subprocess.Popen(["haproxy", "-db", "-f", str(config)], stdout=out,
                                   stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        wait_until(lambda: port_open("127.0.0.1", tls_port), 10,
                   what=lambda: f"haproxy did not start:\n{log.read_text()}")
        broker = TlsBroker(f"127.0.0.1:{tls_port}", ca_pem, tmp_path)
        admin = AdminClient({"bootstrap.servers": broker.bootstrap, **broker.security()})
        for f in admin.create_topics([NewTopic(TOPIC, 1, 1)]).values():
            f.result(20)
        yield broker
    finally:
        stop_process(haproxy, 5)
        stop_tansu(tansu)


def write_config(broker: TlsBroker, trust_store: Path, port: int) -> Path:
    path = broker.folder / f"zilla-{trust_store.stem}.yaml"
    path.write_text(f"""\
name: tlsout
vaults:
  brokers:
    type: filesystem
    options:
      trust: {{store: {trust_store}, type: jks, password: "${{{{env.TRUST_PASSWORD}}}}"}}
bindings:
  tcp0:
    type: tcp
    kind: server
    options: {{host: 127.0.0.1, port: {port}}}
    exit: http0
  http0:
    type: http
    kind: server
    exit: hk
  hk:
    type: http-kafka
    kind: proxy
    routes:
      - when: [{{method: POST, path: /events}}]
        exit: cc
        with: {{capability: produce, topic: {TOPIC}}}
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
      servers: ["{broker.bootstrap}"]
      producer-properties: {{message.timeout.ms: 5000}}
    exit: tls_out
  tls_out:
    type: tls
    kind: client
    vault: brokers
    options: {{trust: [kafka]}}
    exit: tcp_out
  tcp_out:
    type: tcp
    kind: client
telemetry:
  exporters:
    out: {{type: stdout}}
""")
    return path


def test_writes_reach_the_broker_over_tls_trusting_the_jks_store(
        tls_broker: TlsBroker, run_daemon: Callable[..., Daemon]) -> None:
    store = keytool_trust(tls_broker.folder / "trusted.jks", "kafka", tls_broker.ca)
    port = free_port()
    daemon = run_daemon(write_config(tls_broker, store, port), env={"TRUST_PASSWORD": PASSWORD},
                        wait_ports=[port])
    answers = []

    def written() -> bool:
        answers.append(request(port, "POST", "/events", {"Content-Type": "text/plain"},
                               b"over tls"))
        return answers[-1].status == 204

    wait_until(written, 30, what=lambda: f"a 204 for the POST; answers {answers[-3:]}:\n"
                                        f"{daemon.output()}")
    records = read_records(tls_broker.bootstrap, TOPIC, security=tls_broker.security())
    assert [r.value() for r in records] == [b"over tls"]


def test_a_broker_whose_certificate_the_store_does_not_trust_gets_nothing(
        tls_broker: TlsBroker, run_daemon: Callable[..., Daemon]) -> None:
    other = tls_broker.folder / "other-ca.pem"
    other.write_bytes(make_ca("someone else's CA").cert.public_bytes(Encoding.PEM))
    store = keytool_trust(tls_broker.folder / "untrusted.jks", "kafka", other)
    port = free_port()
    daemon = run_daemon(write_config(tls_broker, store, port), env={"TRUST_PASSWORD": PASSWORD},
                        wait_ports=[port])
    answers = [request(port, "POST", "/events", {"Content-Type": "text/plain"}, b"leak?",
                       timeout=30) for _ in range(3)]
    assert all(a.status == 503 for a in answers), answers  # no broker reachable
    assert read_records(tls_broker.bootstrap, TOPIC, security=tls_broker.security()) == []
    assert "certificate verify failed" in daemon.output()
