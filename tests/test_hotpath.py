"""The hot path's compiled twin makes the same bytes as the pure module it is compiled from.

Generated batches of records (several partitions, offsets with gaps and repeats, keys, values
with CR and LF, tombstones, headers with etags good and bad) go through an encoder of each
implementation, for every id format and kind of filter, a batch at a time as a cache hands
them over; the events, their count, the tokens and a several-topic stream's rewriting of them
must be identical. The record conversion and the progress tokens are compared the same way.
"""

from __future__ import annotations

import os
import subprocess
import sys
from itertools import count
from types import ModuleType
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ssekd.hotpath
from ssekd.bindings.kafka.value_path import ValuePath
from ssekd.bindings.sse.wire import END, ID, ID_DATA
from ssekd.bindings.sse_kafka.encoder import Filter, KafkaEventEncoder
from ssekd.bindings.sse_kafka.topics import TopicsSubscription
from ssekd.event_ids import ETAG_FORMAT, KEY_ETAG_FORMAT, KEY_TEXT_FORMAT, ProgressId
from ssekd.hotpath import kernels as pure
from tests.support.hotpath import compiled

_values = st.none() | st.sampled_from([
    b"v", b"", b"a\nb", b"x\r\ny", b"\r", b"\n\n", b'{"n":1}', b'{"n":2,"s":"a"}', b"not json",
    "\u00e9t\u00e9".encode(), b"\x00\xff"]) | st.binary(max_size=40)
_keys = st.none() | st.sampled_from([b"k", b"a", b'q"t', b"\\", b"\x01", "\u00e9".encode()]) \
    | st.binary(max_size=8)
_header = st.tuples(st.sampled_from(["etag", "kind", "x"]),
                    st.none() | st.sampled_from([b"e1", b"a\nb", b'q"', b"\xff", b"red", b""]))
_records = st.lists(st.tuples(st.integers(0, 3), st.integers(0, 400), _keys, _values,
                              st.lists(_header, max_size=2) | st.just([])),
                    max_size=60)

FILTERS: list[tuple[Filter, ...]] = [
    (),
    (Filter(key=b"k"),),
    (Filter(headers=(("kind", b"red"),)),),
    (Filter(values=((ValuePath("/n"), frozenset({b"1"})),)),),
    (Filter(key=b"a"), Filter(headers=(("etag", b"e1"),))),
    (Filter(),),
]
FORMATS = [ETAG_FORMAT, KEY_ETAG_FORMAT, KEY_TEXT_FORMAT]


def _messages(raw: list[tuple[int, int, Any, Any, list[tuple[str, Any]]]]) -> list[Any]:
    """Records as the cache holds them: each partition's in offset order (repeats kept: a
    re-fetch), partitions interleaved as they came."""
    seqs = count(1)
    return [(p, off, k, v, tuple(h), 0, next(seqs), 0)
            for p, off, k, v, h in sorted(raw, key=lambda r: (r[1], r[0]))]


def _run(impl: ModuleType, messages: list[Any], start: dict[int, int], filters: tuple[Filter, ...],
         fmt: str, batch: int) -> tuple[list[bytes], list[int], str]:
    enc = KafkaEventEncoder("t", filters, fmt, hot=impl)
    progress = impl.ProgressState(start)
    out: list[bytes] = []
    events: list[int] = []
    for i in range(0, len(messages), batch):
        data = enc.encode(messages[i:i + batch], progress, None)
        out.append(bytes(data))
        events.append(getattr(data, "events", 0))
    return out, events, progress.token()


@settings(max_examples=150, deadline=None)
@given(raw=_records, start=st.dictionaries(st.integers(0, 3), st.integers(0, 200), max_size=3),
       filters=st.sampled_from(FILTERS), fmt=st.sampled_from(FORMATS),
       batch=st.integers(1, 25))
def test_compiled_and_pure_encode_the_same_bytes(raw: Any, start: dict[int, int],
                                                 filters: tuple[Filter, ...], fmt: str,
                                                 batch: int) -> None:
    messages = _messages(raw)
    twin = compiled()
    got = _run(twin, messages, start, filters, fmt, batch)
    want = _run(pure, messages, start, filters, fmt, batch)
    assert got == want
    # and what both make is what the protocol says: every id's token is the progress just
    # after its record (checked on the last event of each batch)
    if fmt == ETAG_FORMAT and got[0] and got[0][-1]:
        assert ProgressId.decode(got[0][-1].rsplit(b"\nid:", 1)[-1].split(b"id:")[-1]
                                 .split(b"\n")[0].split(b"/")[0].decode())


@settings(max_examples=60, deadline=None)
@given(raw=_records, batch=st.integers(1, 25))
def test_compiled_and_pure_agree_on_several_topics(raw: Any, batch: int) -> None:
    """A stream of two topics rewrites each topic's events with the other's progress (and the
    topic as event type): the same bytes out of either implementation."""
    messages = _messages(raw)

    class Handle:
        closed = False

        def __init__(self, positions: dict[int, int]) -> None:
            self._positions = positions

        def positions(self) -> dict[int, int]:
            return self._positions

        def pause(self) -> None: ...

        def resume(self) -> None: ...

        def close(self) -> None: ...

    def stream(impl: ModuleType) -> list[bytes]:
        written: list[bytes] = []

        class Sink:
            def write(self, data: bytes) -> None:
                written.append(bytes(data))

            def end(self) -> None: ...

        topics = TopicsSubscription(["a.one", "b-two"], Sink())
        topics.add("a.one", Handle({0: 3}))
        topics.add("b-two", Handle({0: 1, 2: 7}))
        for topic, fmt in (("a.one", ETAG_FORMAT), ("b-two", ETAG_FORMAT)):
            enc = KafkaEventEncoder(topic, (), fmt, hot=impl)
            progress = impl.ProgressState()
            for i in range(0, len(messages), batch):
                data = enc.encode(messages[i:i + batch], progress, None)
                if data:
                    topics.write(topic, data)
        return written

    assert stream(compiled()) == stream(pure)


class _Record:
    """What `records_of_batch` reads of a confluent-kafka record, by the same method names."""

    def __init__(self, p: int, off: int, k: Any, v: Any, h: Any, ts: tuple[int, int]) -> None:
        self._fields = (p, off, k, v, h, ts)

    def partition(self) -> int:
        return self._fields[0]  # type: ignore[no-any-return]

    def offset(self) -> int:
        return self._fields[1]  # type: ignore[no-any-return]

    def key(self) -> Any:
        return self._fields[2]

    def value(self) -> Any:
        return self._fields[3]

    def headers(self) -> Any:
        return self._fields[4]

    def timestamp(self) -> tuple[int, int]:
        return self._fields[5]  # type: ignore[no-any-return]


@settings(max_examples=100, deadline=None)
@given(raw=st.lists(st.tuples(
    st.integers(0, 5), st.integers(0, 2**62), _keys, _values,
    st.none() | st.lists(_header, max_size=3),
    st.tuples(st.integers(0, 2), st.integers(0, 2**45))), max_size=30))
def test_compiled_and_pure_convert_records_alike(raw: Any) -> None:
    records = [_Record(*r) for r in raw]

    def convert(impl: ModuleType) -> list[Any]:
        return impl.records_of_batch(records, count(1).__next__, _Record.partition,  # type: ignore[no-any-return]
                                     _Record.offset, _Record.key, _Record.value,
                                     _Record.headers, _Record.timestamp)

    assert convert(compiled()) == convert(pure)


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(st.tuples(st.sampled_from(["advance", "set", "move", "drop", "copy"]),
                              st.integers(0, 4), st.integers(0, 70_000)), max_size=40))
def test_compiled_and_pure_make_the_same_tokens(ops: list[tuple[str, int, int]]) -> None:
    def tokens(impl: ModuleType) -> list[Any]:
        state = impl.ProgressState({1: 5})
        out: list[Any] = []
        for op, p, offset in ops:
            if op == "advance":
                out.extend(state.advance(p, o) for o in range(offset, offset + 70))
            elif op == "copy":
                state = state.copy()
            else:
                getattr(state, op)(p, *([offset] if op != "drop" else []))
            out.append((state.token(), state.key(), dict(state.offsets)))
        return out

    assert tokens(compiled()) == tokens(pure)


@settings(max_examples=100, deadline=None)
@given(stamps=st.lists(st.integers(0, 2**45), max_size=50), times=st.integers(1, 1000),
       now=st.floats(0, 2.0**45), total=st.floats(0, 1e9))
def test_compiled_and_pure_observe_the_same_ages(stamps: list[int], times: int, now: float,
                                                 total: float) -> None:
    bounds = (0.001, 0.01, 0.1, 1.0, 10.0)

    def observe(impl: ModuleType) -> tuple[list[int], float]:
        counts = [0] * (len(bounds) + 1)
        return counts, impl.observe_ages(counts, bounds, now, stamps, times, total)

    assert observe(compiled()) == observe(pure)


@given(sizes=st.lists(st.integers(120, 5000), max_size=400), bound=st.integers(1, 200_000))
def test_compiled_and_pure_bound_the_same_records(sizes: list[int], bound: int) -> None:
    records = [(0, i, None, b"", (), 0, i, size) for i, size in enumerate(sizes)]
    got = compiled().within_bytes(records, bound)
    assert got == pure.within_bytes(records, bound)
    assert got == records or (sum(m[7] for m in got) >= bound and len(got) >= 1
                              and sum(m[7] for m in got[:-1]) < bound)


def test_the_event_pieces_are_the_wire_formats() -> None:
    assert (pure.ID, pure.ID_DATA, pure.END) == (ID, ID_DATA, END)


def test_pure_python_is_chosen_by_the_environment() -> None:
    """`SSEKD_PURE_PYTHON=1` makes a process (a daemon's, say) run the pure module even where
    the twin is built; without it the twin runs."""
    compiled()
    code = "import ssekd.hotpath as h; print(h.COMPILED, h.IMPL.__name__)"
    for flag, want in (("1", "False ssekd.hotpath.kernels"),
                       (None, "True ssekd.hotpath._kernels_c")):
        env = {k: v for k, v in os.environ.items() if k != "SSEKD_PURE_PYTHON"}
        if flag is not None:
            env["SSEKD_PURE_PYTHON"] = flag
        got = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, check=True).stdout.strip()
        assert got == want


def test_this_process_runs_what_the_environment_says() -> None:
    pure_wanted = os.environ.get("SSEKD_PURE_PYTHON", "") not in ("", "0")
    assert ssekd.hotpath.COMPILED is (not pure_wanted and compiled().COMPILED)


def test_the_metrics_say_which_path_runs() -> None:
    """`ssekd_build_info{hotpath=...}`: where an operator sees a build that lacked a compiler."""
    from ssekd.engine import build_figures

    [(_, labels, value)] = [f for f in build_figures() if f[0] == "ssekd.build.info"]
    assert value == 1.0
    assert labels["hotpath"] == ("compiled" if ssekd.hotpath.COMPILED else "python")


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_tombstone_and_headers_alike(fmt: str) -> None:
    """The records the plain path hands to the encoder's own event maker, named one by one."""
    messages = [(0, 0, b"k", None, (), 0, 1, 0), (0, 1, None, None, (), 0, 2, 0),
                (0, 2, b"k", b"v", (("etag", b"e1"),), 0, 3, 0),
                (1, 0, b"k", b"a\r\nb", (), 0, 4, 0), (1, 1, b"k", b"v", (), 0, 5, 0)]
    assert _run(compiled(), messages, {}, (), fmt, 2) == _run(pure, messages, {}, (), fmt, 2)
