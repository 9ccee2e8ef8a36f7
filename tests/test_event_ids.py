"""Progress tokens and last event ids (`ssekd.event_ids`): Zilla's vectors, round trips, hostile
tokens, and the encoder's incremental token that never drifts from the reference encoding."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ssekd.event_ids import (
    KEY_TEXT_FORMAT,
    MAX_ID_LENGTH,
    ProgressId,
    ProgressState,
    UndecodableId,
    b64url,
    format_event_id,
    parse_last_event_id,
)
from tests.support.data import event_id_vectors

#: Every test against the pure hot path and its compiled twin (tests/support/hotpath.py).
pytestmark = pytest.mark.usefixtures("hot_path")

VECTORS = event_id_vectors()


def _parts(d: dict[str, int]) -> dict[int, int]:
    return {int(k): v for k, v in d.items()}


@pytest.mark.parametrize("v", VECTORS["progress"], ids=lambda v: v["id"])
def test_progress_vectors(v: dict[str, Any]) -> None:
    assert ProgressId.encode(_parts(v["partitions"])) == v["id"]
    assert ProgressId.decode(v["id"]) == _parts(v["partitions"])
    assert ProgressState(_parts(v["partitions"])).token() == v["id"]


@pytest.mark.parametrize("v", VECTORS["event_ids"], ids=lambda v: v["id"])
def test_event_id_vectors(v: dict[str, Any]) -> None:
    key = None if v.get("key_utf8") is None else v["key_utf8"].encode()
    token = ProgressId.encode(_parts(v["partitions"]))
    assert format_event_id(v["format"], token, v["etag"], key) == v["id"]


@pytest.mark.parametrize("v", VECTORS["parse"], ids=lambda v: v["last_event_id"] or "empty")
def test_parse_vectors(v: dict[str, Any]) -> None:
    if v["resume"] == "historical":
        with pytest.raises(UndecodableId):
            parse_last_event_id(v["last_event_id"])
    else:
        assert parse_last_event_id(v["last_event_id"]) == _parts(v["resume"])


@given(st.dictionaries(st.integers(0, 5000), st.integers(0, 2**63 - 1), max_size=40))
def test_progress_round_trip(parts: dict[int, int]) -> None:
    assert ProgressId.decode(ProgressId.encode(parts)) == parts


@given(st.text(max_size=300) | st.binary(max_size=300).map(lambda b: b.decode("latin-1")))
def test_any_text_parses_or_is_undecodable(text: str) -> None:
    try:
        parsed = parse_last_event_id(text)
    except UndecodableId:
        return
    assert all(p >= 0 and o >= 0 for p, o in parsed.items())


_progress_ops = st.lists(st.tuples(
    st.sampled_from(["advance", "set", "move", "move", "drop", "copy"]),
    st.integers(0, 20), st.integers(0, 2**40)), max_size=60)


@given(st.dictionaries(st.integers(0, 20), st.integers(0, 2**40), max_size=5), _progress_ops)
def test_progress_state_token_is_always_exact(start: dict[int, int],
                                              ops: list[tuple[str, int, int]]) -> None:
    """The encoder's per-event `advance` (with its cached surroundings) never drifts from the
    reference encoding, whatever mix of partitions, offsets, sets, drops and copies; nor does
    the tail's `move`, whose token is made only when asked (after any number of moves)."""
    state = ProgressState(start)
    expected = dict(start)
    for op, p, offset in ops:
        if op == "advance":
            # the hot path mostly sees consecutive offsets of one partition
            for o in range(offset, offset + 3):
                expected[p] = o
                assert state.advance(p, o).decode() == ProgressId.encode(expected)
        elif op == "set":
            state.set(p, offset)
            expected[p] = offset
        elif op == "move":
            state.move(p, offset)
            expected[p] = offset
        elif op == "drop":
            state.drop(p)
            expected.pop(p, None)
        else:
            state = state.copy()
        assert state.offsets == expected
        if op != "move":  # moves pile up until a token is asked for
            assert state.token() == ProgressId.encode(expected)
    assert state.token() == ProgressId.encode(expected)


def test_progress_advance_across_varint_lengths() -> None:
    state = ProgressState({0: 0, 3: 5})
    expected = {0: 0, 3: 5}
    for o in [*range(200), *range(8000, 8300), *range(1_048_500, 1_048_700), 2**40]:
        expected[3] = o
        assert state.advance(3, o).decode() == ProgressId.encode(expected)


@given(st.dictionaries(st.integers(0, 300), st.integers(0, 2**40), max_size=8),
       st.lists(st.tuples(st.integers(0, 300), st.integers(0, 2**40), st.integers(1, 200)),
                max_size=12))
def test_progress_advance_runs_equal_reference(start: dict[int, int],
                                               runs: list[tuple[int, int, int]]) -> None:
    """Catch-up reads runs of consecutive offsets of one partition: the token `advance` builds
    from its encoded pieces (the group table redone every 64 offsets) is the from-scratch one for
    every offset, wherever the moving varint byte falls in base64's 3-byte groups (before,
    between and after other partitions, in the last group, padded or not)."""
    state = ProgressState(start)
    expected = dict(start)
    for p, first, length in runs:
        for o in range(first, first + length):
            expected[p] = o
            assert state.advance(p, o).decode() == ProgressId.encode(expected)
        assert state.token() == ProgressId.encode(expected)


def test_hostile_tokens() -> None:
    for bad in ["AQ" + "_" * 60, "AZBO", "AQIBAA==", "AQL_____________AQ==", "AQQABAI+",
                "AgQABAIC", "AQQABAICAA==", "AQQAAgAC"]:
        with pytest.raises(UndecodableId):
            ProgressId.decode(bad)


# -- keepalive and the sse resource on a MemoryReactorClock -----------------------------------


# -- the cache: bounds, compaction, tail groups ------------------------------------------------


# -- the text form of keyed ids (an ssekd addition, Zilla #42) ----------------------------------

@pytest.mark.parametrize(("key", "shown"), [
    (b"sensor-1", "sensor-1"),
    ("caf\u00e9 \u00fcber/\u2603".encode(), "caf\u00e9 \u00fcber/\u2603"),
    (b"", ""),
    # what JSON would escape, and what is not UTF-8, falls back to base64url
    (b'say "hi"', b64url(b'say "hi"')),
    (b"back\\slash", b64url(b"back\\slash")),
    (b"line\nbreak", b64url(b"line\nbreak")),
    (b"tab\there", b64url(b"tab\there")),
    (b"del\x7f", b64url(b"del\x7f")),
    (b"\xff\xfe", b64url(b"\xff\xfe")),
])
def test_text_keys_are_verbatim_or_base64(key: bytes, shown: str) -> None:
    token = ProgressId.encode({0: 3})
    event_id = format_event_id(KEY_TEXT_FORMAT, token, "e1", key)
    assert event_id == f'["{shown}","{token}/e1"]'
    assert json.loads(event_id)[0] == shown
    assert parse_last_event_id(event_id) == {0: 3}
    assert format_event_id(KEY_TEXT_FORMAT, token, None, None) == f'[null,"{token}"]'


@given(st.binary(max_size=40), st.dictionaries(st.integers(0, 50), st.integers(0, 2**40),
                                               max_size=5))
def test_text_key_ids_always_resume(key: bytes, positions: dict[int, int]) -> None:
    """Whatever the key, the id is one JSON array whose first item is the key or its base64url,
    with no line break (it is an `id:` line), and it resumes at its progress."""
    event_id = format_event_id(KEY_TEXT_FORMAT, ProgressId.encode(positions), None, key)
    shown, _ = json.loads(event_id)
    assert shown == key.decode("utf-8", "replace") or shown == b64url(key)
    assert "\n" not in event_id and "\r" not in event_id and "\0" not in event_id
    if len(event_id) <= MAX_ID_LENGTH:
        assert parse_last_event_id(event_id) == positions
