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

from ssekd.event_ids import ProgressId
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


# -- filtered streams ----------------------------------------------------------------------

#: Filtered routes of the test daemon, and the records of `filtered_resume_topic` each takes.
FILTERED = ["/bykey/{t}/k2", "/anyof/{t}", "/byheader/{t}"]
#: A marker every filtered route takes: key k2 (bykey), colour blue (anyof), colour red (byheader).
MARKER = {"key": b"k2", "headers": [("colour", b"red"), ("colour", b"blue")]}


def filtered_row(i: int) -> tuple[bytes, list[tuple[str, bytes]]]:
    key = b"a" if i % 3 == 0 else b"k%d" % (i % 5)
    return key, [("colour", b"blue" if i % 4 == 0 else b"red")]


@pytest.fixture(scope="module")
def filtered_streams(streamd: Streamd, kafka: Kafka) -> tuple[ResumeTopic, dict[str, list[tuple[str, str]]]]:
    """A topic of N records over 3 partitions with keys and a colour header, and each filtered
    route's whole stream of them from a fresh subscription (ids and data)."""
    topic = ResumeTopic(kafka.topic(3))
    for i in range(N):
        key, headers = filtered_row(i)
        kafka.produce(topic.name, RECORDS[i].encode(), key=key, headers=headers)
    kafka.flush()
    streams = {}
    for route in FILTERED:
        path = route.format(t=topic.name)
        with streamd.open(path) as c:
            new = kafka.mark(topic.name, (0, 1, 2), **MARKER)
            # every event, its own markers too: they may come before records (the cache reads
            # the partitions in its own order)
            got: list[tuple[str, str]] = []
            while not set(new) <= {d for _, d in got}:
                e = c.next_event(10.0)
                assert e is not None, f"markers {new} did not all arrive"
                got.append((e.id or "", e.data or ""))
            streams[route] = got
            topic.markers += new
    return topic, streams


def test_filtered_streams_take_what_their_filters_say(
        filtered_streams: tuple[ResumeTopic, dict[str, list[tuple[str, str]]]]) -> None:
    _, streams = filtered_streams
    want = {"/bykey/{t}/k2": lambda k, h: k == b"k2",
            "/anyof/{t}": lambda k, h: k == b"a" or ("colour", b"blue") in h,
            "/byheader/{t}": lambda k, h: ("colour", b"red") in h}
    for route, events in streams.items():
        records = [d for _, d in events if d in RECORDS]
        assert sorted(records) == sorted(r for i, r in enumerate(RECORDS)
                                         if want[route](*filtered_row(i))), route


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(route=st.sampled_from(FILTERED), data=st.data())
def test_a_filtered_stream_resumes_at_any_cut(
        streamd: Streamd, kafka: Kafka,
        filtered_streams: tuple[ResumeTopic, dict[str, list[tuple[str, str]]]],
        route: str, data: st.DataObject) -> None:
    """Resuming a filtered stream with the id of any event it delivered gives every later
    record its filter takes, once, and none it had: the ids of filtered streams carry the
    tail's progress, also over the records the filter passed over."""
    topic, streams = filtered_streams
    full = streams[route]  # records, and the markers produced before it was read, as it came
    cut = data.draw(st.sampled_from([i for i, (_, d) in enumerate(full) if d in RECORDS]))
    earlier = list(topic.markers)
    with streamd.open(route.format(t=topic.name), {"Last-Event-ID": full[cut][0]}) as c:
        new = kafka.mark(topic.name, (0, 1, 2), **MARKER)
        got = [e.data or "" for e in c.until(new)]
        topic.markers += new
    seen = {d for _, d in full[:cut + 1]}
    wanted = {d for _, d in full[cut + 1:]} | (set(earlier) - {d for _, d in full})
    assert len(got) == len(set(got)), "an event came twice"
    assert set(got) - set(new) == wanted, "missing records, or ones it had"
    assert not set(got) & seen
