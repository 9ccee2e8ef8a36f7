"""sharedStream's handover logic in node, with fakes for Web Locks and the server
(tests/data/client/tabs_handover.mjs): five "tabs" share one connection, tabs that join late
get the history from the leader, and after the leader closes while records arrive a survivor
resumes from the last id it saw and every survivor has every record once, in order. The fake
server can resume a few records early (as a new leader behind the others would see): the
repeats are dropped by id; the catch-up signal, which has no id of its own, is not. The real
browser and daemon: tests/e2e/client/test_tabs.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.node import run_node

TABS = Path(__file__).resolve().parents[1] / "www" / "ssekd-client" / "tabs.js"


def run(overlap: int) -> dict[str, Any]:
    return dict(json.loads(run_node("tabs_handover.mjs", str(TABS), str(overlap))))


@pytest.mark.parametrize("overlap", [0, 3])
def test_one_connection_and_a_handover_with_nothing_lost_or_twice(overlap: int) -> None:
    result = run(overlap)
    records, before, after = result["records"], result["before"], result["after"]
    assert before["connections"] == 1
    assert before["leading"] == [True, False, False, False, False]
    assert all(got == records[:20] for got in before["got"])  # late joiners got the history
    # the catch-up signal (no id of its own: it repeats the id before it) reaches every tab,
    # the late joiners too, and is not taken for a repeat of record 9
    assert before["caughtUp"] == [["9"]] * 5
    assert len(records) == 45
    # the second connection is the new leader's, from the last id the tabs had when it took over
    assert len(result["froms"]) == 2 and result["froms"][0] == -1
    assert 19 <= result["froms"][1] < 45
    assert after["connections"] == 1 and after["leading"].count(True) == 1
    assert all(got == records for got in after["got"]), after["got"]
    # the new leader's connection sends it again after its own catch-up
    for signals in after["caughtUp"]:
        assert signals[0] == "9" and len(signals) == 2, after["caughtUp"]
        assert int(signals[1]) >= result["froms"][1]
    assert after["states"] == ["open"] * 4
    assert result["left"] == 0  # closing every tab closes the connection
