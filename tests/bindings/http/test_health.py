"""`options.health` of the http binding: the probes answer on their paths, before routing, CORS
and the request events, with 200/503 and a small JSON body; other paths and methods go on to the
routes."""

from __future__ import annotations

import json

from twisted.internet.testing import MemoryReactorClock

from ssekd.bindings.http.channel import Limits
from ssekd.bindings.http.cors import AccessControl
from ssekd.bindings.http.health import HealthPaths
from ssekd.bindings.http.server import HttpRoot, HttpSite
from ssekd.health import Check, Health
from ssekd.telemetry.events import EventLog
from tests.support.http_fakes import GetOnly, http11


def response(site: HttpSite, request: bytes) -> tuple[int, bytes, bytes]:
    proto, transport = http11(site)
    proto.dataReceived(request)
    head, _, body = transport.value().partition(b"\r\n\r\n")
    return int(head.split()[1]), head, body


def test_probes_on_the_configured_paths_before_routing() -> None:
    clock = MemoryReactorClock()
    health = Health(clock)
    waiting = [Check("cache/boot", False, "loading")]
    health.checks = lambda: waiting
    paths = HealthPaths.from_options({"liveness": "/livez", "readiness": "/readyz",
                                      "details": True}, health)
    exit = GetOnly()
    events = EventLog("test")
    root = HttpRoot("http0", [], exit, AccessControl(), events, health=paths)
    site = HttpSite(root, Limits(), clock)

    def get(path: str, method: str = "GET", extra: str = "") -> tuple[int, bytes, bytes]:
        return response(site, f"{method} {path} HTTP/1.1\r\nHost: x\r\n{extra}"
                              f"Connection: close\r\n\r\n".encode())

    status, head, body = get("/livez")
    assert status == 200 and b"application/json" in head
    assert json.loads(body) == {"status": "live", "lag_ms": 0.0}
    status, _, body = get("/readyz", extra="Origin: http://elsewhere.example\r\n")
    assert status == 503  # not a 403: probes come before CORS
    assert json.loads(body) == {"status": "not ready",
                                                   "waiting": {"cache/boot": "loading"}}
    waiting[:] = [Check("cache/boot", True, "loaded")]
    assert get("/readyz")[0] == 200
    health.draining = True
    status, _, body = get("/readyz")
    assert status == 503 and json.loads(body) == {"status": "draining"}
    assert exit.rendered == []  # none of the probes reached the exit
    # the default paths are not probes when others are configured; POST is never a probe
    assert get("/health/ready")[0] == 200 and get("/livez", "POST")[0] == 405
    assert exit.rendered == [b"GET", b"POST"]


def test_default_paths_and_none_without_the_option() -> None:
    health = Health(MemoryReactorClock())
    assert HealthPaths.from_options(None, health) is None
    paths = HealthPaths.from_options({}, health)
    assert paths is not None
    assert (paths.liveness, paths.readiness) == (b"/health/live", b"/health/ready")


def test_readiness_tells_its_status_only_unless_details_are_asked_for() -> None:
    """Readiness told anyone on the public port the binding names, topics and broker state
    (`{"waiting":{"caches":"no Kafka broker reachable",...}}`)."""
    clock = MemoryReactorClock()
    health = Health(clock)
    waiting = [Check("south_kafka_cache_server", False, "no Kafka broker reachable"),
               Check("south_kafka_cache_server/secret-topic", False, "loading")]
    health.checks = lambda: waiting

    def ready(options: dict[str, object]) -> tuple[int, bytes]:
        paths = HealthPaths.from_options(options, health)
        root = HttpRoot("http0", [], GetOnly(), AccessControl(), EventLog("test"), health=paths)
        status, _, body = response(HttpSite(root, Limits(), clock),
                                   b"GET /health/ready HTTP/1.1\r\nHost: x\r\n"
                                   b"Connection: close\r\n\r\n")
        return status, body

    status, body = ready({})
    assert status == 503 and json.loads(body) == {"status": "not ready"}
    assert b"south" not in body and b"secret-topic" not in body and b"Kafka" not in body
    status, body = ready({"details": True})
    assert status == 503 and json.loads(body)["waiting"] == {
        "south_kafka_cache_server": "no Kafka broker reachable",
        "south_kafka_cache_server/secret-topic": "loading"}
    health.draining = True
    assert json.loads(ready({})[1]) == {"status": "draining"}
