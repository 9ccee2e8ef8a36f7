"""The process health state on an injected clock: liveness reports how late the reactor's
heartbeat ran, readiness waits for every check and turns 503 for good once draining."""

from __future__ import annotations

from twisted.internet.testing import MemoryReactorClock

from ssekd.health import Check, Health


def test_liveness_reports_a_late_heartbeat() -> None:
    clock = MemoryReactorClock()
    health = Health(clock)
    health.start()
    clock.advance(1.0)
    assert health.liveness() == (True, {"status": "live", "lag_ms": 0.0})
    clock.advance(3.5)  # the reactor was busy: the next beat ran 2.5 s late
    assert health.liveness() == (True, {"status": "live", "lag_ms": 2500.0})
    health.stop()
    assert not clock.getDelayedCalls()


def test_readiness_needs_every_check_and_draining_wins() -> None:
    health = Health(MemoryReactorClock())
    assert health.readiness() == (True, {"status": "ready"})
    checks = [Check("a", True, "loaded"), Check("b", False, "no broker")]
    health.checks = lambda: checks
    assert health.readiness() == (False, {"status": "not ready", "waiting": {"b": "no broker"}})
    checks.pop()
    assert health.readiness() == (True, {"status": "ready"})
    health.draining = True
    assert health.readiness() == (False, {"status": "draining"})
