"""Waiting for a catalog that cannot answer yet (a schema registry down or slow), and the
answer of a refused request.

A request whose schema is not held yet is not refused at once: the catalog is waited for at
most `WAIT_SECONDS` (without blocking the reactor), then the answer is `503` with `Retry-After`.
A refusal's body is a line saying which part failed and why, never the value itself.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from twisted.internet.defer import Deferred

from ssekd.bindings.http.validation.requests import Refused
from ssekd.bindings.http.validation.values import RETRY_AFTER
from ssekd.catalogs.models import Pending

#: Seconds a request waits for a catalog that has not answered yet, before its `503`.
WAIT_SECONDS = 5.0


def settle(check: Callable[[], None], clock: Any,
           wait: float = WAIT_SECONDS) -> Refused | None | Deferred[Refused | None]:
    """Run `check`: None when it passes, the `Refused` it raises, or - when a schema is not
    held yet (`Pending`) - a Deferred firing with either once the catalog answered (tried
    again each time it does), or with a `503` after `wait` seconds."""
    try:
        check()
        return None
    except Refused as refused:
        return refused
    except Pending as pending:
        first = pending
    deadline = clock.seconds() + wait
    result: Deferred[Refused | None] = Deferred()

    def unavailable(why: str) -> Refused:
        return Refused(503, f"the schema is not available yet ({why})", RETRY_AFTER)

    def attempt(pending: Pending) -> None:
        left = deadline - clock.seconds()
        if left <= 0:
            result.callback(unavailable(str(pending)))
            return
        woken: Deferred[None] = Deferred()

        def wake(_: object = None) -> None:
            if not woken.called:
                woken.callback(None)
        timer = clock.callLater(left, wake)
        pending.ready.addBoth(wake)

        def again(_: object) -> None:
            if timer.active():
                timer.cancel()
            try:
                check()
            except Refused as refused:
                result.callback(refused)
                return
            except Pending as later:
                if clock.seconds() >= deadline:
                    result.callback(unavailable(str(later)))
                else:
                    attempt(later)
                return
            result.callback(None)
        woken.addCallback(again)

    attempt(first)
    if result.called:  # the catalog answered at once (a registry id fetched before, say)
        now: list[Refused | None] = []
        result.addCallback(now.append)
        return now[0]
    return result


def refusal_body(refused: Refused) -> bytes:
    """The text of a refusal's body: what failed and why (never a value of the request)."""
    return f"{refused.reason}\n".encode()


def retry_after(refused: Refused) -> bytes:
    return str(math.ceil(refused.retry_after or RETRY_AFTER)).encode()
