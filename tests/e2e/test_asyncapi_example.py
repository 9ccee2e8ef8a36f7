"""Zilla's public `asyncapi.sse.kafka.proxy` example - its zilla.yaml and its two AsyncAPI specs,
copied as they are into tests/data, only the hosts they name changed - runs on the real daemon
(twistd) against a real broker and streams its topic to curl as the example's own test expects;
with an `x-zilla-sse-kafka` filter added to its SSE spec, the stream keeps to the filter; with an
`https` server added, it streams over TLS with the vault's key as well; and its
guarded variant (tests/data/asyncapi-guarded) checks JWTs from a real JWKS server and streams
each user their own records (`{identity}` filters), roles from the spec's scopes."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ssekd.dev.broker import Broker, free_port, start_broker
from tests.support.asyncapi_example import WHERE, adapt
from tests.support.broker import Kafka
from tests.support.daemon import Daemon
from tests.support.jwt import CurlStream, JwksServer, curl, rsa_key, wait_keys_loaded
from tests.support.pki import ENV, PASSWORD, make_pki
from tests.support.wait import wait_until

pytestmark = [pytest.mark.daemon, pytest.mark.broker]

#: What the example's own test (.github/test.sh) produces and expects on the stream.
INPUT = b'{"id": 1,"name":"Hello World!"}'
EXPECTED = 'data:{"id": 1,"name":"Hello World!"}'
#: The id the example's README shows for that first event (partition 0, next offset 1).
README_ID = "id:AQIAAg=="


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    """A broker of the test's own: the example's topic is `events`, a name other tests use."""
    b = start_broker(log_path=tmp_path / "tansu.log")
    yield b
    b.stop()


@pytest.fixture
def events(broker: Broker) -> Kafka:
    """The broker with the example's topic, made as its compose file's kafka-init makes it."""
    kafka = Kafka(broker.bootstrap)
    from confluent_kafka.admin import NewTopic

    for f in kafka.admin.create_topics([NewTopic("events", 1, 1, config={
            "cleanup.policy": "compact"})]).values():
        f.result(10)
    return kafka


def _start(folder: Path, broker: Broker, run_daemon: Callable[..., Daemon],
           config: str = "zilla-examples/asyncapi.sse.kafka.proxy/etc/zilla.yaml",
           edit: Callable[[Path], None] | None = None,
           env: dict[str, str] | None = None) -> tuple[Daemon, int]:
    port = free_port()
    adapt(folder, port, broker.bootstrap)
    if edit is not None:
        edit(folder)
    daemon = run_daemon(folder / config, env=env, wait_ports=[port])
    return daemon, port


def test_zilla_example_streams_the_topic_as_its_own_test_expects(
        tmp_path: Path, broker: Broker, events: Kafka,
        run_daemon: Callable[..., Daemon]) -> None:
    daemon, port = _start(tmp_path, broker, run_daemon)
    # the example's test: curl with --http2 (an h2c upgrade offer, answered in HTTP/1.1)
    stream = CurlStream(f"http://localhost:{port}/events", "--http2",
                        "-H", "Accept:text/event-stream")
    try:
        wait_until(lambda: "BINDING_HTTP_REQUEST_ACCEPTED" in daemon.output(), 10,
                   what="the stream was not opened")
        events.produce("events", INPUT, key=b"1")
        # a record the Kafka spec's payload schema refuses (id minimum 0) is never sent
        events.produce("events", b'{"id": -1, "name": "refused"}', key=b"2")
        events.produce("events", b'{"id": 3, "name": "after"}', key=b"3")
        events.flush()
        stream.wait_for('data:{"id": 3, "name": "after"}', timeout=20)
        lines = stream.text.splitlines()
        assert EXPECTED in lines and README_ID in lines
        assert "refused" not in stream.text
        assert "BINDING_KAFKA_RECORD_INVALID events partition 0 offset 1" in daemon.output()
    finally:
        stream.proc.kill()


def test_example_with_an_x_zilla_sse_kafka_filter_streams_only_what_it_lets_through(
        tmp_path: Path, broker: Broker, events: Kafka,
        run_daemon: Callable[..., Daemon]) -> None:
    def add_filter(folder: Path) -> None:
        spec = folder / WHERE / "specs" / "sse-asyncapi.yaml"
        text = spec.read_text()
        bindings = '      x-zilla-sse:\n        method: "GET"\n'
        assert bindings in text
        spec.write_text(text.replace(bindings, bindings + (
            "      x-zilla-sse-kafka:\n"
            "        filters:\n"
            "          - headers:\n"
            "              my-app-header: \"7\"\n")))

    daemon, port = _start(tmp_path, broker, run_daemon, edit=add_filter)
    stream = CurlStream(f"http://localhost:{port}/events")
    try:
        wait_until(lambda: "BINDING_HTTP_REQUEST_ACCEPTED" in daemon.output(), 10,
                   what="the stream was not opened")
        for i, header in enumerate([b"7", b"8", b"7", b"9", b"7"]):
            events.produce("events", json.dumps({"id": i, "name": f"n{i}"}).encode(),
                           key=str(i).encode(), headers=[("my-app-header", header)])
        events.flush()
        stream.wait_for('data:{"id": 4, "name": "n4"}', timeout=20)
        data = [line for line in stream.text.splitlines() if line.startswith("data:")]
        assert [json.loads(d[5:])["id"] for d in data] == [0, 2, 4]
    finally:
        stream.proc.kill()


def test_an_https_server_of_the_spec_is_served_over_tls_with_the_vault_s_key(
        tmp_path: Path, broker: Broker, events: Kafka,
        run_daemon: Callable[..., Daemon]) -> None:
    """The SSE spec gains an `https` server: the asyncapi server composes a tls binding with the
    keys of its vault, and curl streams the topic over TLS (HTTP/2 by ALPN), the certificate
    checked against the test CA, while the example's http server goes on serving."""
    pki = make_pki(tmp_path)
    tls_port = free_port()

    def add_https(folder: Path) -> None:
        spec = folder / WHERE / "specs" / "sse-asyncapi.yaml"
        text = spec.read_text()
        server = "    protocol: http\n"
        assert text.count(server) == 1
        spec.write_text(text.replace(server, server + (
            f"  secure_sse:\n    host: localhost:{tls_port}\n    protocol: https\n")))
        config = folder / WHERE / "zilla.yaml"
        text = config.read_text()
        first = "    kind: server\n    options:\n"
        assert text.count(first) == 1
        text = text.replace(first, "    kind: server\n    vault: server\n    options:\n")
        text = text.replace("bindings:\n", (
            f"vaults:\n  server:\n    type: filesystem\n    options:\n      keys:\n"
            f"        store: {pki.keys}\n        type: pkcs12\n"
            f"        password: ${{{{env.KEYSTORE_PASSWORD}}}}\nbindings:\n"), 1)
        listed = "          servers:\n            - http://localhost:"
        text = text.replace(listed, f"          servers:\n            - https://localhost:"
                                    f"{tls_port}\n            - http://localhost:", 1)
        config.write_text(text)

    daemon, port = _start(tmp_path / "run", broker, run_daemon, edit=add_https, env=ENV)
    assert PASSWORD not in daemon.output()
    secure = CurlStream(f"https://localhost:{tls_port}/events", "--http2", "--cacert",
                        str(pki.ca_pem), "-i")
    plain = CurlStream(f"http://localhost:{port}/events")
    try:
        wait_until(lambda: daemon.output().count("BINDING_HTTP_REQUEST_ACCEPTED") >= 2, 10,
                   what="the streams were not opened")
        events.produce("events", INPUT, key=b"1")
        events.flush()
        secure.wait_for(EXPECTED, timeout=20)
        plain.wait_for(EXPECTED, timeout=20)
        assert secure.text.startswith("HTTP/2 200"), secure.text[:40]  # h2, by ALPN
        assert f"https://localhost:{tls_port}/events" in daemon.output()
    finally:
        secure.proc.kill()
        plain.proc.kill()


def test_guarded_variant_streams_each_user_their_records_and_checks_scopes(
        tmp_path: Path, broker: Broker, events: Kafka,
        run_daemon: Callable[..., Daemon]) -> None:
    key = rsa_key()
    jwks = JwksServer([key]).up()
    try:
        daemon, port = _start(tmp_path, broker, run_daemon,
                              config="asyncapi-guarded/zilla.yaml",
                              env={"JWKS_URL": jwks.url})
        wait_keys_loaded(daemon)
        base = f"http://127.0.0.1:{port}"
        alice, bob = key.token(sub="alice"), key.token(sub="bob")
        admin = key.token(sub="carol", scope="read admin")
        assert curl(f"{base}/events", "-m", "2").status == 401
        # a good token without the scope finds no route (the http server's, as in Zilla)
        assert curl(f"{base}/all-events", "-m", "2", token=alice).status == 404
        mine = CurlStream(f"{base}/events", token=alice)
        theirs = CurlStream(f"{base}/events?access_token={bob}")  # as an EventSource would
        everything = CurlStream(f"{base}/all-events", token=admin)
        try:
            wait_until(lambda: daemon.output().count("BINDING_HTTP_REQUEST_ACCEPTED") >= 5, 10,
                       what="the streams were not opened")
            for i, owner in enumerate(["alice", "bob", "alice", "bob"]):
                events.produce("events", json.dumps({"id": i, "name": owner}).encode(),
                               key=f"k{i}".encode(), headers=[("owner", owner.encode())])
            events.flush()
            for stream, last in ((mine, 2), (theirs, 3), (everything, 3)):
                stream.wait_for(f'data:{{"id": {last}, "name": ', timeout=20)
            assert _names(mine) == ["alice", "alice"]
            assert _names(theirs) == ["bob", "bob"]
            assert _names(everything) == ["alice", "bob", "alice", "bob"]
            # the admin operation's x-zilla-sse-kafka event id: the key form
            ids = [json.loads(line[3:]) for line in everything.text.splitlines()
                   if line.startswith("id:")]
            assert [base64.urlsafe_b64decode(i[0] + "==") for i in ids] == \
                [b"k0", b"k1", b"k2", b"k3"]
        finally:
            for s in (mine, theirs, everything):
                s.proc.kill()
    finally:
        jwks.down()


def _names(stream: CurlStream) -> list[str]:
    return [json.loads(line[5:])["name"] for line in stream.text.splitlines()
            if line.startswith("data:")]
