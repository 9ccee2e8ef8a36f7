"""The write side of the kafka client (`producer.Writes`) with real librdkafka and no broker
listening: a record over the in-flight bound is refused before it is queued, the producer
learns that no broker is reachable and refuses new writes, and a queued record that times out
fails its writer and frees the bound. Reports reach the "reactor" through `callFromThread`."""

from __future__ import annotations

import queue
import time
from collections.abc import Callable
from typing import Any

import pytest
from twisted.internet.testing import MemoryReactorClock
from twisted.python.failure import Failure

from ssekd.bindings.kafka.producer import Record, WriteFailed, WriteRefused, Writes
from ssekd.bindings.kafka.settings import ClientSettings
from ssekd.dev.broker import free_port


class ThreadedClock(MemoryReactorClock):
    """A MemoryReactorClock that queues `callFromThread` calls for the test to run."""

    def __init__(self) -> None:
        super().__init__()
        # not `calls`: that is the clock's own list of delayed calls
        self.from_threads: queue.Queue[tuple[Callable[..., Any], tuple[Any, ...]]] = \
            queue.Queue()

    def callFromThread(self, f: Callable[..., Any], *args: Any, **kw: Any) -> None:  # noqa: N802
        self.from_threads.put((f, args))

    def run_until(self, condition: Callable[[], bool], timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            try:
                f, args = self.from_threads.get(
                    timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError("timed out") from None
            f(*args)


def writes(clock: ThreadedClock, events: list[str], max_inflight: int,
           timeout_ms: int = 60_000) -> Writes:
    settings = ClientSettings(servers=(f"127.0.0.1:{free_port()}",),
                              producer_properties={"message.timeout.ms": timeout_ms,
                                                   "reconnect.backoff.max.ms": 100},
                              max_inflight_bytes=max_inflight)
    w = Writes(clock, settings.producer_config, "kc",
               lambda name, detail: events.append(name), max_inflight)
    w.start()
    w.topics.found("t", True)  # no broker to ask: the topic is taken as there
    return w


def test_a_record_over_the_inflight_bound_is_refused_before_it_is_queued() -> None:
    clock, events = ThreadedClock(), []
    w = writes(clock, events, max_inflight=2000)
    try:
        first = w.produce(Record("t", b"k", b"x" * 1500))
        assert not first.called and w.inflight == 1501
        refused: list[Failure] = []
        w.produce(Record("t", b"k", b"y" * 1000)).addErrback(refused.append)
        assert refused and refused[0].check(WriteRefused)
        assert refused[0].value.retry_after == 1.0  # type: ignore[union-attr]
        assert w.pending == 1, "the refused record was never handed to librdkafka"
        first.addErrback(lambda _: None)
    finally:
        w.stop()


@pytest.mark.timeout(60)
def test_no_broker_reachable_refuses_new_writes_and_a_queued_one_fails_and_frees() -> None:
    clock, events = ThreadedClock(), []
    w = writes(clock, events, max_inflight=1 << 20, timeout_ms=3000)
    try:
        queued = w.produce(Record("t", None, b"v"))
        outcome: list[Any] = []
        queued.addBoth(outcome.append)
        clock.run_until(lambda: not w.reachable)
        assert "BINDING_KAFKA_PRODUCER_UNAVAILABLE" in events
        refused: list[Failure] = []
        w.produce(Record("t", None, b"w")).addErrback(refused.append)
        assert refused and refused[0].check(WriteRefused)
        assert refused[0].value.retry_after == 5.0  # type: ignore[union-attr]
        clock.run_until(lambda: bool(outcome))
        assert isinstance(outcome[0], Failure) and outcome[0].check(WriteFailed)
        assert outcome[0].value.retriable  # type: ignore[union-attr]
        assert w.inflight == 0 and w.pending == 0
    finally:
        w.stop()


def test_producers_take_the_consumers_servers_and_security_and_nothing_consumer_only() -> None:
    settings = ClientSettings(
        servers=("k1:9093", "k2:9093"),
        sasl={"mechanism": "scram-sha-512", "username": "u", "password": "p"},
        properties={"ssl.ca.location": "/etc/ca.pem", "fetch.wait.max.ms": 10},
        producer_properties={"linger.ms": 5})
    conf = settings.producer_config("in_sync_replicas")
    assert conf["bootstrap.servers"] == "k1:9093,k2:9093"
    assert (conf["security.protocol"], conf["sasl.mechanism"], conf["sasl.username"],
            conf["sasl.password"], conf["ssl.ca.location"]) == \
        ("SASL_SSL", "SCRAM-SHA-512", "u", "p", "/etc/ca.pem")
    assert "fetch.wait.max.ms" not in conf and "group.id" not in conf
    assert (conf["acks"], conf["enable.idempotence"], conf["linger.ms"]) == ("all", True, 5)
    assert conf["partitioner"] == "murmur2_random"
    leader = settings.producer_config("leader_only")
    assert (leader["acks"], leader["enable.idempotence"]) == ("1", False)
    assert settings.producer_config("none")["acks"] == "0"


def test_the_producers_never_ask_a_broker_to_create_a_topic() -> None:
    """librdkafka's producers ask for a topic to be created by default; ssekd's never do, and a
    config that says otherwise is refused before the daemon listens."""
    from ssekd.bindings.kafka.settings import refused_producer_property

    settings = ClientSettings(servers=("k1:9092",), producer_properties={"linger.ms": 5})
    for acks in ("none", "leader_only", "in_sync_replicas"):
        assert settings.producer_config(acks)["allow.auto.create.topics"] is False
    assert refused_producer_property(settings) is None
    asked = ClientSettings(servers=("k1:9092",),
                           producer_properties={"allow.auto.create.topics": "true"})
    refused = refused_producer_property(asked)
    assert refused is not None and refused[0] == "allow.auto.create.topics"
    assert "never creates one" in refused[1]
    assert refused_producer_property(ClientSettings(
        servers=("k1:9092",), producer_properties={"allow.auto.create.topics": False})) is None
