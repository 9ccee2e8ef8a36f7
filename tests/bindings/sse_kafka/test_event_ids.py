"""Event ids against the real broker: 3 partitions, keys, headers, tombstones (docs/protocol.md)."""

from __future__ import annotations

import base64
import json

import pytest

from ssekd.event_ids import ProgressId
from tests.support.broker import Kafka
from tests.support.streamd import Streamd

pytestmark = [pytest.mark.daemon, pytest.mark.broker]


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode()


def produce_mixed(kafka: Kafka, topic: str) -> list[tuple[int, bytes | None, bytes | None, bytes | None]]:
    """(partition, key, value, etag) in production order, offsets 0.. per partition."""
    rows = [
        (0, b"a", b"v0", None),
        (1, b"b", b"v1", b"rev-1"),
        (2, None, b"v2", None),
        (0, b"a", b"line1\nline2", b"rev-2"),
        (1, b"b", None, None),  # tombstone
        (2, None, None, b"rev-3"),  # tombstone with a null key
        (0, b"c", b"", None),
    ]
    for p, key, value, etag in rows:
        headers = [("other", b"x"), ("etag", etag), ("etag", b"second")] if etag else None
        kafka.produce(topic, value, key=key, partition=p, headers=headers)
    kafka.flush()
    return rows


def expected_progress(rows: list[tuple[int, bytes | None, bytes | None, bytes | None]],
                      delivered: list[tuple[int, int]]) -> list[dict[int, int]]:
    """Next-offset progress after each delivered (partition, offset), all partitions listed."""
    progress = {0: 0, 1: 0, 2: 0}
    out = []
    for p, o in delivered:
        progress[p] = o + 1
        out.append(dict(progress))
    return out


def offsets_of(rows: list[tuple[int, bytes | None, bytes | None, bytes | None]]) -> list[tuple[int, int]]:
    seen = {0: 0, 1: 0, 2: 0}
    out = []
    for p, *_ in rows:
        out.append((p, seen[p]))
        seen[p] += 1
    return out


def test_etag_ids_next_offset_semantics(kafka: Kafka, streamd: Streamd) -> None:
    topic = kafka.topic(3)
    rows = produce_mixed(kafka, topic)
    with streamd.open(f"/events/{topic}") as c:
        assert c.status == 200
        assert c.headers["Content-Type"] == "text/event-stream"
        assert c.headers["Cache-Control"] == "no-store"
        assert c.headers["X-Accel-Buffering"] == "no"
        events = c.events(len(rows))
    by_value = {}
    positions = offsets_of(rows)
    for e in events:
        token, _, etag = (e.id or "").partition("/")
        by_value[(e.event, e.data, etag or None)] = ProgressId.decode(token)
    # every partition is listed in every id, and each id says "next offset to read"
    for e in events:
        assert sorted(ProgressId.decode(e.id.split("/")[0])) == [0, 1, 2]  # type: ignore[union-attr]
    # per partition the events come in offset order and each names offset + 1 for its partition
    for (p, o), (rp, key, value, etag) in zip(positions, rows):
        if value is None:
            want = ("delete", None if key is None else b64(key), etag.decode() if etag else None)
        else:
            want = (None, value.decode(), etag.decode() if etag else None)
        assert want in by_value, (want, by_value)
        assert by_value[want][p] == o + 1
    last = ProgressId.decode(events[-1].id.split("/")[0])  # type: ignore[union-attr]
    assert last == {0: 3, 1: 2, 2: 2}


def test_multiline_and_tombstone_wire(kafka: Kafka, streamd: Streamd) -> None:
    topic = kafka.topic(1)
    kafka.produce(topic, b"a\nb", key=b"k", partition=0)
    kafka.produce(topic, None, key=b"key", partition=0)
    kafka.produce(topic, None, key=None, partition=0)
    kafka.flush()
    with streamd.open(f"/events/{topic}") as c:
        e1, e2, e3 = c.events(3)
    assert (e1.event, e1.data) == (None, "a\nb")
    assert (e2.event, e2.data, e2.id) == ("delete", "a2V5", ProgressId.encode({0: 2}))
    assert (e3.event, e3.data) == ("delete", None)


def test_key_form_ids_with_null_key(kafka: Kafka, streamd: Streamd) -> None:
    topic = kafka.topic(3)
    rows = produce_mixed(kafka, topic)
    with streamd.open(f"/keyed/{topic}") as c:
        events = c.events(len(rows))
    seen_null = seen_etag = False
    for e in events:
        key, progress = json.loads(e.id or "")
        token, _, etag = progress.partition("/")
        assert sorted(ProgressId.decode(token)) == [0, 1, 2]
        if key is None:
            seen_null = True
            assert e.data in ("v2", None)
        else:
            assert base64.urlsafe_b64decode(key) in (b"a", b"b", b"c")
        if etag:
            seen_etag = True
            assert etag.startswith("rev-")  # the first etag header, not the second
    assert seen_null and seen_etag
    # the exact bytes of the key form, as Zilla writes it
    first = next(e for e in events if e.data == "v0")
    assert first.id == f'["{b64(b"a")}","{ProgressId.encode(ProgressId.decode(json.loads(first.id)[1]))}"]'


def partition_of(event: tuple[str | None, str | None], markers: list[str]) -> int:
    """The partition of a `produce_mixed` row or a marker (markers go to 0, 1, 2 in turn), as
    the `/keyed/` route shows it: (event type, data)."""
    if event[1] in markers:
        return markers.index(event[1]) % 3
    if event[0] == "delete":  # tombstones: b's (partition 1) carries its key, the null key none
        return 1 if event[1] == "Yg==" else 2
    return {"v0": 0, "line1\nline2": 0, "": 0, "v1": 1, "v2": 2}[event[1] or ""]


def test_resume_with_key_form_id(kafka: Kafka, streamd: Streamd) -> None:
    topic = kafka.topic(3)
    rows = produce_mixed(kafka, topic)
    with streamd.open(f"/keyed/{topic}") as c:
        events = c.events(len(rows))
    markers: list[str] = []  # records added after `rows`: every resume gets them too
    for cut in range(len(events)):
        with streamd.open(f"/keyed/{topic}", {"Last-Event-ID": events[cut].id or ""}) as c:
            new = kafka.mark(topic, (0, 1, 2))
            rest = c.until(new)  # everything the stream sends before the new markers
        # each partition in order, from just after the id, then the markers of earlier rounds
        # (`until` stops before this round's); how partitions interleave is a cache's own (another
        # worker's, or a restarted daemon's, may differ)
        expected = [(e.event, e.data) for e in events[cut + 1:]] + \
            [(None, m) for m in markers]
        got = [(e.event, e.data) for e in rest]
        assert sorted(got, key=str) == sorted(expected, key=str)
        for partition in range(3):
            assert [g for g in got if partition_of(g, markers) == partition] == \
                [x for x in expected if partition_of(x, markers) == partition]
        markers += new


def test_text_key_ids_show_the_key_and_resume(kafka: Kafka, streamd: Streamd) -> None:
    """`["${key}","${etag}"]` (an ssekd addition): a UTF-8 key as it is, one JSON would have to
    escape (or that is not UTF-8) as base64url, null as null; a stream resumed with any of them
    goes on right after its event."""
    topic = kafka.topic(1)
    keys = [b"caf\xc3\xa9/1", b'say "hi"', b"\xff\x00", None, b"plain"]
    for n, key in enumerate(keys):
        kafka.produce(topic, b"v%d" % n, key=key, partition=0,
                      headers=[("etag", b"rev-%d" % n)])
    kafka.flush()
    with streamd.open(f"/keytext/{topic}") as c:
        events = c.events(len(keys))
    shown = [json.loads(e.id or "")[0] for e in events]
    assert shown == ["caf\u00e9/1", b64(b'say "hi"'), b64(b"\xff\x00"), None, "plain"]
    assert json.loads(events[0].id or "")[1] == f"{ProgressId.encode({0: 1})}/rev-0"
    for cut in range(len(keys) - 1):
        with streamd.open(f"/keytext/{topic}", {"Last-Event-ID": events[cut].id or ""}) as c:
            rest = c.events(len(keys) - cut - 1)
        assert [e.data for e in rest] == [f"v{n}" for n in range(cut + 1, len(keys))]
