"""Being told when a request is over, without a Deferred per party.

`Request.notifyFinish` makes a Deferred per caller; with the callbacks added to it that is
about 500 bytes (the Deferred, its callback list, the callback tuples, a kwargs dict, a bound
method). Every stream had two, the http metrics' and the stream's own: a seventh of what an
idle stream held (bench/idle_memory.py). Our requests (`SsekdRequest`) keep their watchers in
a tuple instead and call them where Twisted fires the Deferreds (`when_over`); any other
request (tests' `DummyRequest`, another factory's) still goes through `notifyFinish`.
"""

from __future__ import annotations

from typing import Any, Protocol


class RequestWatcher(Protocol):
    """Someone who wants to know when a request is over."""

    def request_over(self, request: Any, result: Any) -> None:
        """`request` is over: `result` is None when it finished, the Failure when its
        connection went away first (what `notifyFinish`'s Deferred would have fired with)."""


def when_over(request: Any, watcher: RequestWatcher) -> None:
    """Call `watcher.request_over(request, result)` once `request` is over: finished, or its
    connection lost. Watchers are told in the order they asked."""
    watch = getattr(request, "watch_end", None)
    if watch is not None:
        watch(watcher)
        return
    request.notifyFinish().addBoth(lambda result: watcher.request_over(request, result))
