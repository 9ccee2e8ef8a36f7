"""The AsyncAPI document the running daemon serves promises only what its routes serve: every
channel it advertises, requested on every server it lists (parameters filled in, a token for a
guarded one), answers `200 text/event-stream`. For a config whose routes overlap and shadow one
another (tests/support/channels.py), and for the shipped etc/zilla.yaml, whose sse-kafka route
`/{topic}` is reached only as `/events` (it was advertised as `/{topic}`, and `/other` is 404)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import yaml

from ssekd.dev import certs
from ssekd.dev.broker import Broker, free_port
from tests.support.asyncapi import ROOT, problems
from tests.support.broker import Kafka
from tests.support.channels import EXPECTED, write_walk_config
from tests.support.daemon import start_daemon
from tests.support.jwt import JwksServer, curl, ec_key, wait_keys_loaded

pytestmark = [pytest.mark.daemon, pytest.mark.broker]


def stream_answer(url: str, ca: Path, token: str | None = None) -> tuple[int, str]:
    """Status and content type of a GET of `url`, hung up on after a second (a stream goes on)."""
    answer = curl(url, "--cacert", str(ca), "-N", token=token, timeout=1.5)
    return answer.status, answer.headers.get("content-type", "")


def every_channel(doc: dict, fill: dict[str, str]) -> list[tuple[str, str, bool]]:
    """(URL, address, guarded) of every channel on every server it lists, with `{name}` filled
    from `fill`."""
    urls = []
    for key, channel in doc["channels"].items():
        guarded = "security" in doc["operations"][f"receive_{key}"]
        path = re.sub(r"\{(\w+)\}", lambda m: fill[m.group(1)], channel["address"])
        for ref in channel["servers"]:
            server = doc["servers"][ref["$ref"].rsplit("/", 1)[1]]
            urls.append((f"{server['protocol']}://{server['host']}{path}", channel["address"],
                         guarded))
    return urls


@pytest.mark.timeout(120)
def test_every_advertised_channel_is_a_stream(kafka: Kafka, kafka_broker: Broker,
                                              tmp_path: Path) -> None:
    store, _ = certs.ensure_dev_store(tmp_path / "tls")
    key = ec_key()
    jwks = JwksServer([key]).up()
    plain, secure = free_port(), free_port()
    config = write_walk_config(tmp_path, plain, secure, kafka_broker.bootstrap, jwks.url,
                               str(store))
    topic = kafka.topic(1)
    daemon = start_daemon(config, wait_ports=[plain, secure])
    try:
        wait_keys_loaded(daemon)
        doc = yaml.safe_load(curl(f"http://127.0.0.1:{plain}/asyncapi.yaml").body)
        assert problems(doc) == []
        urls = every_channel(doc, {"topic": topic})
        assert {address for _, address, _ in urls} == set(EXPECTED)
        assert len(urls) == sum(len(ports) for _, ports in EXPECTED.values())
        ca = store.parent / certs.CA_NAME
        for url, address, guarded in urls:
            token = key.token(sub="alice") if guarded else None
            assert stream_answer(url, ca, token) == (200, "text/event-stream"), url
        # and what it leaves out is not a stream
        for path in ("/static/x", "/other"):
            assert stream_answer(f"http://localhost:{plain}{path}", ca)[1] != \
                "text/event-stream", path
        assert stream_answer(f"http://localhost:{plain}/secure/{topic}", ca)[1] != \
            "text/event-stream", "/secure/ is advertised on https only"
    finally:
        daemon.stop()
        jwks.down()


@pytest.mark.timeout(120)
def test_the_shipped_config_advertises_what_it_serves(kafka: Kafka, kafka_broker: Broker,
                                                      tmp_path: Path) -> None:
    plain, secure = free_port(), free_port()
    etc = tmp_path / "etc"
    shutil.copytree(ROOT / "etc" / "schemas", etc / "schemas")
    shutil.copytree(ROOT / "www", tmp_path / "www")
    text = (ROOT / "etc" / "zilla.yaml").read_text()
    text = text.replace("7114", str(plain)).replace("7143", str(secure)) \
        .replace("localhost:9092", kafka_broker.bootstrap)
    (etc / "zilla.yaml").write_text(text)
    store, _ = certs.ensure_dev_store(etc / "tls")
    daemon = start_daemon(etc / "zilla.yaml", wait_ports=[plain, secure])
    try:
        doc = yaml.safe_load(curl(f"http://127.0.0.1:{plain}/asyncapi.yaml").body)
        assert problems(doc) == []
        urls = every_channel(doc, {})
        assert sorted(urls) == [(f"http://localhost:{plain}/events", "/events", False),
                                (f"https://localhost:{secure}/events", "/events", False)]
        for url, _, _ in urls:
            assert stream_answer(url, store.parent / certs.CA_NAME) == \
                (200, "text/event-stream"), url
    finally:
        daemon.stop()
