"""Liveness and readiness of one ssekd process, for load balancers and orchestrators.

Liveness answers "is the reactor turning": the answer is written by the reactor, so a daemon
whose reactor is stuck gives none and the probe times out; the body also says how late the last
heartbeat ran, which shows a reactor that turns but slowly. A worker also fails it once its
parent has stopped checking on it (`ssekd.heartbeats`): the parent finds a stuck worker, and
this is how a stuck parent is found.

Readiness answers "is a new client sent here now served correctly": not while draining (after
SIGTERM, see `ssekd.tap`), and not before every Kafka cache has loaded its bootstrap topics to
their end once (a new client would get an incomplete history). It does not fail for an outage
every daemon sees alike - Kafka, a JWKS endpoint, a schema registry: failing there would take
every daemon out of the balancer at once, and the balancer's own 5xx ends each browser's
EventSource for good, whereas a daemon keeps its streams open and answers new ones `200`.

Both are for machines, not browsers: a plain `503` is the right refusal here (the SSE rule of
answering temporary refusals with a `retry:` stream is for EventSource clients).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from twisted.internet.task import LoopingCall

#: Seconds between the reactor heartbeats that measure its lateness.
HEARTBEAT = 1.0


@dataclass(frozen=True)
class Check:
    """What one part of the daemon says about being ready."""

    name: str
    ready: bool
    detail: str


class Health:
    """The state both health answers read. One per process, owned by the engine."""

    def __init__(self, reactor: Any) -> None:
        self.reactor = reactor
        #: Set on SIGTERM when `engine.drain` is above 0: readiness is 503 from then on.
        self.draining = False
        #: Collects the readiness checks of the running graph (the engine sets it).
        self.checks: Callable[[], Iterable[Check]] = lambda: ()
        self._beat = LoopingCall(self._tick)
        self._beat.clock = reactor
        self._last = 0.0  # set at start: `ssekd check` builds an engine on no real reactor
        #: Seconds the last heartbeat ran behind its schedule.
        self.lag = 0.0
        #: A worker's: seconds its parent may go without checking on it (`ssekd.heartbeats`)
        #: before liveness fails; None for a process without a parent.
        self.supervisor_timeout: float | None = None
        self._supervised_at: float | None = None

    def supervised(self) -> None:
        """The parent checked on this worker (its heartbeat)."""
        self._supervised_at = self.reactor.seconds()

    def start(self) -> None:
        if not self._beat.running:
            self._last = self.reactor.seconds()
            self._beat.start(HEARTBEAT, now=False)

    def stop(self) -> None:
        if self._beat.running:
            self._beat.stop()

    def _tick(self) -> None:
        now = self.reactor.seconds()
        self.lag = max(0.0, now - self._last - HEARTBEAT)
        self._last = now

    def liveness(self) -> tuple[bool, dict[str, object]]:
        """Live while the reactor turns (the answer is its doing). A worker whose parent has
        stopped checking on it is not: its supervisor is stuck, and nothing would restart a
        worker that fails, so the orchestrator should restart the daemon."""
        lag = round(self.lag * 1000.0, 1)
        timeout, seen = self.supervisor_timeout, self._supervised_at
        if timeout is not None and seen is not None:
            silent = self.reactor.seconds() - seen
            if silent > timeout:
                return False, {"status": "unsupervised", "lag_ms": lag,
                               "supervisor_silent_s": round(silent, 1)}
        return True, {"status": "live", "lag_ms": lag}

    def readiness(self) -> tuple[bool, dict[str, object]]:
        checks = list(self.checks())
        failing = {c.name: c.detail for c in checks if not c.ready}
        if self.draining:
            return False, {"status": "draining"}
        if failing:
            return False, {"status": "not ready", "waiting": failing}
        return True, {"status": "ready"}
