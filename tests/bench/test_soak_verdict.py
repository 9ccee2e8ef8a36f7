"""The day-in-an-hour soak's verdict (bench/soak.py): it passes only when every stream ends at
its key's last value with nothing missing, twice or out of order, no interval with writes went
without a delivery, and the memory stayed flat once the cache was full."""

from __future__ import annotations

from bench.soak import FLAT_MIB_PER_HOUR, slope_mib_per_hour, verdict


def test_a_clean_run_passes() -> None:
    assert verdict(20_000, 20_000, 0, [], 0.4) == []


def test_each_way_to_fail_is_named() -> None:
    failed = verdict(20_000, 19_998, 3, [17.0, 18.0], FLAT_MIB_PER_HOUR + 0.1)
    assert len(failed) == 4
    assert "2 of 20,000 streams" in failed[0]
    assert "3 events" in failed[1]
    assert "[17.0, 18.0]" in failed[2]
    assert "MiB/hour" in failed[3]
    assert verdict(10, 10, 0, [], None) == \
        ["too few RSS samples after the cache was full to tell its slope"]


def test_the_slope_is_in_mib_per_hour() -> None:
    mib = 2**20
    growing = [(t, 600 * mib + t * mib // 60) for t in range(0, 600, 5)]  # 1 MiB a minute
    assert round(slope_mib_per_hour(growing) or 0, 3) == 60.0
    assert slope_mib_per_hour([(t, 600 * mib) for t in range(0, 600, 5)]) == 0.0
    assert slope_mib_per_hour([(0, 1), (5, 2)]) is None
