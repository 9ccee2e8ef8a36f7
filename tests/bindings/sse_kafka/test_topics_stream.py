"""Several topics on one stream, end to end (an ssekd addition): the real daemon and broker,
two topics on one connection, each event naming its topic, and a resume after a cut that
loses nothing and repeats nothing across both topics; with curl as the client too."""

from __future__ import annotations

import subprocess
from collections import Counter

import pytest

from ssekd.event_ids import parse_topics_id
from tests.support.broker import Kafka
from tests.support.streamd import Streamd

pytestmark = [pytest.mark.daemon, pytest.mark.broker]

N = 30


def _produce(kafka: Kafka, topics: list[str], prefix: str = "r",
             key: bytes | None = None) -> dict[str, list[str]]:
    """N records over both topics, interleaved, keys k0/k1; the values each topic got."""
    values: dict[str, list[str]] = {t: [] for t in topics}
    for i in range(N):
        topic = topics[i % 3 % 2]  # two of each three to the first topic
        value = f"{prefix}{i:02d}-{topic}"
        kafka.produce(topic, value.encode(), key=key if key is not None else b"k%d" % (i % 2))
        values[topic].append(value)
    kafka.flush()
    return values


def test_two_topics_on_one_connection_then_resume_after_a_cut(streamd: Streamd,
                                                              kafka: Kafka) -> None:
    a, b = kafka.topic(2), kafka.topic(3)
    produced = _produce(kafka, [a, b])
    with streamd.open(f"/many/{a},{b}") as c:
        first = c.events(N)
        markers = {t: kafka.mark(t, range(parts)) for t, parts in ((a, 2), (b, 3))}
        rest = c.until(markers[a] + markers[b])
    got = first + rest  # the markers left out
    # each event names its topic, and each topic's records came once
    for t in (a, b):
        assert sorted(e.data or "" for e in got if e.event == t) == sorted(produced[t])
    assert {e.event for e in got} == {a, b}
    # every id names both topics' progress
    for e in got:
        assert set(parse_topics_id(e.id or "", [a, b])) == {a, b}
    # records arrive after the first stream; then clients come back with the id of the event
    # they cut at, when only the first topic had delivered (the cache reads one topic's backlog
    # at a time) and when both had
    more = _produce(kafka, [a, b], prefix="s")
    everything = {(t, v) for t in (a, b) for v in produced[t] + markers[t] + more[t]}
    for cut in (5, N - 3, N):
        with streamd.open(f"/many/{b},{a}", {"Last-Event-ID": first[cut - 1].id or ""}) as c:
            end = {t: kafka.mark(t, range(parts)) for t, parts in ((a, 2), (b, 3))}
            resumed = c.until(end[a] + end[b])
        before = [(e.event, e.data) for e in first[:cut]]
        after = [(e.event, e.data) for e in resumed]
        assert not Counter(after) - Counter(set(after)), f"cut {cut}: an event came twice"
        assert not set(before) & set(after), f"cut {cut}: an event before the cut came again"
        assert set(before) | set(after) == everything, f"cut {cut}: an event is missing"
        everything |= {(t, v) for t in (a, b) for v in end[t]}


def test_the_field_form_and_filters_per_topic(streamd: Streamd, kafka: Kafka) -> None:
    a, b = kafka.topic(1), kafka.topic(1)
    produced = _produce(kafka, [a, b])
    with streamd.open(f"/manybykey/{a},{b}/k1") as c:
        markers = {t: kafka.mark(t, key=b"k1") for t in (a, b)}
        got = c.until(markers[a] + markers[b])
    for t in (a, b):
        wanted = [v for v in produced[t] if int(v[1:3]) % 2 == 1]
        assert [e.data for e in got if e.event == t] == wanted
    with streamd.open(f"/manyfield/{a},{b}") as c:
        got = c.events(N)
    assert {e.event for e in got} == {None}, "the field form keeps the event type"


def test_curl_reads_two_topics_on_one_stream(streamd: Streamd, kafka: Kafka) -> None:
    a, b = kafka.topic(1), kafka.topic(1)
    produced = _produce(kafka, [a, b])
    out = subprocess.run(["curl", "-sN", "--max-time", "5", streamd.url(f"/manyfield/{a},{b}")],
                         capture_output=True, timeout=20).stdout.decode()
    events = [block.split("\n") for block in out.split("\n\n") if block.startswith("id:")]
    seen = {(lines[1].removeprefix("topic:"), lines[2].removeprefix("data:")) for lines in events}
    assert seen == {(t, v) for t in (a, b) for v in produced[t]}


def test_requests_that_get_no_stream(streamd: Streamd, kafka: Kafka) -> None:
    a = kafka.topic(1)
    nine = ",".join(f"{a}{i}" for i in range(9))
    assert streamd.status(f"/many/{nine}") == 400
    assert streamd.status(f"/many/{a},__consumer_offsets") == 404
    assert streamd.status(f"/many/{a},not%20a%20topic") == 404
    assert streamd.status(f"/many/{a},") == 404
