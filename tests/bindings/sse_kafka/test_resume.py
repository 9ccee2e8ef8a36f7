"""Resume without loss: for random cut points, reconnecting with the last id received yields
exactly the remaining records, none missing, none twice - from the cache, and from Kafka when
the cache is too small to hold the cut point."""

from __future__ import annotations

from collections import Counter
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.broker import Kafka
from tests.support.streamd import Streamd

pytestmark = [pytest.mark.daemon, pytest.mark.broker]

N = 60


@pytest.fixture(scope="module")
def resume_topic(kafka: Kafka) -> str:
    topic = kafka.topic(3)
    for i in range(N):
        kafka.produce(topic, b"m%03d" % i, key=b"k%d" % (i % 7),
                      headers=[("etag", b"e%d" % i)] if i % 3 == 0 else None)
    kafka.flush()
    return topic


def _all(streamd: Streamd, route: str, topic: str) -> list[tuple[str, str]]:
    with streamd.open(f"/{route}/{topic}") as c:
        events = c.events(N)
        assert c.quiet(0.2) == []
    return [(e.id or "", e.data or "") for e in events]


@pytest.fixture(scope="module")
def full_streams(streamd: Streamd, resume_topic: str) -> dict[str, list[tuple[str, str]]]:
    streams = {route: _all(streamd, route, resume_topic) for route in ("events", "keyed")}
    # a fresh stream of the tiny cache starts at what the cache holds (its last 5 records);
    # ids are the same on both routes, so resumes through it use the full stream's ids
    with streamd.open(f"/tiny/{resume_topic}") as c:
        tail = {e.data for e in c.events(5)}
    # its own consumer may interleave partitions differently: the last 5 it received are the
    # last record(s) of each partition, which the full stream also has
    assert tail <= {d for _, d in streams["events"]}
    streams["tiny"] = streams["events"]
    return streams


def test_every_record_once(full_streams: dict[str, list[tuple[str, str]]]) -> None:
    for route, events in full_streams.items():
        assert sorted(d for _, d in events) == [f"m{i:03d}" for i in range(N)], route


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cut=st.integers(0, N - 1), route=st.sampled_from(["events", "tiny", "keyed"]),
       via=st.sampled_from(["header", "query"]))
def test_resume_at_any_cut(streamd: Streamd, resume_topic: str,
                           full_streams: dict[str, list[tuple[str, str]]],
                           cut: int, route: str, via: str) -> None:
    events = full_streams[route]
    last_id = events[cut][0]
    path = f"/{route}/{resume_topic}"
    headers = {}
    if via == "header":
        headers["Last-Event-ID"] = last_id
    else:
        path += "?lastEventId=" + quote(last_id, safe="")
    want = N - cut - 1
    with streamd.open(path, headers) as c:
        got = [e.data or "" for e in c.events(want)] if want else []
        assert c.quiet(0.15) == []
    seen = {d for _, d in events[:cut + 1]}
    assert not Counter(got) - Counter(set(got)), "a record came twice"
    assert set(got) | seen == {f"m{i:03d}" for i in range(N)}, "a record is missing"
    assert not set(got) & seen, "a record already received came again"


def test_tiny_cache_resume_reads_kafka(streamd: Streamd, resume_topic: str,
                                       full_streams: dict[str, list[tuple[str, str]]]) -> None:
    """The tiny cache holds 5 records: resuming from the 3rd must read history from Kafka."""
    events = full_streams["tiny"]
    with streamd.open(f"/tiny/{resume_topic}", {"Last-Event-ID": events[2][0]}) as c:
        got = [e.data for e in c.events(N - 3)]
    assert got == [d for _, d in events[3:]] or sorted(got) == sorted(d for _, d in events[3:])
