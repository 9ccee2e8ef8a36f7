"""Value filters and request values against the real broker and daemon (ssekd additions):
a route filtering on JSON fields with a value from the path, and a route whose topic comes
from the query and whose key filter from a header (Zilla #1507, #1508)."""

from __future__ import annotations

from urllib.parse import quote

import pytest

from tests.support.broker import Kafka
from tests.support.streamd import Streamd

pytestmark = [pytest.mark.daemon, pytest.mark.broker]


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
