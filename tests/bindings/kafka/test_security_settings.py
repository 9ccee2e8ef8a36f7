"""Smaller reliability findings (issue 9): a tcp route condition that could never mean what it
says, the Kafka client's security settings, and `make run` starting a broker only when asked."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from twisted.internet.testing import MemoryReactorClock

from ssekd.bindings.kafka import tail_consumer
from ssekd.bindings.kafka.client import KafkaClient
from ssekd.bindings.kafka.settings import ClientSettings
from ssekd.bindings.kafka.tail_consumer import TailConsumer
from ssekd.config import ConfigError
from ssekd.dev.broker import free_port, port_open, stop_process
from ssekd.engine import Engine

TCP_AUTHORITY = """\
name: t
bindings:
  tcp0:
    type: tcp
    kind: server
    options: {port: 7114}
    routes:
      - when:
          - port: 7114
          - authority: example.com
        exit: http0
  http0:
    type: http
    kind: server
    exit: files_map
  files_map:
    type: http-filesystem
    kind: proxy
    routes: [{when: [{path: "/{p}"}], exit: files, with: {path: "${params.p}"}}]
  files: {type: filesystem, kind: server, options: {location: .}}
"""


def test_tcp_route_on_authority_is_refused_at_its_line(tmp_path: Path) -> None:
    """At accept there is no host name to match (no SNI, no Host header yet): a route on
    `authority` would have matched every connection, so the config is refused instead."""
    config = tmp_path / "zilla.yaml"
    config.write_text(TCP_AUTHORITY)
    with pytest.raises(ConfigError) as caught:
        Engine(config, reactor=MemoryReactorClock(), environ={})
    (issue,) = caught.value.issues
    assert (issue.file, issue.line) == (config, 10), str(caught.value)
    assert issue.path == "bindings.tcp0.routes[0].when[1].authority"
    assert "tcp routes cannot match authority" in issue.message
    assert "route by authority in the tls or http binding" in issue.message


# -- the Kafka client's security settings --------------------------------------------------------

SASL = {"mechanism": "scram-sha-512", "username": "u", "password": "p"}


def confs(monkeypatch: pytest.MonkeyPatch, settings: ClientSettings) -> tuple[dict, dict]:
    """The confs the tail consumer hands librdkafka for its Consumer and its AdminClient."""
    seen: dict[str, dict] = {}

    class FakeConsumer:
        def __init__(self, conf: dict) -> None:
            seen["consumer"] = dict(conf)

        def close(self) -> None:
            pass

    def fake_admin(conf: dict) -> object:
        seen["admin"] = dict(conf)
        return object()

    monkeypatch.setattr(tail_consumer, "Consumer", FakeConsumer)
    monkeypatch.setattr(tail_consumer, "AdminClient", fake_admin)
    client = KafkaClient(MemoryReactorClock(), settings, "kc", lambda name, detail: None)
    tail = TailConsumer(client, "cs")
    tail.stopping.set()  # build the consumer, then leave the loop at once
    tail.run()
    tail._compacted("t")  # the admin client is made when a topic's policy is asked
    return seen["consumer"], seen["admin"]


@pytest.mark.parametrize(("sasl", "properties", "protocol"), [
    (SASL, {}, "SASL_PLAINTEXT"),
    (SASL, {"ssl.ca.location": "/etc/kafka/ca.pem"}, "SASL_SSL"),
    (SASL, {"security.protocol": "SSL"}, "SASL_SSL"),
    (SASL, {"security.protocol": "sasl_ssl"}, "SASL_SSL"),
    (None, {"ssl.ca.location": "/etc/kafka/ca.pem"}, "SSL"),
    (None, {"security.protocol": "SSL"}, "SSL"),
    (None, {}, None),
], ids=["sasl", "sasl+ssl-key", "sasl+ssl", "sasl_ssl", "ssl-key", "ssl", "plaintext"])
def test_security_protocol_follows_the_properties(monkeypatch: pytest.MonkeyPatch,
                                                  sasl: dict | None, properties: dict,
                                                  protocol: str | None) -> None:
    """With TLS asked for in `properties`, SASL credentials travel over TLS (`SASL_SSL`), never
    as `SASL_PLAINTEXT` to a TLS listener; `ssl.*` keys alone mean `SSL`."""
    settings = ClientSettings(servers=("kafka:9093",), sasl=sasl, properties=properties)
    consumer, admin = confs(monkeypatch, settings)
    assert consumer.get("security.protocol") == protocol
    assert admin.get("security.protocol") == protocol


def test_admin_client_gets_every_security_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    properties = {"ssl.ca.location": "/etc/kafka/ca.pem",
                  "ssl.certificate.location": "/etc/kafka/client.pem",
                  "ssl.key.location": "/etc/kafka/client.key",
                  "ssl.endpoint.identification.algorithm": "https",
                  "sasl.oauthbearer.config": "scope=x",
                  "security.protocol": "SSL", "fetch.wait.max.ms": 10}
    settings = ClientSettings(servers=("kafka:9093",), sasl=SASL, properties=properties)
    consumer, admin = confs(monkeypatch, settings)
    security = {k: v for k, v in consumer.items()
                if k.startswith(("security.", "ssl.", "sasl."))}
    assert len(security) == 9  # five ssl/sasl properties, three from `sasl`, the protocol
    logged = {"logger": consumer["logger"], "log_level": consumer["log_level"]}  # the same log
    assert admin == {"bootstrap.servers": "kafka:9093", **security, **logged}
    assert "group.id" not in admin and "fetch.wait.max.ms" not in admin


# -- make run starts a development broker only when asked -----------------------------------------

DEV = """\
name: dev
bindings:
  tcp0: {{type: tcp, kind: server, options: {{host: 127.0.0.1, port: {port}}}, exit: http0}}
  http0: {{type: http, kind: server, exit: files_map}}
  files_map:
    type: http-filesystem
    kind: proxy
    routes: [{{when: [{{path: "/{{p}}"}}], exit: files, with: {{path: "${{params.p}}"}}}}]
  files: {{type: filesystem, kind: server, options: {{location: .}}}}
  cs: {{type: kafka, kind: cache_server, options: {{bootstrap: [demo]}}, exit: kc}}
  kc: {{type: kafka, kind: client, options: {{servers: ["127.0.0.1:{kafka}"]}}}}
"""


def run_dev(tmp_path: Path, *flags: str) -> tuple[int, str]:
    """Run `python -m ssekd.dev` until its daemon listens; returns the Kafka port and what the
    launcher said, with the launcher stopped again (its broker, if any, with it)."""
    port, kafka = free_port(), free_port()
    config = tmp_path / "zilla.yaml"
    config.write_text(DEV.format(port=port, kafka=kafka))
    log = tmp_path / "dev.log"
    with open(log, "wb") as out:
        launcher = subprocess.Popen([sys.executable, "-m", "ssekd.dev", "--config", str(config),
                                     "--no-demo", *flags], stdout=out, stderr=subprocess.STDOUT,
                                    cwd=tmp_path)
    try:
        # Started, not merely listening: the daemon opens its port before its reactor runs, and
        # a SIGTERM in between would end it with the signal's status instead of 0.
        deadline = time.monotonic() + 30
        while "ENGINE_STARTED" not in log.read_text():
            assert launcher.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        broker_listened = port_open("127.0.0.1", kafka)
    finally:
        assert stop_process(launcher) == 0, log.read_text()
    return broker_listened, log.read_text()


def test_make_run_without_the_flag_never_starts_a_broker(tmp_path: Path) -> None:
    """A production host whose Kafka is briefly down must not get a fake, empty broker on the
    Kafka address: without `--dev-broker` the launcher says nothing listens and goes on."""
    broker_listened, said = run_dev(tmp_path)
    assert not broker_listened, said
    assert "nothing listens on 127.0.0.1:" in said and "--dev-broker" in said, said
    assert "development broker (tansu) on" not in said


def test_make_run_with_the_flag_starts_one_where_nothing_listens(tmp_path: Path) -> None:
    broker_listened, said = run_dev(tmp_path, "--dev-broker")
    assert broker_listened, said
    assert "development broker (tansu) on 127.0.0.1:" in said
