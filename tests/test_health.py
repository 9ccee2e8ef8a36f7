"""The process health state on an injected clock: liveness reports how late the reactor's
heartbeat ran, readiness waits for every check and turns 503 for good once draining."""

from __future__ import annotations

from types import SimpleNamespace

from twisted.internet.testing import MemoryReactorClock

from ssekd.bindings.kafka.cache import CacheServer
from ssekd.health import Check, Health
from ssekd.telemetry.events import EventLog


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


def test_a_broker_lost_after_the_first_load_leaves_the_cache_ready() -> None:
    """Readiness fails for Kafka only until the bootstrap topics were loaded once: an outage
    after that is one every daemon sees alike, and failing readiness for it would take every
    daemon out of the balancer at the same moment (whose 5xx ends each EventSource for good)."""
    clock = MemoryReactorClock()
    tail = SimpleNamespace(connected=None)
    client = SimpleNamespace(tails={"cache": tail}, consume=lambda *a, **kw: None)
    server = CacheServer(clock, client, "cache", EventLog("t"),  # type: ignore[arg-type]
                         bootstrap=("boot",))
    server.startService()
    tail.connected = False  # no broker at start: not loaded yet, and the detail says why
    assert list(server.readiness()) == [
        Check("cache/boot", False, "loading (no Kafka broker reachable)")]
    tail.connected = True
    cache = server.topics["boot"]
    cache.on_metadata(2, False)
    cache.on_end(0, 0)
    assert list(server.readiness()) == [Check("cache/boot", False, "loading")]
    cache.on_end(1, 0)
    assert list(server.readiness()) == [Check("cache/boot", True, "loaded")]
    tail.connected = False  # the broker goes away after the load: still ready
    assert list(server.readiness()) == [Check("cache/boot", True, "loaded")]
    health = Health(clock)
    health.checks = lambda: list(server.readiness())
    assert health.readiness() == (True, {"status": "ready"})
    server.stopService()


def test_a_cache_without_bootstrap_topics_is_ready_with_or_without_a_broker() -> None:
    clock = MemoryReactorClock()
    tail = SimpleNamespace(connected=False)
    client = SimpleNamespace(tails={"cache": tail}, consume=lambda *a, **kw: None)
    server = CacheServer(clock, client, "cache", EventLog("t"))  # type: ignore[arg-type]
    assert all(c.ready for c in server.readiness())
