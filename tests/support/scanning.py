"""Counting the work of the sse client's reader without a clock.

`CountingEol` stands in for the reader's line-end pattern and adds up the bytes each search is
asked to scan. How a reader uses its pattern is then visible from outside: a reader that scans
only what a read brings asks for `len(data)` per read, one that rescans the unfinished line asks
for the whole line each time. Bytes, not seconds: the bound holds on a loaded machine too.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from ssekd.bindings.sse import reader


class CountingEol:
    """The reader's `_EOL`, counting the bytes its searches cover."""

    def __init__(self, pattern: re.Pattern[bytes]) -> None:
        self.pattern = pattern
        self.scanned = 0

    def finditer(self, string: bytes, pos: int = 0, endpos: int | None = None
                 ) -> Iterator[re.Match[bytes]]:
        end = len(string) if endpos is None else min(endpos, len(string))
        self.scanned += max(0, end - pos)
        return self.pattern.finditer(string, pos, end)


def count_scans(monkeypatch: pytest.MonkeyPatch) -> CountingEol:
    """Replace the reader's pattern with a counting one for this test."""
    counting = CountingEol(reader._EOL)
    monkeypatch.setattr(reader, "_EOL", counting)
    return counting
