"""Tokens never reach a log line: the access event hides the values of the query parameters a
guard reads tokens from and anything shaped like a JWT (the demo page's own `/?token=eyJ…` was
printed in full), a failing deferred answer logs the URI the same way (it logged the raw URI),
and no event detail carries a JWT, whoever emits it."""

from __future__ import annotations

import io
from typing import Any

from twisted.internet import defer
from twisted.internet.testing import MemoryReactorClock
from twisted.logger import LogEvent, formatEvent, globalLogPublisher

from ssekd.bindings.http.authorization import Authorization, Credentials
from ssekd.bindings.http.channel import Limits
from ssekd.bindings.http.cors import AccessControl
from ssekd.bindings.http.roles import HttpContext
from ssekd.bindings.http.server import HttpRoot, HttpSite
from ssekd.spi.guard import Refusal
from ssekd.telemetry.events import EventLog
from ssekd.telemetry.redact import MASK, redact_uri
from tests.support.http_fakes import GetOnly, http11
from tests.support.jwt import rsa_key

TOKEN = rsa_key("k1").token(sub="alice")
OTHER = rsa_key("k2").token(sub="bob")


class PendingGuard:
    """A guard still fetching its keys: every verdict is a Deferred the test fires."""

    challenge = 0.0

    def __init__(self) -> None:
        self.pending: list[defer.Deferred[Any]] = []

    def verify(self, token: str) -> defer.Deferred[Any]:
        d: defer.Deferred[Any] = defer.Deferred()
        self.pending.append(d)
        return d

    def report(self, reason: str) -> None:
        pass


class Boom:
    """An exit that fails: what `answer_later` logs."""

    max_idle = None
    takes_body = False

    def render(self, request: Any, ctx: HttpContext) -> bytes:
        raise RuntimeError("boom")


def _root(exit: Any, guard: PendingGuard | None = None) -> tuple[HttpRoot, EventLog]:
    events = EventLog("test", stdout=io.StringIO())  # the access event needs a stdout exporter
    auth = None
    if guard is not None:
        auth = Authorization({"jwt0": guard}, {"jwt0": Credentials.from_options(
            {"query": {"access_token": "{credentials}"}})})
    return HttpRoot("http0", [], exit, AccessControl(), events, authorization=auth), events


def test_redact_uri_hides_named_parameters_and_jwt_shapes_anywhere() -> None:
    assert redact_uri(f"/?access_token={TOKEN}&x=1", {"access_token"}) == \
        f"/?access_token={MASK}&x=1"
    assert redact_uri("/?access_token=opaque-secret", {"access_token"}) == \
        f"/?access_token={MASK}"
    assert redact_uri(f"/?token={TOKEN}") == f"/?token={MASK}"
    assert redact_uri(f"/users/{TOKEN}/feed?a={OTHER}") == f"/users/{MASK}/feed?a={MASK}"
    assert redact_uri("/events?since=2026-01-01&lastEventId=AQQABAIC") == \
        "/events?since=2026-01-01&lastEventId=AQQABAIC"


def test_the_access_event_shows_no_token(monkeypatch: Any) -> None:
    root, events = _root(GetOnly(), PendingGuard())
    site = HttpSite(root, Limits(), MemoryReactorClock())
    proto, _ = http11(site)
    proto.dataReceived(f"GET /?token={TOKEN}&access_token={OTHER}&v=2 HTTP/1.1\r\n"
                       f"Host: x\r\n\r\n".encode())
    [line] = [line for line in events.recent if "BINDING_HTTP_REQUEST_ACCEPTED" in line]
    assert TOKEN not in line and OTHER not in line
    assert TOKEN[-20:] not in line and OTHER[-20:] not in line
    assert f"/?token={MASK}&access_token={MASK}&v=2" in line


def test_the_access_event_shows_no_token_without_any_guard() -> None:
    root, events = _root(GetOnly())
    site = HttpSite(root, Limits(), MemoryReactorClock())
    proto, _ = http11(site)
    proto.dataReceived(f"GET /?token={TOKEN} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    [line] = [line for line in events.recent if "BINDING_HTTP_REQUEST_ACCEPTED" in line]
    assert TOKEN not in line and f"/?token={MASK}" in line


def test_a_failing_deferred_answer_logs_the_uri_without_tokens() -> None:
    guard = PendingGuard()
    root, _ = _root(Boom(), guard)
    site = HttpSite(root, Limits(), MemoryReactorClock())
    proto, transport = http11(site)
    logged: list[LogEvent] = []
    globalLogPublisher.addObserver(logged.append)
    try:
        proto.dataReceived(f"GET /x?access_token={TOKEN}&token={OTHER} HTTP/1.1\r\n"
                           f"Host: x\r\n\r\n".encode())
        [pending] = guard.pending
        pending.callback(Refusal(403, "no"))  # the exit then raises: a 500, and a log line
    finally:
        globalLogPublisher.removeObserver(logged.append)
    assert transport.value().startswith(b"HTTP/1.1 500")
    failures = [e for e in logged if "answering" in str(e.get("log_format"))]
    assert failures, "the failure was logged"
    for event in failures:
        text = formatEvent(event) + repr(event.get("uri"))
        assert TOKEN not in text and OTHER not in text, text
        assert f"/x?access_token={MASK}&token={MASK}" in text


def test_no_event_detail_carries_a_jwt() -> None:
    events = EventLog("test")
    line = events.emit("b", "SOMETHING", f"GET https://upstream/feed?t={TOKEN} failed")
    assert TOKEN not in line and f"?t={MASK} failed" in line
