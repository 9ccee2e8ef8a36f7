"""The Kafka client's security settings: what the tail consumer and its admin client hand
librdkafka for SASL and TLS, so credentials never travel as SASL_PLAINTEXT to a TLS listener."""

from __future__ import annotations

import pytest
from twisted.internet.testing import MemoryReactorClock

from ssekd.bindings.kafka import tail_consumer
from ssekd.bindings.kafka.client import KafkaClient
from ssekd.bindings.kafka.settings import ClientSettings
from ssekd.bindings.kafka.tail_consumer import TailConsumer

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


def test_kafka_sasl_reaches_librdkafka() -> None:
    """No SASL broker runs in the tests: what the client hands librdkafka is the behaviour."""
    settings = ClientSettings(servers=("k:9092",), sasl={"mechanism": "scram-sha-256",
                                                          "username": "u", "password": "p"})
    conf = settings.consumer_config("g")
    assert (conf["security.protocol"], conf["sasl.mechanism"], conf["sasl.username"],
            conf["sasl.password"]) == ("SASL_PLAINTEXT", "SCRAM-SHA-256", "u", "p")
