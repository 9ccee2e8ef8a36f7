"""`options.health` of an http server (an ssekd addition): the liveness and readiness paths a
load balancer or an orchestrator probes on the same port as the traffic it balances.

They are answered before CORS, routing, guards, metrics and the request events: a probe every
second or two from each balancer would otherwise drown what those are for. Only GET and HEAD
match; any other method goes on to the routes like any request.

They answer on the public port, to anyone: readiness says its status only (`ready`, `not ready`,
`draining`). What it waits for names bindings, topics and the broker's state, which is the
operator's business: `details: true` adds it (`waiting`), for a port only the balancer reaches.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from twisted.web import http
from twisted.web.server import Request

from ssekd.health import Health

DEFAULT_LIVENESS = "/health/live"
DEFAULT_READINESS = "/health/ready"

SCHEMA = {"type": "object", "additionalProperties": False, "x-ssekd-addition": True,
          "description": "Health endpoints for load balancers and orchestrators, answered "
                         "before routing: `200` or `503` with a small JSON body.",
          "properties": {
    "liveness": {"type": "string", "pattern": "^/", "default": DEFAULT_LIVENESS,
                 "description": "Path answering `200` while the reactor turns (a stuck "
                                "daemon gives no answer at all)."},
    "readiness": {"type": "string", "pattern": "^/", "default": DEFAULT_READINESS,
                  "description": "Path answering `200` once every Kafka cache has loaded "
                                 "its bootstrap topics once, `503` before, and `503` from "
                                 "SIGTERM on while the daemon drains. A Kafka outage later "
                                 "does not make it fail (every daemon sees it alike)."},
    "details": {"type": "boolean", "default": False,
                "description": "Whether readiness's body says what it waits for (`waiting`: "
                               "binding and topic names, the broker's state). Off, the body is "
                               "the status alone: the probes answer anyone who reaches the "
                               "port. Turn it on where only your balancer or orchestrator can."},
}}


@dataclass(frozen=True)
class HealthPaths:
    """The two paths and the process state they report."""

    liveness: bytes
    readiness: bytes
    health: Health
    #: Whether readiness's body names what it waits for (`details`).
    details: bool = False

    @classmethod
    def from_options(cls, options: dict[str, Any] | None, health: Health) -> HealthPaths | None:
        if options is None:
            return None
        return cls(str(options.get("liveness", DEFAULT_LIVENESS)).encode(),
                   str(options.get("readiness", DEFAULT_READINESS)).encode(), health,
                   bool(options.get("details", False)))

    def answer(self, request: Request) -> bytes | None:
        """The response body when `request` is a probe (its code and headers set), else None."""
        req: Any = request  # twisted.web is untyped for mypy
        if req.method not in (b"GET", b"HEAD"):
            return None
        if req.path == self.liveness:
            ok, body = self.health.liveness()
        elif req.path == self.readiness:
            ok, body = self.health.readiness()
            if not self.details:
                body = {"status": body.get("status")}
        else:
            return None
        req.setResponseCode(http.OK if ok else http.SERVICE_UNAVAILABLE)
        req.setHeader(b"content-type", b"application/json")
        req.setHeader(b"cache-control", b"no-store")
        return json.dumps(body, separators=(",", ":")).encode() + b"\n"
