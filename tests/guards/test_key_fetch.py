"""The fetches of a JWKS and of a schema registry, against real local servers that misbehave:
a server that drips its answer a byte at a time is given up at an overall deadline (a per-read
timeout let it hold the fetch, every request naming an unknown kid and the `keys-refresh` timer
for ever), a redirect that leaves https (or goes to `ftp:`, `file:`) is refused, and a symmetric
key (`kty: oct`, an HMAC secret) in a fetched key set is never used.

The deadline is made short for the drip tests (the modules' `FETCH_DEADLINE`, and the per-read
`FETCH_TIMEOUT` the old fetch had, both 0.5 s); the servers drip a byte every 0.1 s, so only an
overall deadline gives up before the answer is complete. The other tests keep a long one: a TLS
handshake on a loaded machine can take longer than 0.5 s, and they are not about time. The
tests assert what the fetch returned and how much of the answer the server got to send, not how
long anything took."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jwt as pyjwt
import pytest
from twisted.internet import defer
from twisted.internet.testing import MemoryReactorClock

from ssekd.catalogs import registry
from ssekd.guards import jwt as guard_module
from ssekd.guards.jwt import JwtGuard, parse_jwks
from ssekd.spi.guard import Refusal
from ssekd.telemetry.events import EventLog
from tests.support.hostile_http import (
    HostileServer,
    document,
    drip,
    drip_head,
    redirect,
    wait_for,
)
from tests.support.jwt import b64url, rsa_key
from tests.support.pki import PASSWORD, Pki
from tests.support.scripted_upstream import server_context

SHORT = 0.5
LONG = 20.0
EVERY = 0.1

SIGNING = rsa_key("good")
ATTACKER = rsa_key("good")  # the same kid, the attacker's key
JWKS = json.dumps({"keys": [SIGNING.jwk]}).encode()
EVIL_JWKS = json.dumps({"keys": [ATTACKER.jwk]}).encode()
REGISTRY_ANSWER = json.dumps({"subject": "s", "id": 1, "version": 1,
                              "schema": '{"type": "string"}'}).encode()


def _deadline(monkeypatch: pytest.MonkeyPatch, seconds: float) -> None:
    for module in (guard_module, registry):
        monkeypatch.setattr(module, "FETCH_DEADLINE", seconds, raising=False)
        monkeypatch.setattr(module, "FETCH_TIMEOUT", seconds, raising=False)


@pytest.fixture(autouse=True)
def long_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    _deadline(monkeypatch, LONG)


@pytest.fixture
def short_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    _deadline(monkeypatch, SHORT)


@pytest.fixture
def servers() -> Iterator[list[HostileServer]]:
    started: list[HostileServer] = []
    yield started
    for s in started:
        s.close()


@pytest.fixture
def stop() -> Iterator[threading.Event]:
    event = threading.Event()
    yield event
    event.set()


def _head(body: bytes) -> bytes:
    return (f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()


FETCHES: dict[str, tuple[Callable[[str], Any], bytes]] = {
    "jwks": (lambda url: guard_module.fetch_url(url), JWKS),
    "registry": (lambda url: registry.get_url(url), REGISTRY_ANSWER),
}


@pytest.mark.parametrize("which", FETCHES)
@pytest.mark.parametrize("where", ["body", "head"])
@pytest.mark.usefixtures("short_deadline")
def test_an_answer_dripped_a_byte_at_a_time_is_given_up_at_the_deadline(
        servers: list[HostileServer], stop: threading.Event, which: str, where: str) -> None:
    fetch, body = FETCHES[which]
    body = body[:60]  # 6 s at a byte per 0.1 s: far past the deadline, each read well within it
    sent: list[int] = []
    answer = drip(_head(body), body, EVERY, stop, sent) if where == "body" \
        else drip_head(_head(body) + body, EVERY, stop, sent)
    server = HostileServer(answer)
    servers.append(server)
    with pytest.raises(OSError, match="no complete answer within 0.5 s"):
        fetch(server.url())
    total = len(body) if where == "body" else len(_head(body)) + len(body)
    assert wait_for(sent) < total, "the fetch left before the answer was complete"


@pytest.fixture
def https_server(pki: Pki, tmp_path: Path, servers: list[HostileServer],
                 monkeypatch: pytest.MonkeyPatch) -> Callable[[Any], HostileServer]:
    """An https server trusted through `SSL_CERT_FILE` (the fetches use the system's CAs)."""
    monkeypatch.setenv("SSL_CERT_FILE", str(pki.ca_pem))
    context = server_context(pki.keys, PASSWORD, tmp_path)

    def start(answer: Any) -> HostileServer:
        server = HostileServer(answer, tls=context)
        servers.append(server)
        return server
    return start


@pytest.mark.parametrize("which", FETCHES)
def test_a_redirect_from_https_to_http_is_refused(
        https_server: Callable[[Any], HostileServer], servers: list[HostileServer],
        which: str) -> None:
    """A key set asked for over TLS must not come from a cleartext hop: whoever can answer on
    the path could hand the daemon their own key for a kid the guard trusts."""
    fetch, _ = FETCHES[which]
    evil = HostileServer(document(EVIL_JWKS if which == "jwks" else REGISTRY_ANSWER))
    servers.append(evil)
    origin = https_server(redirect(evil.url()))
    with pytest.raises(OSError, match="refused a redirect from https to http"):
        fetch(origin.url())
    assert evil.requests == [], "the cleartext server was never asked"


@pytest.mark.parametrize("which", FETCHES)
@pytest.mark.parametrize("target", ["ftp://127.0.0.1:1/jwks.json", "file:///etc/passwd",
                                    "data:application/json,%7B%22keys%22%3A%5B%5D%7D"])
def test_a_redirect_to_another_scheme_is_refused(servers: list[HostileServer], which: str,
                                                 target: str) -> None:
    fetch, _ = FETCHES[which]
    origin = HostileServer(redirect(target))
    servers.append(origin)
    with pytest.raises(OSError, match="refused a redirect to a"):
        fetch(origin.url())


def test_redirects_that_stay_on_https_or_go_up_to_it_are_followed(
        https_server: Callable[[Any], HostileServer], servers: list[HostileServer]) -> None:
    final = https_server(document(JWKS))
    hop = https_server(redirect(final.url(), 307))
    assert guard_module.fetch_url(hop.url()) == JWKS
    upgrade = HostileServer(redirect(final.url(), 301))
    servers.append(upgrade)
    assert guard_module.fetch_url(upgrade.url()) == JWKS


def _hs256(secret: bytes, kid: str) -> str:
    return pyjwt.encode({"sub": "mallory", "exp": 1_900_000_000}, secret, algorithm="HS256",
                        headers={"kid": kid})


def test_a_symmetric_key_in_a_fetched_key_set_is_never_used() -> None:
    """An HMAC secret in a JWKS served at a URL is known to whoever served (or altered) the
    document: every token they sign with it would pass."""
    secret = b"s" * 32
    oct_key = {"kty": "oct", "kid": "hmac", "alg": "HS256", "k": b64url(secret)}
    keys, skipped = parse_jwks(json.dumps({"keys": [oct_key, SIGNING.jwk]}).encode())
    assert sorted(keys) == ["good"]
    assert any("symmetric key (kty oct) is not taken from a URL" in s for s in skipped)

    clock = MemoryReactorClock()
    clock.advance(1_800_000_000)
    events = EventLog("t")
    body = json.dumps({"keys": [oct_key, SIGNING.jwk]}).encode()
    guard = JwtGuard("jwt0", {"keys": "https://idp.example/jwks.json"}, clock, events,
                     fetch=lambda url: defer.succeed(body))
    guard.startService()
    answers: list[Any] = []
    defer.maybeDeferred(guard.verify, _hs256(secret, "hmac")).addBoth(answers.append)
    [verdict] = answers  # the fetch is already done: the unknown kid is answered at once
    assert isinstance(verdict, Refusal) and verdict.status == 403
    assert "unknown kid 'hmac'" in verdict.reason
    assert any("symmetric key" in line for line in events.recent)
    guard.stopService()
