"""The relay's reader of upstream bytes against random documents cut at random places.

An upstream decides how its bytes arrive: one read or a byte at a time, a line end split between
CR and LF, a long line trickled in. For each case the document is read whole and read in random
pieces, and both must give the same events (or the same error); the work the pieces cost,
counted in bytes the line-end search covered (`tests.support.scanning`) and in the reader's own
`work` (scans and copies), must stay within a constant per byte fed - never a function of the
length of the line a piece continues. Counting bytes instead of timing makes the bound hold on a
loaded machine.

A seeded generator, not Hypothesis: 10,000 cases run in a few seconds. `RELIABILITY_SECONDS`
runs 100,000; `SSE_READER_FUZZ_SEED` replays another seed.
"""

from __future__ import annotations

import os
import random

import pytest

from ssekd.bindings.sse.reader import Event, EventReader, Retry, UpstreamError
from tests.support.faults import sized
from tests.support.scanning import count_scans

CASES = sized(10_000, 100_000)
SEED = int(os.environ.get("SSE_READER_FUZZ_SEED", "20261123"))
#: Bytes scanned for line ends per byte fed, at most: each byte once.
MAX_SCANNED_PER_BYTE = 1.0
#: The reader's whole work (scan, copies into and out of the line buffer, the UTF-8 check of
#: the line) per byte fed, at most.
MAX_WORK_PER_BYTE = 4.0

EOLS = (b"\n", b"\r\n", b"\r")
NAMES = (b"data", b"id", b"event", b"retry", b"", b"foo", b"data ", b"DATA")


def _value(rng: random.Random) -> bytes:
    roll = rng.random()
    if roll < 0.003:
        return rng.randbytes(rng.randrange(1, 12))  # often not UTF-8
    if roll < 0.08:
        return "é€😀\u2028".encode()  # UTF-8 beyond ASCII, cut by the pieces
    if roll < 0.09:
        return b"x" * rng.randrange(200, 20_000)  # a long line
    if roll < 0.25:
        return str(rng.randrange(0, 10**6)).encode()
    if roll < 0.27:
        return b"\xef\xbb\xbf" + b"a\x00b"  # a BOM that is not at the start, a NUL
    alphabet = b"abc :\t{}\"=,"
    return bytes(rng.choice(alphabet) for _ in range(rng.randrange(0, 30)))


def document(rng: random.Random) -> bytes:
    """Lines of SSE-ish text with every kind of line end, comments, BOMs, odd fields, the odd
    byte that is not UTF-8 and the odd long line; sometimes unfinished at the end."""
    parts: list[bytes] = []
    if rng.random() < 0.1:
        parts.append(b"\xef\xbb\xbf")
    for _ in range(rng.randrange(0, 40)):
        roll = rng.random()
        if roll < 0.15:
            line = b""
        elif roll < 0.25:
            line = b":" + _value(rng)
        else:
            name = rng.choice(NAMES)
            line = name + (b":" if rng.random() < 0.9 else b"") + \
                (b" " if rng.random() < 0.5 else b"") + _value(rng)
        parts.append(line + rng.choice(EOLS))
    if rng.random() < 0.2:
        parts.append(b"data:" + _value(rng))  # no end: held, never delivered
    return b"".join(parts)


def pieces(rng: random.Random, data: bytes) -> list[bytes]:
    """`data` cut at random places: a few cuts, many, or a drip of single bytes for a stretch."""
    if not data:
        return [b""]
    style = rng.random()
    if style < 0.3:
        cuts = sorted(rng.sample(range(1, len(data)), min(len(data) - 1, rng.randrange(1, 8))))
    elif style < 0.6:
        cuts = sorted(rng.sample(range(1, len(data)), min(len(data) - 1,
                                                          rng.randrange(1, len(data) // 2 + 2))))
    else:  # one piece, then one byte at a time for a while, then the rest
        a = rng.randrange(0, len(data))
        b = min(len(data), a + rng.randrange(1, 3000))
        cuts = [a, *range(a + 1, b), b] if a else list(range(1, b)) + [b]
    bounds = [0, *(c for c in cuts if 0 < c < len(data)), len(data)]
    return [data[x:y] for x, y in zip(bounds, bounds[1:], strict=False) if y > x]


Outcome = tuple[list[Event | Retry], str | None]


def read(chunks: list[bytes], max_line: int, max_event: int
         ) -> tuple[Outcome, EventReader, int]:
    """What the reader made of `chunks`, the reader, and the bytes it was fed (up to the piece
    that ended the read)."""
    reader = EventReader(max_line=max_line, max_event=max_event)
    out: list[Event | Retry] = []
    fed = 0
    try:
        for chunk in chunks:
            fed += len(chunk)
            out += reader.feed(chunk)
    except UpstreamError as e:
        return (out, str(e)), reader, fed
    return (out, None), reader, fed


@pytest.mark.timeout(600)
def test_random_documents_cut_at_random_places(monkeypatch: pytest.MonkeyPatch) -> None:
    scans = count_scans(monkeypatch)
    rng = random.Random(SEED)
    fed = scanned = work = 0
    worst = 0.0
    outcomes = {"events": 0, "errors": 0, "drips": 0}
    for case in range(CASES):
        data = document(rng)
        max_line = rng.choice((1024, 16 * 1024, 1024 * 1024, 1024 * 1024))
        max_event = rng.choice((4 * 1024, 64 * 1024, 4 * 1024 * 1024, 4 * 1024 * 1024))
        (whole_events, whole_error), _, _ = read([data], max_line, max_event)
        chunks = pieces(rng, data)
        before = scans.scanned
        (events, error), reader, consumed = read(chunks, max_line, max_event)
        case_scanned = scans.scanned - before
        context = f"case {case} (seed {SEED}): {len(data)} bytes in {len(chunks)} pieces"
        assert error == whole_error, context
        if error is None:
            assert events == whole_events, context
            outcomes["events"] += len(events)
        else:
            # pieces may deliver events the whole read never returned (it raised first); those
            # it did deliver are the same, in order, as far as they go
            assert events[:len(whole_events)] == whole_events, context
            outcomes["errors"] += 1
        outcomes["drips"] += sum(len(c) == 1 for c in chunks) > 100
        assert case_scanned <= MAX_SCANNED_PER_BYTE * consumed, context
        assert reader.work <= MAX_WORK_PER_BYTE * consumed, context
        fed += consumed
        scanned += case_scanned
        work += reader.work
        if consumed:
            worst = max(worst, reader.work / consumed)
    print(f"\n{CASES} cases, {fed} bytes fed: {scanned / fed:.2f} bytes scanned and "
          f"{work / fed:.2f} bytes of work per byte (worst case {worst:.2f}); {outcomes}")
    assert outcomes["errors"] and outcomes["events"] and outcomes["drips"], \
        "the generator covers errors, events and drips"
