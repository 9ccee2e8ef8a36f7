"""Routes and filters (SPEC §6-§7): key, header, key+headers, any-of, from path params; the
statuses of bad requests; hostile last event ids; `since`; `live`."""

from __future__ import annotations

import socket
import time
from urllib.parse import quote

import pytest

from ssekd.progress import ProgressId
from tests.streaming.conftest import Kafka, Streamd


@pytest.fixture(scope="module")
def filtered_topic(kafka: Kafka) -> str:
    topic = kafka.topic(3)
    rows = [
        (b"a", b"1", [("colour", b"red"), ("size", b"big")]),
        (b"a", b"2", [("colour", b"red")]),
        (b"b", b"3", [("colour", b"red"), ("size", b"big")]),
        (b"b", b"4", [("colour", b"blue")]),
        (b"c", b"5", []),
        (b"a", b"6", [("size", b"big"), ("colour", b"red")]),
        (None, b"7", [("colour", b"blue")]),
    ]
    for key, value, headers in rows:
        kafka.produce(topic, value, key=key, partition=0, headers=headers)
    kafka.flush()
    return topic


def values(streamd: Streamd, path: str, n: int) -> list[str]:
    with streamd.open(path) as c:
        assert c.status == 200
        got = [e.data or "" for e in c.events(n)]
        assert c.quiet(0.3) == []
    return sorted(got)


def test_filter_by_key_from_path_params(streamd: Streamd, filtered_topic: str) -> None:
    assert values(streamd, f"/bykey/{filtered_topic}/a", 3) == ["1", "2", "6"]
    assert values(streamd, f"/bykey/{filtered_topic}/c", 1) == ["5"]


def test_filter_by_header(streamd: Streamd, filtered_topic: str) -> None:
    assert values(streamd, f"/byheader/{filtered_topic}", 4) == ["1", "2", "3", "6"]


def test_filter_key_and_headers(streamd: Streamd, filtered_topic: str) -> None:
    assert values(streamd, f"/keyheader/{filtered_topic}", 2) == ["1", "6"]


def test_filters_are_any_of(streamd: Streamd, filtered_topic: str) -> None:
    assert values(streamd, f"/anyof/{filtered_topic}", 5) == ["1", "2", "4", "6", "7"]


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
        # Twisted's parser refuses a NUL in a header with 400 before the sse binding sees it:
        # a clean refusal is the right answer too, and the daemon goes on serving.
        with streamd.open(f"/events/{filtered_topic}",
                          {"Last-Event-ID": bad.encode("utf-8").decode("latin-1")}) as c:
            assert c.status == 400
        return
    path, headers = f"/events/{filtered_topic}", {}
    if via == "header":
        headers = {"Last-Event-ID": bad.encode("utf-8").decode("latin-1")}
    else:
        path += "?lastEventId=" + quote(bad, safe="")
    with streamd.open(path, headers) as c:
        assert c.status == 200
        got = c.events(7)
    assert [e.data for e in got] == ["1", "2", "3", "4", "5", "6", "7"]
    streamd.daemon.wait_output("BINDING_SSE_KAFKA_LAST_EVENT_ID_UNREADABLE")


def test_garbage_id_in_query_resumes_from_start(streamd: Streamd, filtered_topic: str) -> None:
    with streamd.open(f"/events/{filtered_topic}?lastEventId=%FF%00%0A") as c:
        assert len(c.events(7)) == 7


def test_odd_requests_never_hurt_the_daemon(streamd: Streamd, filtered_topic: str) -> None:
    odd = [
        b"GET /events/%2e%2e/%2e%2e HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET /events/" + b"a" * 5000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET /events/x\x01y HTTP/1.1\r\nHost: x\r\nLast-Event-ID: a\x01\x7fb\r\n\r\n",
        b"GET /events/" + filtered_topic.encode() + b" HTTP/1.1\r\nHost: x\r\n"
        b"Last-Event-ID: \xff\xfe\x80\r\n\r\n",
        b"GET /events/%ff%fe HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET /keyed/" + filtered_topic.encode() + b"?lastEventId=%5B%22a%22%2C%22%5C" +
        b"ud800%22%5D HTTP/1.1\r\nHost: x\r\n\r\n",
    ]
    for raw in odd:
        s = socket.create_connection(("127.0.0.1", streamd.port), timeout=5)
        s.sendall(raw)
        status = s.recv(100)
        s.close()
        assert status.startswith(b"HTTP/1.1 "), status
    assert streamd.daemon.alive()
    assert values(streamd, f"/bykey/{filtered_topic}/c", 1) == ["5"]


def test_since_starts_at_a_time(kafka: Kafka, streamd: Streamd) -> None:
    topic = kafka.topic(2)
    now = int(time.time() * 1000)
    for i in range(6):
        kafka.produce(topic, b"%d" % i, partition=i % 2, timestamp=now - 60_000 + i * 10_000)
    kafka.flush()
    since = now - 60_000 + 30_000
    assert values(streamd, f"/events/{topic}?since={since}", 3) == ["3", "4", "5"]
    iso = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(since / 1000)) + f".{since % 1000:03d}Z"
    assert values(streamd, f"/events/{topic}?since={iso}", 3) == ["3", "4", "5"]


def test_live_topic_starts_at_the_end(kafka: Kafka, streamd: Streamd) -> None:
    # `live-a` is configured defaultOffset: live; history must not be replayed to a new stream
    kafka.admin.create_topics([__import__("confluent_kafka.admin").admin.NewTopic(
        "live-a", 2, 1)])["live-a"].result(10)
    for i in range(5):
        kafka.produce("live-a", b"old-%d" % i, partition=i % 2)
    kafka.flush()
    with streamd.open("/live/live-a") as c:
        # let the cache reach the end, then produce; only new records arrive (tansu may
        # misplace its end inside the last batch, so do not depend on the exact old count)
        time.sleep(0.5)
        for i in range(4):
            kafka.produce("live-a", b"new-%d" % i, partition=i % 2)
        kafka.flush()
        got = [e.data for e in c.events(4)]
    assert got and all(d and d.startswith("new-") for d in got)
