"""`HeaderBlockWatch` follows frame headers only: where header blocks start, how many bytes the
latest block announced, and how many frames asked for an answer."""

from __future__ import annotations

from hyperframe.frame import (
    ContinuationFrame,
    DataFrame,
    HeadersFrame,
    PingFrame,
    RstStreamFrame,
    SettingsFrame,
)

from ssekd.bindings.http.header_blocks import HeaderBlockWatch
from tests.support.reliability import PREFACE


def test_header_blocks_start_where_their_headers_frame_starts() -> None:
    first = HeadersFrame(1, data=b"a" * 10, flags=["END_HEADERS"]).serialize()
    reset = RstStreamFrame(1, error_code=8).serialize()
    second = HeadersFrame(3, data=b"b" * 5, flags=["END_HEADERS"]).serialize()
    data = PREFACE + first + reset + second
    watch = HeaderBlockWatch()
    assert watch.feed(data) == [len(PREFACE), len(PREFACE) + len(first) + len(reset)]
    assert watch.block_bytes == 5 and not watch.pending


def test_a_frame_header_split_across_reads_needs_no_cut() -> None:
    frame = HeadersFrame(1, data=b"a" * 10, flags=["END_HEADERS"]).serialize()
    watch = HeaderBlockWatch()
    assert watch.feed(PREFACE + frame[:4]) == []  # not known to be HEADERS yet
    assert watch.feed(frame[4:]) == []  # began in the read before: h2 has its first bytes
    assert watch.block_bytes == 10


def test_block_bytes_add_up_over_continuation_frames_and_restart_with_a_block() -> None:
    watch = HeaderBlockWatch()
    watch.feed(PREFACE + HeadersFrame(1, data=b"a" * 100).serialize())
    watch.feed(ContinuationFrame(1, data=b"b" * 200).serialize())
    assert watch.block_bytes == 300 and watch.pending
    watch.feed(ContinuationFrame(1, data=b"c" * 50, flags=["END_HEADERS"]).serialize())
    assert watch.block_bytes == 350 and not watch.pending
    watch.feed(DataFrame(1, data=b"d" * 1000).serialize())
    watch.feed(HeadersFrame(3, data=b"e" * 7, flags=["END_HEADERS"]).serialize())
    assert watch.block_bytes == 7


def test_frames_that_ask_for_an_answer_are_counted_but_not_their_acks() -> None:
    watch = HeaderBlockWatch()
    watch.feed(PREFACE + SettingsFrame(0).serialize() + PingFrame(0).serialize() * 3)
    watch.feed(SettingsFrame(0, flags=["ACK"]).serialize())
    watch.feed(PingFrame(0, flags=["ACK"]).serialize())
    assert watch.answered == 4
