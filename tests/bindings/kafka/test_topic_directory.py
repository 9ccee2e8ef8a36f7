"""The write path's knowledge of which topics the cluster has (`TopicDirectory`): a record for
a topic not seen lately waits for one lookup on the directory's thread, records wait in the
order they came, answers are remembered for a while, and what it holds is bounded."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from twisted.python.failure import Failure

from ssekd.bindings.kafka.topic_directory import LookupUnavailable, TopicDirectory
from tests.bindings.kafka.test_producer import ThreadedClock


class Cluster:
    """Answers lookups from a set of topics, counting them; `gate` holds them until set."""

    def __init__(self, *topics: str) -> None:
        self.topics = set(topics)
        self.asked: list[str] = []
        self.gate = threading.Event()
        self.gate.set()
        self.down = False

    def __call__(self, topic: str) -> bool:
        self.gate.wait(10)
        self.asked.append(topic)
        if self.down:
            raise RuntimeError("no broker answered")
        return topic in self.topics


def directory(cluster: Cluster, **kw: Any) -> tuple[TopicDirectory, ThreadedClock]:
    clock = ThreadedClock()
    d = TopicDirectory(clock, cluster, "kc", **kw)
    d.start()
    return d, clock


def outcomes(d: TopicDirectory, topic: str, into: list[Any]) -> None:
    d.exists(topic).addBoth(into.append)


def test_writes_waiting_for_one_lookup_are_answered_in_the_order_they_came() -> None:
    cluster = Cluster("items")
    cluster.gate.clear()
    d, clock = directory(cluster)
    try:
        order: list[tuple[int, Any]] = []
        for i in range(5):
            d.exists("items").addCallback(lambda found, i=i: order.append((i, found)))
        assert order == []
        cluster.gate.set()
        clock.run_until(lambda: len(order) == 5)
        assert order == [(i, True) for i in range(5)]
        assert cluster.asked == ["items"], "one lookup for all of them"
        got: list[Any] = []
        outcomes(d, "items", got)
        assert got == [True] and cluster.asked == ["items"], "remembered: answered at once"
    finally:
        d.stop()


def test_a_missing_topic_is_remembered_briefly_then_asked_again() -> None:
    cluster = Cluster()
    d, clock = directory(cluster, missing_for=1.0, known_for=300.0)
    try:
        got: list[Any] = []
        outcomes(d, "made-up", got)
        clock.run_until(lambda: bool(got))
        assert got == [False]
        for _ in range(100):
            outcomes(d, "made-up", got)
        assert got == [False] * 101 and cluster.asked == ["made-up"]
        clock.advance(1.0)
        cluster.topics.add("made-up")  # created since
        outcomes(d, "made-up", got)
        clock.run_until(lambda: len(got) == 102)
        assert got[-1] is True and cluster.asked == ["made-up", "made-up"]
        clock.advance(299)
        assert d.known("made-up") is True
        clock.advance(1)
        assert d.known("made-up") is None, "a found topic is asked again after known_for"
    finally:
        d.stop()


def test_a_cluster_that_cannot_say_fails_the_waiting_writes_and_leaves_nothing_remembered(
        ) -> None:
    cluster = Cluster("items")
    cluster.down = True
    d, clock = directory(cluster)
    try:
        got: list[Any] = []
        outcomes(d, "items", got)
        outcomes(d, "items", got)
        clock.run_until(lambda: len(got) == 2)
        assert all(isinstance(g, Failure) and g.check(LookupUnavailable) for g in got)
        assert "no broker answered" in str(got[0].value)
        assert d.known("items") is None
    finally:
        d.stop()


def test_lookups_waiting_at_once_are_bounded() -> None:
    cluster = Cluster()
    cluster.gate.clear()
    d, clock = directory(cluster, max_lookups=3)
    try:
        got: list[Any] = []
        for i in range(3):
            outcomes(d, f"t{i}", got)
        outcomes(d, "t0", got)  # a topic already being looked up waits with it
        refused: list[Any] = []
        outcomes(d, "t3", refused)
        assert len(refused) == 1 and refused[0].check(LookupUnavailable)
        cluster.gate.set()
        clock.run_until(lambda: len(got) == 4)
        assert got == [False] * 4
    finally:
        d.stop()


def test_what_is_remembered_is_bounded_oldest_first() -> None:
    d, _ = directory(Cluster(), max_remembered=3)
    try:
        for i in range(5):
            d.found(f"t{i}", True)
        assert [d.known(f"t{i}") for i in range(5)] == [None, None, True, True, True]
    finally:
        d.stop()


@pytest.mark.timeout(30)
def test_stopping_fails_the_writes_still_waiting() -> None:
    cluster = Cluster()
    cluster.gate.clear()
    d, _ = directory(cluster)
    got: list[Any] = []
    outcomes(d, "items", got)
    thread = d.stop()
    assert len(got) == 1 and got[0].check(LookupUnavailable)
    refused: list[Any] = []
    outcomes(d, "other", refused)
    assert refused[0].check(LookupUnavailable)
    cluster.gate.set()
    assert thread is not None
    thread.join(10)
    assert not thread.is_alive()
