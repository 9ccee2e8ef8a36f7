"""The id of a stream of several topics (an ssekd addition, docs/protocol.md "Several topics"):
its form, round trips, hostile ids, and how the events of each topic are rewritten."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ssekd.bindings.sse_kafka.topics import TOPIC_AS_EVENT, TOPIC_AS_FIELD, TopicsSubscription
from ssekd.event_ids import (
    MAX_ID_LENGTH,
    MAX_STREAM_TOPICS,
    ProgressId,
    UndecodableId,
    format_topics_token,
    parse_last_event_id,
    parse_topics_id,
    topic_tag,
)
from tests.support.subscriptions import Sink

_TOPIC_NAMES = st.text("abcdefghijklmnopqrstuvwxyz0123456789._-", min_size=1, max_size=20)
_POSITIONS = st.dictionaries(st.integers(0, 50), st.integers(0, 2**40), max_size=4)


def test_the_form_is_each_topics_tag_and_token_in_name_order() -> None:
    a = ProgressId.encode({0: 5})
    b = ProgressId.encode({0: 1, 1: 300})
    token = format_topics_token({"orders": b, "audit": a})
    assert token == f"{topic_tag('audit')}{a.rstrip('=')}.{topic_tag('orders')}{b.rstrip('=')}"
    assert topic_tag("audit") == "GP95" and topic_tag("orders") == "L_3u"
    assert token == "GP95AQIACg.L_3uAQQAAgLYBA"


def test_the_tag_is_four_base64url_characters() -> None:
    for name in ["a", "orders", "x" * 249, "a.b-c_d"]:
        tag = topic_tag(name)
        assert len(tag) == 4 and tag.replace("-", "").replace("_", "").isalnum()


@given(st.dictionaries(_TOPIC_NAMES, _POSITIONS, min_size=2, max_size=MAX_STREAM_TOPICS))
def test_round_trip(positions: dict[str, dict[int, int]]) -> None:
    token = format_topics_token({t: ProgressId.encode(p) for t, p in positions.items()})
    if len(token) > MAX_ID_LENGTH:
        return  # too long to come back (docs/protocol.md): refused, below
    assert parse_topics_id(token, list(positions)) == positions
    assert parse_topics_id(token + "/an-etag", list(positions)) == positions


def test_a_topic_the_id_does_not_name_starts_as_new_and_unknown_parts_are_ignored() -> None:
    token = format_topics_token({"a": ProgressId.encode({0: 3}), "b": ProgressId.encode({0: 4})})
    assert parse_topics_id(token, ["a", "c"]) == {"a": {0: 3}}
    assert parse_topics_id(token, ["c", "d"]) == {}


def test_topics_whose_tags_collide_are_told_apart_by_order() -> None:
    # two names with one tag (24 bits): found by search, kept here as data
    first, second = "hcbgfhhj", "jagcaceb"
    assert topic_tag(first) == topic_tag(second)
    token = format_topics_token({first: ProgressId.encode({0: 1}),
                                 second: ProgressId.encode({0: 2})})
    assert parse_topics_id(token, [second, first]) == {first: {0: 1}, second: {0: 2}}


@pytest.mark.parametrize("bad", [
    "", "/etag", ".", "GP95AQIACg.", "GP9.AQIACg", "GP95AQIACg..L_3uAQQAAgLYBA",
    "GP95AZBO.L_3uAQQAAgLYBA",          # a part whose token is not Zilla's version
    "GP95AQL_____________AQ.L_3uAQIACg",  # a varint longer than 64 bits
    "GP95AQIACgAA.L_3uAQIACg",            # trailing bytes
    "GP+5AQIACg.L_3uAQIACg",              # not base64url
    ".".join(["GP95AQIACg"] * (MAX_STREAM_TOPICS + 1)),
    "GP95AQIACg." + "L_3u" + "A" * 250,
    "GP95AQIACg\n.L_3uAQIACg",
])
def test_hostile_ids_are_undecodable(bad: str) -> None:
    with pytest.raises(UndecodableId):
        parse_topics_id(bad, ["audit", "orders"])


@given(st.text(max_size=300) | st.binary(max_size=300).map(lambda b: b.decode("latin-1")))
def test_any_text_parses_or_is_undecodable(text: str) -> None:
    try:
        out = parse_topics_id(text, ["audit", "orders"])
    except UndecodableId:
        return
    assert set(out) <= {"audit", "orders"}


def test_ids_of_one_kind_are_undecodable_as_the_other() -> None:
    one = ProgressId.encode({0: 3})
    with pytest.raises(UndecodableId):
        parse_topics_id(one, ["a", "b"])
    several = format_topics_token({"a": one, "b": one})
    with pytest.raises(UndecodableId):
        parse_last_event_id(several)


# -- the events of a several-topic stream ------------------------------------------------------


class Handle:
    def __init__(self, positions: dict[int, int]) -> None:
        self.at = positions
        self.closed = False
        self.paused = False

    def positions(self) -> dict[int, int]:
        return dict(self.at)

    def pause(self) -> None:
        self.paused = True

    def resume(self) -> None:
        self.paused = False

    def close(self) -> None:
        self.closed = True


def _stream(topic_as: str = TOPIC_AS_EVENT) -> tuple[TopicsSubscription, Sink]:
    sink = Sink()
    stream = TopicsSubscription(["orders", "audit"], sink, topic_as)
    stream.add("audit", Handle({0: 7}))
    stream.add("orders", Handle({0: 0, 1: 0}))
    return stream, sink


def test_an_event_is_named_by_its_topic_and_its_id_carries_every_topic() -> None:
    stream, sink = _stream()
    orders = ProgressId.encode({0: 1, 1: 0})
    stream.sinks["orders"].write(f"id:{orders}\ndata:hello\n\n".encode()
                                 + f"id:{orders}/e1\nevent:delete\ndata:a2V5\n\n".encode())
    audit = ProgressId.encode({0: 7})
    token = format_topics_token({"audit": audit, "orders": orders})
    assert b"".join(sink.writes).decode() == (
        f"id:{token}\nevent:orders\ndata:hello\n\n"
        f"id:{token}/e1\nevent:orders:delete\ndata:a2V5\n\n")
    assert parse_topics_id(token, ["orders", "audit"]) == {"audit": {0: 7}, "orders": {0: 1, 1: 0}}


def test_the_field_form_keeps_the_type_and_adds_a_topic_field() -> None:
    stream, sink = _stream(TOPIC_AS_FIELD)
    audit = ProgressId.encode({0: 8})
    stream.sinks["audit"].write(f"id:{audit}\ndata:x\n\n".encode()
                                + f"id:{audit}\nevent:delete\n\n".encode())
    token = format_topics_token({"audit": audit, "orders": ProgressId.encode({0: 0, 1: 0})})
    assert b"".join(sink.writes).decode() == (
        f"id:{token}\ntopic:audit\ndata:x\n\n"
        f"id:{token}\ntopic:audit\nevent:delete\n\n")


def test_an_etag_that_would_make_the_id_too_long_is_left_out() -> None:
    stream, sink = _stream()
    orders = ProgressId.encode({0: 1, 1: 0})
    stream.sinks["orders"].write(f"id:{orders}/{'e' * 240}\ndata:x\n\n".encode())
    first = b"".join(sink.writes).split(b"\n")[0].decode()
    assert first == "id:" + format_topics_token({"audit": ProgressId.encode({0: 7}),
                                                  "orders": orders})


def test_pause_resume_close_and_end_reach_every_topic() -> None:
    stream, sink = _stream()
    handles = list(stream.subscriptions.values())
    stream.pause()
    assert all(h.paused for h in handles)  # type: ignore[attr-defined]
    stream.resume()
    assert not any(h.paused for h in handles)  # type: ignore[attr-defined]
    assert not stream.closed
    stream.sinks["audit"].end()  # one topic's cache ends its stream: all of it ends
    assert stream.closed


def test_an_id_too_long_to_come_back_is_left_out() -> None:
    """Many partitions in many topics: the event goes without an id (the client keeps the last
    one that fitted, and resumes from there with repeats) rather than with one it could not
    send back."""
    sink = Sink()
    stream = TopicsSubscription([f"t{i}" for i in range(MAX_STREAM_TOPICS)], sink)
    for i in range(MAX_STREAM_TOPICS):
        stream.add(f"t{i}", Handle({p: 10**6 for p in range(6)}))
    stream.sinks["t0"].write(f"id:{ProgressId.encode({p: 10**6 for p in range(6)})}\n"
                             "data:x\n\n".encode())
    assert b"".join(sink.writes) == b"event:t0\ndata:x\n\n"


def test_streams_at_one_place_share_the_rewritten_bytes_and_others_do_not() -> None:
    """The tail writes one batch to each stream of a group in turn: a stream of the same
    topics at the same place gets the same bytes; one elsewhere (another position in the other
    topic, or the field form) gets its own."""
    batch = f"id:{ProgressId.encode({0: 1, 1: 0})}\ndata:x\n\n".encode()
    made = []
    for audit_at, topic_as in [(7, TOPIC_AS_EVENT), (7, TOPIC_AS_EVENT), (9, TOPIC_AS_EVENT),
                               (9, TOPIC_AS_FIELD)]:
        sink = Sink()
        stream = TopicsSubscription(["orders", "audit"], sink, topic_as)
        stream.add("audit", Handle({0: audit_at}))
        stream.add("orders", Handle({0: 0, 1: 0}))
        stream.sinks["orders"].write(batch)
        made.append(b"".join(sink.writes))
    assert made[0] is made[1]
    assert len({made[0], made[2], made[3]}) == 3
    assert made[2].startswith(("id:" + format_topics_token(
        {"audit": ProgressId.encode({0: 9}), "orders": ProgressId.encode({0: 1, 1: 0})})).encode())
