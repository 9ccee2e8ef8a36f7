"""Resume without loss: for random cut points, reconnecting with the last id received yields
exactly the remaining records, none missing, none twice - from the cache, and from Kafka when
the cache is too small to hold the cut point."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ssekd.progress import ProgressId
from tests.support.broker import Kafka
from tests.support.sse import SseClient
from tests.support.streamd import Streamd

pytestmark = [pytest.mark.daemon, pytest.mark.broker]

N = 60
RECORDS = [f"m{i:03d}" for i in range(N)]


@dataclass
class ResumeTopic:
    """The topic every resume reads: N records, then the markers tests have added since."""

    name: str
    markers: list[str] = field(default_factory=list)


@pytest.fixture(scope="module")
def resume_topic(kafka: Kafka) -> ResumeTopic:
    topic = kafka.topic(3)
    for i in range(N):
        kafka.produce(topic, RECORDS[i].encode(), key=b"k%d" % (i % 7),
                      headers=[("etag", b"e%d" % i)] if i % 3 == 0 else None)
    kafka.flush()
    return ResumeTopic(topic)


def to_the_end(c: SseClient, kafka: Kafka, topic: ResumeTopic) -> list[str]:
    """Data of every event the stream delivers before a new marker in each partition (the
    markers are remembered: later streams get them as records)."""
    new = kafka.mark(topic.name, (0, 1, 2))
    got = [e.data or "" for e in c.until(new)]
    topic.markers += new
    return got


@pytest.fixture(scope="module")
def full_streams(streamd: Streamd, kafka: Kafka,
                 resume_topic: ResumeTopic) -> dict[str, list[tuple[str, str]]]:
    """Each route's whole stream of the N records, from a fresh subscription. Both are read
    before any marker exists, so their ids name positions among the N records only."""
    with streamd.open(f"/events/{resume_topic.name}") as events, \
            streamd.open(f"/keyed/{resume_topic.name}") as keyed:
        streams = {"events": [(e.id or "", e.data or "") for e in events.events(N)],
                   "keyed": [(e.id or "", e.data or "") for e in keyed.events(N)]}
        new = kafka.mark(resume_topic.name, (0, 1, 2))
        assert events.until(new) == [] and keyed.until(new) == []
        resume_topic.markers += new
    # ids are the same on every route with the etag form: resumes through the tiny cache use
    # the full stream's ids
    streams["tiny"] = streams["events"]
    return streams


def test_every_record_once(full_streams: dict[str, list[tuple[str, str]]]) -> None:
    for route, events in full_streams.items():
        assert sorted(d for _, d in events) == RECORDS, route


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cut=st.integers(0, N - 1), route=st.sampled_from(["events", "tiny", "keyed"]),
       via=st.sampled_from(["header", "query"]))
def test_resume_at_any_cut(streamd: Streamd, kafka: Kafka, resume_topic: ResumeTopic,
                           full_streams: dict[str, list[tuple[str, str]]],
                           cut: int, route: str, via: str) -> None:
    events = full_streams[route]
    last_id = events[cut][0]
    path = f"/{route}/{resume_topic.name}"
    headers = {}
    if via == "header":
        headers["Last-Event-ID"] = last_id
    else:
        path += "?lastEventId=" + quote(last_id, safe="")
    earlier = list(resume_topic.markers)
    with streamd.open(path, headers) as c:
        got = to_the_end(c, kafka, resume_topic)
    records = [d for d in got if d in RECORDS]
    assert sorted(set(got) - set(records)) == sorted(earlier), "markers are records too"
    seen = {d for _, d in events[:cut + 1]}
    assert not Counter(records) - Counter(set(records)), "a record came twice"
    assert set(records) | seen == set(RECORDS), "a record is missing"
    assert not set(records) & seen, "a record already received came again"


def test_tiny_cache_resume_reads_kafka(streamd: Streamd, kafka: Kafka) -> None:
    """The tiny cache holds 5 records: a stream resuming before them reads the older ones from
    Kafka, and gets every record after its id once, in order."""
    topic = kafka.topic(1)
    for i in range(20):
        kafka.produce(topic, b"r%02d" % i, partition=0)
    kafka.flush()

    def event(offset: int, data: str) -> tuple[str, str]:
        return ProgressId.encode({0: offset + 1}), data

    # the tiny cache reads the topic now; with workers, each has its cache, and a connection
    # reaches a worker by the kernel's hash of its ports: enough streams load them all but for
    # a chance of 2 in 2**16 with two workers (a cold cache gives a new stream all it reads, from offset 0)
    for _ in range(1 if not streamd.daemon.worker_pids() else 16):
        with streamd.open(f"/tiny/{topic}") as loading:
            while (e := loading.next_event()) is not None and e.data != "r19":
                pass
            assert e is not None, "the cache never got the last record"
    # a new stream gets all the cache holds: the last five records, and nothing before them
    with streamd.open(f"/tiny/{topic}") as fresh:
        assert [(e.id, e.data) for e in fresh.events(5)] == \
            [event(o, f"r{o:02d}") for o in range(15, 20)]
        (marker,) = kafka.mark(topic)
        assert fresh.until([marker]) == []
    # resuming after r02 needs r03..r14, which only Kafka still has
    with streamd.open(f"/tiny/{topic}", {"Last-Event-ID": ProgressId.encode({0: 3})}) as resumed:
        got = resumed.until(kafka.mark(topic))
    assert [(e.id, e.data) for e in got] == \
        [event(o, f"r{o:02d}") for o in range(3, 20)] + [event(20, marker)]
