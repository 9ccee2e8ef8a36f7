"""Writes while the broker fails: frozen (SIGSTOP) during a POST, and killed. A write is never
answered 2xx before the broker has it; a 503 says to try again, and the same request again
(same idempotency key) waits for the first write instead of writing a second record - so once
the broker is back every write is there exactly once."""

from __future__ import annotations

import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ssekd.dev.broker import Broker, free_port, start_broker
from tests.support.daemon import Daemon, start_daemon
from tests.support.faults import create_topic, tracebacks
from tests.support.jwt import ec_key
from tests.support.wait import wait_until
from tests.support.writes import Responder, Topics, header, read_records, request, write_config

pytestmark = [pytest.mark.daemon, pytest.mark.timeout(180)]


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    b = start_broker(port=free_port(), log_path=tmp_path / "tansu.log")
    yield b
    if b.process.poll() is None:
        b.process.send_signal(signal.SIGCONT)
        b.process.kill()
    b.stop()


def test_broker_frozen_during_a_post_then_back_nothing_twice_nothing_lost(
        broker: Broker, tmp_path: Path, daemons: list[Daemon]) -> None:
    topics = Topics("oneway", "commands", "replies", "snapshots")
    for name in (topics.oneway, topics.commands, topics.replies, topics.snapshots):
        create_topic(broker.bootstrap, name, 2)
    port = free_port()
    config = write_config(tmp_path, port, broker.bootstrap, topics, [ec_key().jwk],
                          max_wait=5, ack_timeout=2)
    responder = Responder(broker.bootstrap, topics.commands).start()
    # one process: the repeat must reach the worker that holds the first write
    daemon = start_daemon(config, wait_ports=[port], extra_args=["--workers", "1"])
    daemons.append(daemon)
    try:
        assert request(port, "POST", "/commands", {"Idempotency-Key": "warm"}, b"w").status \
            == 201
        key = f"frozen-{uuid.uuid4()}"
        broker.process.send_signal(signal.SIGSTOP)
        try:
            first = request(port, "POST", "/commands", {"Idempotency-Key": key}, b"payload")
            assert first.status == 503, first
            assert first.headers["retry-after"] == "2"
            assert 1.5 <= first.seconds < 5
            again = request(port, "POST", "/commands", {"Idempotency-Key": key}, b"payload")
            assert again.status == 503, again
            daemon.wait_output("BINDING_HTTP_KAFKA_REPLAYED")  # it waited for the first
            assert "the first write is pending" in daemon.output()
        finally:
            broker.process.send_signal(signal.SIGCONT)
        # as a client told 503 would: the same request again until it is answered (a broker
        # just thawed on a loaded machine may take longer than one ack timeout to answer)
        def answered() -> Any:
            r = request(port, "POST", "/commands", {"Idempotency-Key": key}, b"payload")
            return r if r.status != 503 else None

        after = wait_until(answered, timeout=60, interval=0.5)
        assert after.status == 201, after
        assert after.body == b"payload"
        mine = [r for r in read_records(broker.bootstrap, topics.commands)
                if (header(r, "zilla:correlation-id") or b"").startswith(key.encode())]
        assert len(mine) == 1, "written exactly once"
        assert mine[0].value() == b"payload"
        assert sum(n for c, n in responder.seen.items() if c.startswith(key)) == 1
    finally:
        responder.stop()
    assert tracebacks(daemon.output()) == []


def test_broker_killed_writes_are_refused_at_once_with_retry_after(
        broker: Broker, tmp_path: Path, daemons: list[Daemon]) -> None:
    topics = Topics("oneway", "commands", "replies", "snapshots")
    for name in (topics.oneway, topics.commands, topics.replies, topics.snapshots):
        create_topic(broker.bootstrap, name, 1)
    port = free_port()
    config = write_config(tmp_path, port, broker.bootstrap, topics, [ec_key().jwk],
                          max_wait=5, ack_timeout=2)
    daemon = start_daemon(config, wait_ports=[port])
    daemons.append(daemon)
    assert request(port, "POST", "/oneway", {"Idempotency-Key": "warm"}, b"w").status == 204
    broker.process.kill()
    broker.process.wait(10)
    daemon.wait_output("BINDING_KAFKA_PRODUCER_UNAVAILABLE", timeout=30)
    began = time.monotonic()
    refused = request(port, "POST", "/oneway", {"Idempotency-Key": "down"}, b"x")
    assert refused.status == 503 and refused.headers["retry-after"] == "5"
    assert time.monotonic() - began < 1.5, "refused before the 2 s ack timeout: nothing sent"
    assert b"no Kafka broker is reachable" in refused.body
    assert daemon.alive()
    wait_until(lambda: "BINDING_HTTP_KAFKA_UNAVAILABLE" in daemon.output(), 5)
    assert tracebacks(daemon.output()) == []
