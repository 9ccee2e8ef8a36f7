"""Waiting for a condition instead of sleeping for a fixed time."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(predicate: Callable[[], T], timeout: float = 10.0, interval: float = 0.05,
               what: str | Callable[[], str] = "") -> T:
    """Call `predicate` until it returns a true value and return that value; fail after `timeout`.

    `what` says what was awaited (or is called to describe the state at the deadline), so a
    failure explains itself.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            described = what() if callable(what) else what
            raise AssertionError(f"not within {timeout:g} s: {described or predicate}")
        time.sleep(interval)
