"""Value filters and request values against the real broker and daemon (ssekd additions):
a route filtering on JSON fields with a value from the path, and a route whose topic comes
from the query and whose key filter from a header (Zilla #1507, #1508)."""

from __future__ import annotations

import json
from urllib.parse import quote

import pytest

from tests.support.broker import Kafka
from tests.support.streamd import Streamd

pytestmark = [pytest.mark.daemon, pytest.mark.broker]


def test_value_filters_take_the_records_whose_fields_match(kafka: Kafka,
                                                           streamd: Streamd) -> None:
    topic = kafka.topic(2)
    records = [
        {"owner": "alice", "kind": "order", "n": 1},
        {"owner": "bob", "kind": "order", "n": 2},
        {"owner": "alice", "kind": "note", "n": 3},
        {"owner": "alice", "kind": "refund", "n": 4},
        "not an object",
        {"owner": ["alice"], "kind": "order", "n": 5},
        {"all": True, "n": 6},
        {"all": 1, "n": 7},
    ]
    for n, r in enumerate(records):
        kafka.produce(topic, json.dumps(r).encode(), partition=n % 2)
    kafka.produce(topic, b"{not json", partition=0)
    kafka.produce(topic, json.dumps({"owner": "alice", "kind": "order", "n": 8}).encode(),
                  partition=1)
    kafka.flush()
    with streamd.open(f"/byvalue/{topic}/alice") as c:
        events = c.events(4)
    got = sorted(json.loads(e.data or "")["n"] for e in events)
    assert got == [1, 4, 6, 8]
    # a resume from the second event goes on after it, by each partition's order
    first_two = {json.loads(e.data or "")["n"] for e in events[:2]}
    with streamd.open(f"/byvalue/{topic}/alice", {"Last-Event-ID": events[1].id or ""}) as c:
        rest = c.events(2)
    assert {json.loads(e.data or "")["n"] for e in rest} == {1, 4, 6, 8} - first_two


def test_topic_from_the_query_and_key_from_a_header(kafka: Kafka, streamd: Streamd) -> None:
    topic = kafka.topic(1)
    for key in (b"a", b"b", b"a"):
        kafka.produce(topic, b"v-" + key, key=key, partition=0)
    kafka.flush()
    with streamd.open(f"/item?topic={topic}", {"X-Item": "a"}) as c:
        assert [e.data for e in c.events(2)] == ["v-a", "v-a"]
    # what a request cannot give is 404, as a path no route matches
    assert streamd.status(f"/item?topic={topic}") == 404, "no such header"
    assert streamd.status("/item", headers={"X-Item": "a"}) == 404, "no such query parameter"
    assert streamd.status(f"/item?topic={quote(topic + chr(10))}", headers={"X-Item": "a"}) == 404
    assert streamd.status(f"/item?topic={topic}%0Ax", headers={"X-Item": "a"}) == 404
    assert streamd.status("/item?topic=__consumer_offsets", headers={"X-Item": "a"}) == 404
    assert streamd.status("/item?topic=a,b", headers={"X-Item": "a"}) == 404
    assert streamd.status(f"/item?topic={topic}&topic=other", headers={"X-Item": "a\x01"}) == 404
    # http.client sends a str header as latin-1: b"\xe9" alone is not UTF-8
    assert streamd.status(f"/item?topic={topic}", headers={"X-Item": "caf\xe9"}) == 404
