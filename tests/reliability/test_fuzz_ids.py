"""What a client controls besides the request head, at unit level and fast: last event ids
(`parse_last_event_id`: a resume map or `UndecodableId`, nothing else, and valid ids round-trip),
`since` (epoch ms or one of the errors the proxy turns into `400`), query strings and route
path parameters (a match or none, never an exception). Each case is timed: a parser that takes
more than 100 ms of CPU on one input would stall the reactor that calls it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ssekd.bindings.sse.server import query_params
from ssekd.bindings.sse_kafka.proxy import SseKafkaRoute, parse_since
from ssekd.event_ids import (
    KEY_ETAG_FORMAT,
    MAX_ID_LENGTH,
    ProgressId,
    UndecodableId,
    format_event_id,
    parse_last_event_id,
)
from ssekd.patterns import Pattern
from tests.support import fuzzing
from tests.support.faults import time_limit

pytestmark = pytest.mark.timeout(time_limit())

STALL = 0.100


def timed(fn: Callable[[], Any], what: object) -> Any:
    """`fn()` (its value, or what it raised), failing when it costs `STALL` of CPU every time
    it is tried (see `fuzzing.least_cpu`)."""
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome[:] = [fn(), None]
        except Exception as e:  # noqa: BLE001 - raised again below, after the CPU check
            outcome[:] = [None, e]

    cpu = fuzzing.least_cpu(lambda: fuzzing.thread_cpu(run), STALL)
    assert cpu < STALL, f"{cpu * 1000:.0f} ms of CPU for {what!r}"
    value, raised = outcome
    if raised is not None:
        raise raised
    return value


def test_last_event_ids() -> None:
    counts = {"resume": 0, "undecodable": 0}

    @fuzzing.examples(2000, 30000)
    @given(st.one_of(fuzzing.event_ids(), fuzzing.TEXT, st.text(max_size=300)))
    def case(text: str) -> None:
        try:
            positions = timed(lambda: parse_last_event_id(text), text)
        except UndecodableId:
            counts["undecodable"] += 1
            return
        counts["resume"] += 1
        assert len(text) <= MAX_ID_LENGTH
        assert all(p >= 0 and o >= 0 for p, o in positions.items())

    case()
    print(f"\nLast-Event-ID parser: {sum(counts.values())} cases {counts}")


def test_valid_ids_round_trip() -> None:
    n = [0]

    @fuzzing.examples(2000, 20000)
    @given(st.dictionaries(st.integers(0, 1000), st.integers(0, 2 ** 63 - 1), max_size=8),
           st.one_of(st.none(), st.text(st.characters(blacklist_categories=("Cs", "Cc")),
                                        max_size=20)),
           st.one_of(st.none(), st.binary(max_size=20)), st.booleans())
    def case(positions: dict[int, int], etag: str | None, key: bytes | None,
             keyed: bool) -> None:
        token = ProgressId.encode(positions)
        if etag is not None and "/" in etag:
            etag = etag.replace("/", "")
        event_id = format_event_id(KEY_ETAG_FORMAT if keyed else "${etag}", token, etag, key)
        n[0] += 1
        if len(event_id) > MAX_ID_LENGTH:
            return  # refused with 400 before parsing; the parser refuses it too
        assert parse_last_event_id(event_id) == positions

    case()
    print(f"\nevent id round trips: {n[0]} cases")


def test_since() -> None:
    counts = {"ms": 0, "400": 0}

    @fuzzing.examples(2000, 30000)
    @given(fuzzing.SINCE)
    def case(text: str) -> None:
        try:
            value = timed(lambda: parse_since(text), text)
        except (ValueError, OverflowError, OSError):  # what the proxy answers with 400
            counts["400"] += 1
            return
        assert isinstance(value, int)
        counts["ms"] += 1

    case()
    print(f"\nsince parser: {sum(counts.values())} cases {counts}")


ROUTES = [SseKafkaRoute((Pattern.compile(p),), "cache", None)
          for p in ("/events/{topic}", "/bykey/{topic}/{key}", "/a/{x}/b/{x}", "/files/*")]


def test_query_strings_and_path_parameters() -> None:
    counts = {"matched": 0, "no route": 0}

    @fuzzing.examples(2000, 30000)
    @given(fuzzing.targets(), st.binary(max_size=200))
    def case(target: str, raw: bytes) -> None:
        uri = target.encode("utf-8")
        for data in (uri, b"/events/x?" + raw):
            query = timed(lambda d=data: query_params(d), data)  # type: ignore[misc]
            assert all(isinstance(k, str) and isinstance(v, str) for k, v in query.items())
        path = target.partition("?")[0]
        for route in ROUTES:
            params = timed(lambda r=route: r.match(path), path)  # type: ignore[misc]
            if params is not None:
                counts["matched"] += 1
                assert all(isinstance(v, str) for v in params.values())
            else:
                counts["no route"] += 1

    case()
    print(f"\nquery strings and path parameters: {sum(counts.values()) // len(ROUTES)} cases, "
          f"route matches {counts}")
