"""Zilla's http.kafka.oneway example on ssekd: a `POST /events` written to the topic `events` by
a kafka client that authenticates with SASL SCRAM-SHA-512 (user and password from an `inline`
guard) over TLS (trusting the `kafka` entry of a `jks` trust store).

The example as published checks and builds, and its kafka client hands librdkafka exactly what
its Kafka (bitnami's, SASL_SSL with a JKS keystore) needs: `SASL_SSL`, `SCRAM-SHA-512`, alice's
credentials and the trust store's certificate as `ssl.ca.pem`.

To run test.sh, the broker is the tests' own, and it can do neither of what the example's
needs, so for that run - and only there, by editing the adapted config in the open below - the
kafka client leaves out `authorization` and reaches its tcp client directly, not through the tls
client:

- SASL: tansu 0.6 lists SCRAM-SHA-512 but refuses every SASL handshake ("Unsupported SASL
  mechanism"), and with `--authentication` no user can be created (its own `tansu user create`
  is refused as unauthenticated);
- TLS: its `--cert`/`--key` cannot be given together, and the example's certificate names the
  host `kafka`, which this machine does not resolve (librdkafka checks the broker's host name,
  and the test's broker is `127.0.0.1`).

The TLS way out itself runs against a real TLS listener in
`tests/bindings/kafka/test_tls_way_out.py`; the SASL mapping is what librdkafka is handed (no
SASL broker runs in these tests).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.serialization import Encoding
from twisted.internet.testing import MemoryReactorClock

from ssekd.bindings.kafka.client import KafkaClient
from ssekd.engine import Engine
from ssekd.telemetry.events import EventLog
from ssekd.vaults.pkcs12 import read_store
from tests.e2e.zilla_examples.conftest import RunExample
from tests.support.wait import wait_until
from tests.support.writes import read_records
from tests.support.zilla_examples import prepare

pytestmark = [pytest.mark.daemon, pytest.mark.broker]

NAME = "http.kafka.oneway"
#: test.sh's request body and the answer it expects (`curl -w "%{http_code}"`: no body, 204).
INPUT = '{"greeting":"Hello, world"}'
EXPECTED = "204"
BIN = Path(sys.executable).parent

#: What the test's run leaves out of the example (module docstring): the kafka client's SASL...
AUTHORIZATION = """\
      authorization:
        sasl_credentials:
          credentials:
            mechanism: scram-sha-512
            username: "{identity}"
            password: "{credentials}"
"""
#: ... and the tls client on its way out.
THROUGH_TLS = "    exit: south_tls_client\n"
PLAIN = "    exit: south_tcp_client\n"


def curl_post(port: int) -> str:
    """test.sh's request, as it makes it: curl's output is the body, then the status code."""
    done = subprocess.run(["curl", "-sS", "--max-time", "10", "-w", "%{http_code}",
                           f"http://localhost:{port}/events",
                           "-H", "Content-Type: application/json", "-d", INPUT],
                          capture_output=True, text=True, timeout=30, check=False)
    return done.stdout if done.returncode == 0 else f"curl failed: {done.stderr}"


def test_post_events_is_204_and_the_record_carries_only_content_type(
        run_example: RunExample) -> None:
    """test.sh: `POST /events` answers 204 with no body (retried 5 times 2 s apart, as
    test.sh's `retry_until 5 2`). Beyond it: the record on `events` is the body, without a key,
    and - no reply being asked for - carries only the request's `content-type`."""
    example = run_example(NAME, start=False)
    assert example.bootstrap is not None
    text = example.config.read_text()
    assert text.count(AUTHORIZATION) == 1 and text.count(THROUGH_TLS) == 1, text
    example.config.write_text(text.replace(AUTHORIZATION, "").replace(THROUGH_TLS, PLAIN))
    example.start()
    port = example.port(7114)

    output = ""
    for _ in range(5):
        output = curl_post(port)
        if output == EXPECTED:
            break
        time.sleep(2)
    assert output == EXPECTED

    found: list[Any] = []

    def written() -> bool:
        found[:] = read_records(example.bootstrap or "", "events")
        return bool(found)

    wait_until(written, 20, what="the record test.sh's POST wrote on events")
    [record] = found
    assert record.value() == INPUT.encode()
    assert record.key() is None
    assert record.headers() == [("content-type", b"application/json")]


def test_the_example_as_published_checks_and_hands_librdkafka_sasl_ssl(tmp_path: Path) -> None:
    """With the compose file's own environment (the broker `kafka:9092`, the store password,
    alice's credentials) and nothing changed: `ssekd check` passes, and the kafka client's
    consumers, producers and admin client get SASL_SSL, SCRAM-SHA-512, alice/alice-secret and
    the trust store's `kafka` certificate."""
    example = prepare(NAME, tmp_path / NAME)
    assert example.env["KAFKA_BOOTSTRAP_SERVER"] == "kafka:9092"
    done = subprocess.run([str(BIN / "ssekd"), "check", "--config", str(example.config)],
                          env={**os.environ, **example.env}, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert "south_kafka_client (kafka client kafka:9092) -> south_tls_client (tls client)" in \
        done.stdout

    engine = Engine(example.config, MemoryReactorClock(), environ=example.env,
                    events=EventLog("t"), print_events=False)
    assert engine._pending is not None
    client = engine._pending.runtimes["south_kafka_client"]
    assert isinstance(client, KafkaClient)
    [kafka] = read_store(example.root("/etc/zilla/tls/kafka.truststore.jks").read_bytes(),
                         "generated")
    assert kafka.alias == "kafka"
    consumer = client.settings.consumer_config("g")
    for conf in (consumer, client.settings.producer_config("in_sync_replicas"),
                 client.settings.admin_config(consumer)):
        assert conf["bootstrap.servers"] == "kafka:9092"
        assert (conf["security.protocol"], conf["sasl.mechanism"], conf["sasl.username"],
                conf["sasl.password"]) == ("SASL_SSL", "SCRAM-SHA-512", "alice", "alice-secret")
        assert conf["ssl.ca.pem"] == kafka.certificate.public_bytes(Encoding.PEM).decode()
