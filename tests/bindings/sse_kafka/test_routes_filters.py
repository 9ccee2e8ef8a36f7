"""Routes and filters (key, header, key+headers, any-of, from path params); the statuses of bad
requests; hostile last event ids; `since`; `live`."""

from __future__ import annotations

import subprocess
import time
from urllib.parse import quote

import pytest
from confluent_kafka.admin import NewTopic

from ssekd.event_ids import ProgressId
from tests.support.broker import Kafka
from tests.support.sse import Event
from tests.support.streamd import Streamd
from tests.support.wait import wait_until

pytestmark = [pytest.mark.daemon, pytest.mark.broker]

ROWS = [
    (b"a", b"1", [("colour", b"red"), ("size", b"big")]),
    (b"a", b"2", [("colour", b"red")]),
    (b"b", b"3", [("colour", b"red"), ("size", b"big")]),
    (b"b", b"4", [("colour", b"blue")]),
    (b"c", b"5", []),
    (b"a", b"6", [("size", b"big"), ("colour", b"red")]),
    (None, b"7", [("colour", b"blue")]),
]
#: Headers of a marker record that passes every route's filters (with key `a`, or the route's key)
MARKER_HEADERS = [("colour", b"red"), ("size", b"big"), ("colour", b"blue")]


@pytest.fixture
def filtered_topic(kafka: Kafka) -> str:
    """A topic of its own per test (tests add marker records): ROWS, all in partition 0."""
    topic = kafka.topic(3)
    for key, value, headers in ROWS:
        kafka.produce(topic, value, key=key, partition=0, headers=headers)
    kafka.flush()
    return topic


def values(streamd: Streamd, kafka: Kafka, topic: str, path: str, n: int, key: bytes = b"a",
           partitions: tuple[int, ...] = (0,)) -> list[str]:
    """The data of the first `n` events of a new stream, in the order they came; nothing else
    comes before marker records (with `key`) that pass the route's filters."""
    with streamd.open(path) as c:
        assert c.status == 200
        got = [e.data or "" for e in c.events(n)]
        assert c.until(kafka.mark(topic, partitions, key=key, headers=MARKER_HEADERS)) == []
    return got


def from_the_start(events: list[Event]) -> list[tuple[str | None, str | None]]:
    """(id, data) of ROWS as a stream from the start delivers them on `/events/`."""
    return [(e.id, e.data) for e in events]


START = [(ProgressId.encode({0: n, 1: 0, 2: 0}), str(n)) for n in range(1, 8)]


def log_lines(streamd: Streamd, text: str) -> list[str]:
    """The daemon's lines holding `text`, once there is one (a thread writes event lines)."""
    streamd.daemon.wait_output(text)
    return [line for line in streamd.daemon.output().splitlines() if text in line]


def test_filter_by_key_from_path_params(streamd: Streamd, kafka: Kafka,
                                        filtered_topic: str) -> None:
    t = filtered_topic
    assert values(streamd, kafka, t, f"/bykey/{t}/a", 3) == ["1", "2", "6"]
    assert values(streamd, kafka, t, f"/bykey/{t}/c", 1, key=b"c") == ["5"]


def test_filter_by_header(streamd: Streamd, kafka: Kafka, filtered_topic: str) -> None:
    t = filtered_topic
    assert values(streamd, kafka, t, f"/byheader/{t}", 4) == ["1", "2", "3", "6"]


def test_filter_key_and_headers(streamd: Streamd, kafka: Kafka, filtered_topic: str) -> None:
    t = filtered_topic
    assert values(streamd, kafka, t, f"/keyheader/{t}", 2) == ["1", "6"]


def test_filters_are_any_of(streamd: Streamd, kafka: Kafka, filtered_topic: str) -> None:
    t = filtered_topic
    assert values(streamd, kafka, t, f"/anyof/{t}", 5) == ["1", "2", "4", "6", "7"]


def test_filtered_ids_still_advance_past_skipped_records(streamd: Streamd,
                                                         filtered_topic: str) -> None:
    with streamd.open(f"/bykey/{filtered_topic}/c") as c:
        (e,) = c.events(1)
    assert ProgressId.decode(e.id or "") == {0: 5, 1: 0, 2: 0}


def test_statuses(streamd: Streamd, filtered_topic: str) -> None:
    assert streamd.status("/nowhere") == 404
    assert streamd.status(f"/events/{filtered_topic}", method="POST") == 405
    assert streamd.status(f"/events/{filtered_topic}",
                          headers={"Last-Event-ID": "A" * 255}) == 400
    assert streamd.status(f"/events/{filtered_topic}?lastEventId=" + "A" * 255) == 400
    assert streamd.status(f"/events/{filtered_topic}?since=yesterday-ish") == 400
    assert streamd.status("/events/bad%20topic%00name") == 404
    streamd.daemon.wait_output("BINDING_SSE_REQUEST_REJECTED 405")  # lines are written by a thread
    streamd.daemon.wait_output("BINDING_SSE_REQUEST_REJECTED 400")


HOSTILE = [
    "garbage",
    "AQQABAI+",  # standard base64 alphabet
    "AQ" + "_" * 40,  # a varint that never ends
    ProgressId.encode({0: 1}).replace("AQIA", "AQIB"),  # negative offset (zigzag odd)
    ProgressId.encode({7: 1, 900: 3}),  # partitions the topic does not have
    "AZBO" + "AA" * 30,  # claims 10,000 partitions
    "AQQABAIC\u00e9\u2603",  # non-ASCII
    "[null,]",
    '["a",' * 40 + "]",
    "AQQABAIC\x00/x",
]


@pytest.mark.parametrize("via", ["header", "query"])
@pytest.mark.parametrize("bad", HOSTILE)
def test_hostile_ids_resume_from_the_start(streamd: Streamd, filtered_topic: str,
                                           bad: str, via: str) -> None:
    if via == "header" and "\x00" in bad:
        # The http binding refuses a NUL in a header with 400 before the sse binding sees it:
        # a clean refusal is the right answer too, and the daemon goes on serving.
        with streamd.open(f"/events/{filtered_topic}",
                          {"Last-Event-ID": bad.encode("utf-8").decode("latin-1")}) as c:
            assert c.status == 400
        return
    with streamd.open(f"/events/{filtered_topic}") as first:
        first.events(7)  # the cache now knows the topic, and so how many partitions it has
    path, headers = f"/events/{filtered_topic}", {}
    if via == "header":
        headers = {"Last-Event-ID": bad.encode("utf-8").decode("latin-1")}
    else:
        path += "?lastEventId=" + quote(bad, safe="")
    with streamd.open(path, headers) as c:
        assert c.status == 200
        assert from_the_start(c.events(7)) == START
    (line,) = log_lines(streamd, f"BINDING_SSE_KAFKA_LAST_EVENT_ID_UNREADABLE GET /events/"
                                 f"{filtered_topic} ")


def test_garbage_id_in_query_resumes_from_start(streamd: Streamd, kafka: Kafka,
                                                filtered_topic: str) -> None:
    with streamd.open(f"/events/{filtered_topic}?lastEventId=%FF%00%0A") as c:
        got = c.events(7)
        assert c.until(kafka.mark(filtered_topic)) == []
    assert from_the_start(got) == START
    (line,) = log_lines(streamd, f"BINDING_SSE_KAFKA_LAST_EVENT_ID_UNREADABLE GET /events/"
                                 f"{filtered_topic} ")


@pytest.mark.parametrize("version", [[], ["--http2-prior-knowledge"]])
def test_an_unreadable_id_is_told_to_the_client_before_the_first_event(
        streamd: Streamd, filtered_topic: str, version: list[str]) -> None:
    """The stream says, in a comment before its first event, that the id it came back with was
    not understood and where it starts; it does not echo the id. A readable id gets no such
    line."""
    def raw(last_id: str) -> str:
        done = subprocess.run(["curl", "-s", "-N", "--max-time", "2", *version,
                               "-H", f"Last-Event-ID: {last_id}",
                               streamd.url(f"/events/{filtered_topic}")],
                              capture_output=True, text=True, check=False)
        return done.stdout

    out = raw("not-an-id<script>")
    notice = ": last event id not understood: this stream starts at the oldest event ssekd " \
             "holds, as a new one would\n\n"
    assert out.startswith(notice), out[:300]
    assert out.count(notice) == 1 and "<script>" not in out
    assert "\nid:" in "\n" + out[len(notice):]
    first_id = out[len(notice):].split("\n", 1)[0][3:]
    assert "not understood" not in raw(first_id)


#: (id, path, headers, status, what the daemon logs for it); `{t}` is the test's topic.
ODD = [
    ("dot-segments", "/events/%2e%2e/%2e%2e", {}, 404,
     "BINDING_SSE_REQUEST_REJECTED 404 GET /events/%2e%2e/%2e%2e"),
    ("long-topic", "/events/" + "a" * 5000, {}, 404,
     "BINDING_SSE_KAFKA_NO_ROUTE GET /events/aaaa"),
    # Twisted's parser refuses control characters before any binding sees the request
    ("control-characters", "/events/x\x01y", {"Last-Event-ID": "a\x01\x7fb"}, 400, None),
    ("undecodable-id-header", "/events/{t}", {"Last-Event-ID": "\xff\xfe\x80"}, 200,
     "BINDING_SSE_KAFKA_LAST_EVENT_ID_UNREADABLE GET /events/{t} not base64url"),
    ("undecodable-topic", "/events/%ff%fe", {}, 404,
     "BINDING_SSE_KAFKA_NO_ROUTE GET /events/%ff%fe: not a topic name"),
    ("lone-surrogate-id", "/keyed/{t}?lastEventId=%5B%22a%22%2C%22%5Cud800%22%5D", {}, 200,
     "BINDING_SSE_KAFKA_LAST_EVENT_ID_UNREADABLE GET /keyed/{t} not base64url"),
]


@pytest.mark.parametrize(("path", "headers", "status", "logged"), [c[1:] for c in ODD],
                         ids=[c[0] for c in ODD])
def test_odd_requests_never_hurt_the_daemon(streamd: Streamd, filtered_topic: str, path: str,
                                            headers: dict[str, str], status: int,
                                            logged: str | None) -> None:
    before = streamd.daemon.output()
    path = path.replace("{t}", filtered_topic)
    with streamd.open(path, headers) as c:
        assert c.status == status
        if status == 200:  # an unreadable id: the stream starts from the beginning
            assert [e.data for e in c.events(7)] == [d for _, d in START]
    if logged is not None:  # a thread writes event lines: wait for this request's
        wanted = logged.replace("{t}", filtered_topic)
        wait_until(lambda: wanted in streamd.daemon.output()[len(before):],
                   what=lambda: f"{wanted!r} not logged")
    after = streamd.daemon.output()
    assert after.startswith(before)
    new = after[len(before):]
    if logged is None:
        assert "BINDING_" not in new, new
    else:
        assert sum(logged.replace("{t}", filtered_topic) in line
                   for line in new.splitlines()) == 1, new
    assert "Traceback" not in after and "Unhandled" not in after
    assert streamd.daemon.alive()


def test_since_starts_at_a_time(kafka: Kafka, streamd: Streamd) -> None:
    now = int(time.time() * 1000)
    since = now - 60_000 + 30_000
    iso = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(since / 1000)) + f".{since % 1000:03d}Z"
    for text in (str(since), iso):
        topic = kafka.topic(2)
        for i in range(6):
            kafka.produce(topic, b"%d" % i, partition=i % 2, timestamp=now - 60_000 + i * 10_000)
        kafka.flush()
        got = values(streamd, kafka, topic, f"/events/{topic}?since={text}", 3, partitions=(0, 1))
        assert sorted(got) == ["3", "4", "5"]


def test_live_topic_starts_at_the_end(kafka: Kafka, streamd: Streamd) -> None:
    # `live-a` is configured defaultOffset: live; history must not be replayed to a new stream
    kafka.admin.create_topics([NewTopic("live-a", 2, 1)])["live-a"].result(10)
    for i in range(5):
        kafka.produce("live-a", b"old-%d" % i, partition=i % 2)
    kafka.flush()
    with streamd.open("/live/live-a") as c:
        # The stream is live once it has found the end of both partitions: until then, a
        # record produced now may land before the end it finds. Probe both partitions until a
        # probe of each has arrived; after that every new record arrives.
        got: list[str] = []
        waiting = {0, 1}
        deadline = time.monotonic() + 20
        while waiting:
            assert time.monotonic() < deadline, f"the stream never became live: {got}"
            probes = dict(zip(kafka.mark("live-a", (0, 1)), (0, 1), strict=True))
            while (e := c.next_event(0.2)) is not None:
                got.append(e.data or "")
                waiting.discard(probes.get(e.data or "", -1))
        for i in range(4):
            kafka.produce("live-a", b"new-%d" % i, partition=i % 2)
        kafka.flush()
        got += [e.data or "" for e in c.until(kafka.mark("live-a", (0, 1)))]
    assert not [d for d in got if d.startswith("old-")], got
    assert sorted(d for d in got if not d.startswith("marker-")) == [f"new-{i}" for i in range(4)]
