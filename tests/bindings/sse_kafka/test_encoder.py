"""The sse-kafka encoder's bytes: a tombstone as Zilla writes it, an etag that would break framing."""

from __future__ import annotations

import json

from ssekd.bindings.kafka.message import Message
from ssekd.bindings.sse_kafka.encoder import KafkaEventEncoder
from ssekd.event_ids import KEY_ETAG_FORMAT, ProgressState
from tests.support.data import event_id_vectors

VECTORS = event_id_vectors()


def test_tombstone_vector() -> None:
    t = VECTORS["tombstone"]
    enc = KafkaEventEncoder("t")
    progress = ProgressState({0: 1, 1: 1})
    wire = enc.encode([Message(0, 1, t["key_utf8"].encode(), None)], progress, None)
    assert wire.decode() == t["wire"]


def test_etag_that_would_break_framing_is_left_out() -> None:
    enc = KafkaEventEncoder("t", id_format=KEY_ETAG_FORMAT)
    m = Message(0, 0, b"k", b"v", (("etag", b'a"b'),))
    out = enc.encode([m], ProgressState(), None).decode()
    assert json.loads(out.split("\n")[0][3:])[1].endswith('/a"b')
    m = Message(0, 1, b"k", b"v", (("etag", b"a\nb"),))
    out = enc.encode([m], ProgressState(), None).decode()
    assert out.startswith('id:["aw==","AQIABA=="]\n')
