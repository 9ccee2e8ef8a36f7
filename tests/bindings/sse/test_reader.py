"""The sse client's reader of upstream bytes: fields kept as sent, any line ending, split reads,
and the bounds (line length, event size, UTF-8) that end a read instead of growing memory."""

from __future__ import annotations

import pytest

from ssekd.bindings.sse.reader import Event, EventReader, Retry, UpstreamError
from tests.support.scanning import count_scans


def read_all(chunks: list[bytes], **kw: int) -> list[Event | Retry]:
    reader = EventReader(**kw)
    out: list[Event | Retry] = []
    for chunk in chunks:
        out += reader.feed(chunk)
    return out


def test_fields_pass_in_their_order_comments_and_unknown_fields_dropped() -> None:
    got = read_all([b": hello\nid:7\nevent:price\ndata: a\ndata:b\nfoo:bar\nretry: 3000\n\n"])
    assert got == [Retry(3000), Event("7", b"id:7\nevent:price\ndata:a\ndata:b\n\n")]


def test_every_line_ending_and_every_split_point_give_the_same_events() -> None:
    text = b"\xef\xbb\xbfid:1\r\ndata:x\r\n\r\nid:2\rdata:y\r\rid:3\ndata:z\n\n"
    whole = read_all([text])
    assert whole == [Event("1", b"id:1\ndata:x\n\n"), Event("2", b"id:2\ndata:y\n\n"),
                     Event("3", b"id:3\ndata:z\n\n")]
    for cut in range(1, len(text)):
        assert read_all([text[:cut], text[cut:]]) == whole, cut


def test_an_event_without_data_still_carries_its_id_and_blank_lines_alone_are_nothing() -> None:
    assert read_all([b"\n\nid:9\n\n\n"]) == [Event("9", b"id:9\n\n")]


def test_an_id_with_nul_is_ignored_as_a_browser_ignores_it() -> None:
    assert read_all([b"id:a\0b\ndata:x\n\n"]) == [Event(None, b"data:x\n\n")]


def test_a_line_over_the_limit_ends_the_read_even_before_it_ends() -> None:
    with pytest.raises(UpstreamError, match="longer than 16 bytes"):
        read_all([b"data:" + b"x" * 20], max_line=16)
    with pytest.raises(UpstreamError, match="longer than 16 bytes"):
        read_all([b"data:" + b"x" * 20 + b"\n"], max_line=16)
    assert read_all([b"data:" + b"x" * 11 + b"\n\n"], max_line=16) != []


def test_an_event_over_the_limit_and_bytes_that_are_not_utf8_end_the_read() -> None:
    with pytest.raises(UpstreamError, match="larger than 20 bytes"):
        read_all([b"data:0123456789\n" * 3], max_event=20)
    with pytest.raises(UpstreamError, match="not UTF-8"):
        read_all([b"data:\xff\xfe\n\n"])


def test_a_long_unfinished_line_then_a_byte_at_a_time_costs_the_same_per_byte(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A hostile upstream sends 900 KiB of a line, then one byte at a time: each byte must cost
    what any byte costs, not a rescan (and copy) of the 900 KiB before it. Counted in bytes
    scanned (`CountingEol`) and in the reader's own `work` (scans and copies), never timed."""
    scans = count_scans(monkeypatch)
    reader = EventReader()
    reader.feed(b"data:" + b"x" * (900 * 1024))
    scanned = scans.scanned
    drip = 2000
    for _ in range(drip):
        assert reader.feed(b"x") == []
    assert (scans.scanned - scanned) / drip <= 1.0, "each byte scanned once"
    # the line still ends, whole, when its end comes
    [event] = reader.feed(b"\n\n")
    assert event.data == b"data:" + b"x" * (900 * 1024 + drip) + b"\n\n"
    assert reader.work <= 4 * (5 + 900 * 1024 + drip + 2)
