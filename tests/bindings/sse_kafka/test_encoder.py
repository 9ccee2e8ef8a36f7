"""The sse-kafka encoder's bytes: a tombstone as Zilla writes it, an etag that would break framing."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ssekd.bindings.kafka.message import Headers, new_message
from ssekd.bindings.sse_kafka.encoder import Filter, KafkaEventEncoder
from ssekd.event_ids import ETAG_FORMAT, KEY_ETAG_FORMAT, KEY_TEXT_FORMAT, ProgressState
from ssekd.spi.stream import EventBlock
from tests.support.data import event_id_vectors

#: Every test against the pure hot path and its compiled twin (tests/support/hotpath.py).
pytestmark = pytest.mark.usefixtures("hot_path")

VECTORS = event_id_vectors()


def test_tombstone_vector() -> None:
    t = VECTORS["tombstone"]
    enc = KafkaEventEncoder("t")
    progress = ProgressState({0: 1, 1: 1})
    wire = enc.encode([new_message(0, 1, t["key_utf8"].encode(), None)], progress, None)
    assert wire.decode() == t["wire"]


def test_etag_that_would_break_framing_is_left_out() -> None:
    enc = KafkaEventEncoder("t", id_format=KEY_ETAG_FORMAT)
    m = new_message(0, 0, b"k", b"v", (("etag", b'a"b'),))
    out = enc.encode([m], ProgressState(), None).decode()
    assert json.loads(out.split("\n")[0][3:])[1].endswith('/a"b')
    m = new_message(0, 1, b"k", b"v", (("etag", b"a\nb"),))
    out = enc.encode([m], ProgressState(), None).decode()
    assert out.startswith('id:["aw==","AQIABA=="]\n')


_records = st.lists(st.tuples(
    st.integers(0, 3), st.integers(0, 300),
    st.none() | st.binary(max_size=12),
    st.none() | st.sampled_from([b"v", b"a\nb", b"x\r\ny", b"", b"\n\n", b"{\"n\":1}"]),
    st.sampled_from([(), (("etag", b"e1"),), (("h", b"v"),)])), max_size=40)


@given(_records, st.sampled_from([ETAG_FORMAT, KEY_ETAG_FORMAT, KEY_TEXT_FORMAT]),
       st.booleans())
def test_encoded_block_carries_its_event_count(records: list[tuple[int, int, bytes | None,
                                                                   bytes | None, Headers]],
                                               fmt: str, filtered: bool) -> None:
    """A stream takes the count of events from the block the encoder made instead of counting
    blank lines (`EventBlock`): the two agree for every kind of record (plain, tombstone,
    several data lines, headers, etags), every id format, with and without filters, and the
    records the stream already passed are in neither."""
    messages = [new_message(p, o, k, v, h) for p, o, k, v, h in records]
    enc = KafkaEventEncoder("t", filters=(Filter(headers=(("h", b"v"),)), Filter(key=b"k"))
                            if filtered else (), id_format=fmt)
    out = enc.encode(messages, ProgressState({0: 100, 2: 5}), None)
    events = out.count(b"\n\n")
    assert type(out) is EventBlock if events else out == b""
    if events:
        assert isinstance(out, EventBlock) and out.events == events
