"""The jwt guard on its own, on an injected clock: what passes, every bad token refused with its
reason in the event (and never the token), and keys from a JWKS URL - fetched at start, retried
while down, refreshed on an unknown kid (rate limited) and on a timer."""

from __future__ import annotations

import json
from typing import Any

import pytest
from twisted.internet import defer
from twisted.internet.testing import MemoryReactorClock

from ssekd.guards.jwt import (
    FAILED,
    KID_REFRESH_INTERVAL,
    MAX_TOKEN_LENGTH,
    JwtGuard,
    JwtSession,
    Key,
    parse_jwk,
)
from ssekd.spi.guard import Refusal
from ssekd.telemetry.events import EventLog
from tests.support.jwt import (
    AUDIENCE,
    ISSUER,
    SigningKey,
    b64url,
    ec_key,
    ed_key,
    hs256_with_public_key,
    raw_token,
    rsa_key,
    tamper_header,
    tamper_payload,
)

NOW = 1_800_000_000.0
OPTIONS = {"issuer": ISSUER, "audience": AUDIENCE, "challenge": 3}


@pytest.fixture(scope="module")
def keys() -> dict[str, SigningKey]:
    return {"rsa": rsa_key(), "ec": ec_key(), "ed": ed_key()}


def _clock() -> MemoryReactorClock:
    clock = MemoryReactorClock()
    clock.advance(NOW)
    return clock


def _guard(signing: list[SigningKey], options: dict[str, Any] | None = None,
           **kw: Any) -> tuple[JwtGuard, EventLog, MemoryReactorClock]:
    clock, events = _clock(), EventLog("t", clock=lambda: NOW)
    held = {k.kid: parse_jwk(k.jwk) for k in signing}
    guard = JwtGuard("jwt0", {**OPTIONS, **(options or {})}, clock, events, keys=held, **kw)
    return guard, events, clock


@pytest.mark.parametrize("kind", ["rsa", "ec", "ed"])
def test_a_good_token_opens_a_session(keys: dict[str, SigningKey], kind: str) -> None:
    key = keys[kind]
    guard, events, _ = _guard(list(keys.values()))
    session = guard.verify(key.token(sub="alice", scope="read write", now=NOW, ttl=30))
    assert session == JwtSession("alice", frozenset({"read", "write"}), NOW + 30)
    assert list(events.recent) == []


def test_roles_as_a_list_and_claims_named_in_options(keys: dict[str, SigningKey]) -> None:
    guard, _, _ = _guard([keys["ec"]], {"roles": "roles", "identity": "email"})
    token = keys["ec"].token(now=NOW, scope=None, roles=["a", "b", 3], email="a@example.com")
    assert guard.verify(token) == JwtSession("a@example.com", frozenset({"a", "b"}), NOW + 60)


def _bad_tokens(keys: dict[str, SigningKey]) -> list[tuple[str, str, str]]:
    rsa, ec = keys["rsa"], keys["ec"]
    good = rsa.token(now=NOW)
    claims = {"iss": ISSUER, "aud": AUDIENCE, "sub": "alice", "exp": int(NOW + 60)}
    other = rsa_key("rsa1")  # same kid, another key: what a forger would hold
    return [
        ("expired", rsa.token(now=NOW - 120, ttl=60), "token expired (alice)"),
        ("expires now", rsa.token(now=NOW, ttl=0), "token expired (alice)"),
        ("not yet valid", rsa.token(now=NOW, nbf=int(NOW + 10)), "token not yet valid (nbf)"),
        ("wrong issuer", rsa.sign({**claims, "iss": "https://evil.test"}), "wrong issuer"),
        ("no issuer", rsa.sign({k: v for k, v in claims.items() if k != "iss"}),
         "missing iss claim"),
        ("wrong audience", rsa.sign({**claims, "aud": "someone-else"}), "wrong audience"),
        ("unknown kid", rsa_key("nobody").token(now=NOW), "unknown kid 'nobody'"),
        ("no kid", raw_token({"alg": "RS256"}, claims), "token names no kid"),
        ("alg none", raw_token({"alg": "none", "kid": "rsa1"}, claims, b""),
         "unsigned token (alg none) refused"),
        ("alg None", raw_token({"alg": "None", "kid": "rsa1"}, claims, b""),
         "unsigned token (alg none) refused"),
        ("hs256 with the public key", hs256_with_public_key(rsa, claims),
         "alg HS256 does not match key 'rsa1' (RS256)"),
        ("alg of another key type", tamper_header(good, alg="ES256"),
         "alg ES256 does not match key 'rsa1' (RS256)"),
        ("tampered payload", tamper_payload(good, sub="mallory"), "signature does not verify"),
        ("tampered header", tamper_header(good, typ="JOSE", extra=1), "signature does not verify"),
        ("signed by another key", other.token(now=NOW), "signature does not verify"),
        ("key of another kid", tamper_header(ec.token(now=NOW), kid="rsa1"),
         "alg ES256 does not match key 'rsa1' (RS256)"),
        ("missing exp", rsa.sign({k: v for k, v in claims.items() if k != "exp"}),
         "missing exp claim"),
        ("exp not a number", rsa.sign({**claims, "exp": "tomorrow"}), "exp is not a number"),
        ("over 8 KiB", rsa.token(now=NOW, pad="x" * MAX_TOKEN_LENGTH),
         f"token longer than {MAX_TOKEN_LENGTH} bytes"),
        ("garbage", "%%%not-base64%%%.@@@.!!!", "malformed token"),
        ("one segment", "abc", "malformed token"),
        ("header not json", f"{b64url(b'{nope')}.{b64url(b'{}')}.x", "malformed token"),
        ("payload a list, unsigned", raw_token({"alg": "RS256", "kid": "rsa1"}, [1, 2]),
         "signature does not verify"),
        ("payload a signed list", rsa.sign_bytes(b"[1, 2]"), "malformed token"),
        ("payload a signed string", rsa.sign_bytes(b'"alice"'), "malformed token"),
        ("payload not json", rsa.sign_bytes(b"\xff\xfe"), "malformed token"),
        ("header a string", f"{b64url(json.dumps('x').encode())}.{b64url(b'{}')}.x",
         "malformed token"),
    ]


def test_every_bad_token_is_refused_with_its_reason(keys: dict[str, SigningKey]) -> None:
    guard, events, _ = _guard([keys["rsa"], keys["ec"]])
    for name, token, reason in _bad_tokens(keys):
        events.recent.clear()
        verdict = guard.verify(token)
        assert isinstance(verdict, Refusal), name
        assert (verdict.status, verdict.reported) == (403, True), name
        assert verdict.reason.startswith(reason), (name, verdict.reason)
        [line] = events.recent
        assert f"{FAILED} {reason}" in line, (name, line)
        assert token not in line and token[-20:] not in line, name


def test_a_guard_without_issuer_or_audience_does_not_check_them(
        keys: dict[str, SigningKey]) -> None:
    guard, _, _ = _guard([keys["rsa"]], {"issuer": None, "audience": None})
    guard.issuer = guard.audience = None
    token = keys["rsa"].sign({"sub": "bob", "exp": NOW + 5, "aud": "x", "iss": "y"})
    loose = JwtGuard("j", {"challenge": 0}, _clock(), EventLog("t"),
                     keys={"rsa1": parse_jwk(keys["rsa"].jwk)})
    assert isinstance(loose.verify(token), JwtSession)


def test_expiry_follows_the_injected_clock(keys: dict[str, SigningKey]) -> None:
    guard, _, clock = _guard([keys["ed"]])
    token = keys["ed"].token(now=NOW, ttl=10)
    assert isinstance(guard.verify(token), JwtSession)
    clock.advance(9.5)
    assert isinstance(guard.verify(token), JwtSession)
    clock.advance(0.5)
    assert guard.verify(token) == Refusal(403, "token expired (alice)", reported=True)


# -- keys from a JWKS URL ----------------------------------------------------------------------

class Fetches:
    """The guard's `fetch`, answered by the test."""

    def __init__(self) -> None:
        self.calls: list[defer.Deferred[bytes]] = []

    def __call__(self, url: str) -> defer.Deferred[bytes]:
        d: defer.Deferred[bytes] = defer.Deferred()
        self.calls.append(d)
        return d

    def answer(self, *keys: SigningKey) -> None:
        self.calls[-1].callback(json.dumps({"keys": [k.jwk for k in keys]}).encode())

    def fail(self) -> None:
        self.calls[-1].errback(ConnectionRefusedError("connection refused"))


class Told:
    """The guard's siblings: what it told them."""

    def __init__(self) -> None:
        self.keys: list[tuple[str, list[str]]] = []

    def renew(self, binding: str, host: str, tokens: Any) -> Any:
        raise AssertionError("a guard renews nothing")

    def keys_changed(self, guard: str, kids: Any) -> None:
        self.keys.append((guard, list(kids)))


def _url_guard(siblings: Told | None = None, **options: Any
               ) -> tuple[JwtGuard, Fetches, EventLog, MemoryReactorClock]:
    clock, events, fetches = _clock(), EventLog("t", clock=lambda: NOW), Fetches()
    guard = JwtGuard("jwt0", {**OPTIONS, "keys": "http://keys.test/jwks.json", **options},
                     clock, events, fetch=fetches, siblings=siblings)
    guard.startService()
    return guard, fetches, events, clock


def _settle(verdict: Any) -> Any:
    if isinstance(verdict, defer.Deferred):
        out: list[Any] = []
        verdict.addCallback(out.append)
        assert out, "still waiting"
        return out[0]
    return verdict


def test_keys_down_at_start_refuse_for_now_then_recover(keys: dict[str, SigningKey]) -> None:
    guard, fetches, events, clock = _url_guard()
    token = keys["rsa"].token(now=NOW)
    assert len(fetches.calls) == 1, "fetched at start"
    fetches.fail()
    verdict = guard.verify(token)
    assert isinstance(verdict, Refusal) and verdict.status == 503 and verdict.retry_after == 1
    assert "GUARD_JWT_KEYS_UNAVAILABLE http://keys.test/jwks.json: connection refused" in \
        "\n".join(events.recent)
    assert len(fetches.calls) == 1, "a request under a second after a fetch does not fetch"
    clock.advance(1)  # retried with back-off: 1, 2, 4 ...
    assert len(fetches.calls) == 2
    fetches.fail()
    clock.advance(1.9)
    assert len(fetches.calls) == 2
    clock.advance(0.1)
    assert len(fetches.calls) == 3
    fetches.fail()
    clock.advance(1)  # the next retry is 4 s away, but a request asks for the keys now
    assert isinstance(guard.verify(token), Refusal)
    assert len(fetches.calls) == 4
    fetches.answer(keys["rsa"])
    assert isinstance(guard.verify(token), JwtSession)
    assert "GUARD_JWT_KEYS_LOADED 1 keys (rsa1)" in events.recent[-1]


def test_a_rotated_key_is_fetched_when_a_token_names_it(keys: dict[str, SigningKey]) -> None:
    guard, fetches, _, clock = _url_guard()
    fetches.answer(keys["rsa"])
    rotated = ec_key("ec-rotated")
    pending = guard.verify(rotated.token(now=NOW))
    assert isinstance(pending, defer.Deferred), "waits for the refresh"
    assert len(fetches.calls) == 2
    fetches.answer(keys["rsa"], rotated)
    assert isinstance(_settle(pending), JwtSession)
    # another unknown kid within 30 s: refused at once, no fetch
    verdict = guard.verify(rsa_key("made-up").token(now=NOW))
    assert verdict == Refusal(403, "unknown kid 'made-up'", reported=True)
    assert len(fetches.calls) == 2
    clock.advance(KID_REFRESH_INTERVAL)
    assert isinstance(guard.verify(rsa_key("made-up-2").token(now=NOW)), defer.Deferred)
    assert len(fetches.calls) == 3


def test_a_refresh_that_does_not_bring_the_kid_refuses(keys: dict[str, SigningKey]) -> None:
    guard, fetches, _, _ = _url_guard()
    fetches.answer(keys["rsa"])
    pending = guard.verify(rsa_key("gone").token(now=NOW))
    fetches.answer(keys["rsa"])
    assert _settle(pending) == Refusal(403, "unknown kid 'gone'", reported=True)


def test_keys_are_refreshed_on_a_timer_and_kept_when_the_server_fails(
        keys: dict[str, SigningKey]) -> None:
    guard, fetches, events, clock = _url_guard(**{"keys-refresh": 60})
    fetches.answer(keys["rsa"])
    clock.advance(60)
    assert len(fetches.calls) == 2
    fetches.fail()
    assert "keeping the keys held" in events.recent[-1]
    assert isinstance(guard.verify(keys["rsa"].token(now=clock.seconds())), JwtSession)
    clock.advance(30)
    assert len(fetches.calls) == 3
    fetches.answer(keys["ec"])  # rotated: the RSA key is gone
    assert isinstance(guard.verify(keys["ec"].token(now=clock.seconds())), JwtSession)
    guard.stopService()
    assert clock.getDelayedCalls() == []


def test_a_changed_key_set_is_told_to_the_sibling_workers(keys: dict[str, SigningKey]) -> None:
    told = Told()
    guard, fetches, _, _ = _url_guard(told)
    fetches.answer(keys["rsa"])
    assert told.keys == [], "the first load changes nothing the siblings hold"
    pending = guard.verify(keys["ec"].token(now=NOW))
    fetches.answer(keys["rsa"])
    assert isinstance(_settle(pending), Refusal)
    assert told.keys == [], "the same kids again"
    _, more, _, clock = _url_guard(told, **{"keys-refresh": 60})
    more.answer(keys["rsa"])
    clock.advance(60)
    more.answer(keys["ec"])
    assert told.keys == [("jwt0", ["ec1"])], "rotated on the timer"


def test_a_guard_follows_the_key_sets_its_siblings_load(keys: dict[str, SigningKey]) -> None:
    guard, fetches, _, clock = _url_guard(**{"keys-refresh": 600})
    fetches.answer(keys["rsa"])
    guard.sibling_loaded(["rsa1"])
    assert len(fetches.calls) == 1, "holds those kids already"
    guard.sibling_loaded(["ec1"])
    assert len(fetches.calls) == 2, "fetched at once"
    fetches.answer(keys["ec"])
    assert isinstance(guard.verify(keys["rsa"].token(now=NOW)), Refusal), "the retired key"
    # within KID_REFRESH_INTERVAL of that fetch: once it is over, not now
    clock.advance(10)
    guard.sibling_loaded(["ed1"])
    assert len(fetches.calls) == 2
    clock.advance(KID_REFRESH_INTERVAL - 10.1)
    assert len(fetches.calls) == 2
    clock.advance(0.1)
    assert len(fetches.calls) == 3
    # told during a fetch that started before the sibling's: checked again when it is over
    guard.sibling_loaded(["rsa1"])
    fetches.answer(keys["ed"])
    assert len(fetches.calls) == 3, "within the interval again: later"
    clock.advance(KID_REFRESH_INTERVAL)
    assert len(fetches.calls) == 4
    fetches.answer(keys["rsa"])
    assert isinstance(guard.verify(keys["rsa"].token(now=clock.seconds())), JwtSession)
    clock.advance(599)
    assert len(fetches.calls) == 4, "the timer runs from the last load again"
    clock.advance(1)
    assert len(fetches.calls) == 5
    guard.stopService()
    guard.sibling_loaded(["ec1"])
    assert len(fetches.calls) == 5 and clock.getDelayedCalls() == []


def test_a_guard_without_keys_yet_tries_again_when_a_sibling_has_some(
        keys: dict[str, SigningKey]) -> None:
    guard, fetches, _, clock = _url_guard()
    for retry in (1, 2):
        fetches.fail()
        clock.advance(retry)
    fetches.fail()  # the next retry is 4 s away
    guard.sibling_loaded(["rsa1"])
    assert len(fetches.calls) == 3, "not within a second of the last try"
    clock.advance(1)
    guard.sibling_loaded(["rsa1"])
    assert len(fetches.calls) == 4, "now, not at the back-off's next retry"
    fetches.answer(keys["rsa"])
    guard.sibling_loaded(["ec1"])  # holds a set now: follows it at once (no kid fetch yet)
    assert len(fetches.calls) == 5


def test_a_guard_with_inline_keys_ignores_its_siblings(keys: dict[str, SigningKey]) -> None:
    guard, _, clock = _guard([keys["rsa"]])
    guard.sibling_loaded(["ec1"])
    assert clock.getDelayedCalls() == [] and guard.keys is not None and list(guard.keys) == ["rsa1"]


def test_a_jwks_with_bad_entries_keeps_the_good_ones(keys: dict[str, SigningKey]) -> None:
    guard, fetches, events, _ = _url_guard()
    fetches.calls[-1].callback(json.dumps({"keys": [
        {"kty": "RSA", "kid": "broken", "n": "AQAB"}, "not a key",
        {**keys["ec"].jwk, "use": "enc"}, keys["ed"].jwk]}).encode())
    assert set(guard.keys or {}) == {"ed1"}
    assert "skipped keys[0]" in events.recent[-1] and "keys[1]: not an object" in events.recent[-1]


def test_parse_jwk_refuses_keys_it_cannot_use(keys: dict[str, SigningKey]) -> None:
    assert isinstance(parse_jwk(keys["ed"].jwk), Key)
    for bad in ({**keys["rsa"].jwk, "n": "!!"}, {**keys["rsa"].jwk, "kid": ""},
                {**keys["ec"].jwk, "alg": "none"}, {**keys["ec"].jwk, "crv": "P-999"},
                {"kty": "RSA", "kid": "x", "alg": "RS256"}):
        with pytest.raises(Exception):  # noqa: B017 - PyJWT's or ours, a clear message either way
            parse_jwk(bad)


@pytest.mark.parametrize(("claim", "text", "reason"), [
    ("exp", b"NaN", "exp is not a number"),
    ("exp", b"Infinity", "exp is not a number"),
    ("exp", b"1e400", "exp is not a number"),  # read as a float: infinity
    ("exp", b"1" + b"0" * 400, "exp is not a number"),  # an int no float holds
    ("nbf", b"NaN", "token not yet valid (nbf)"),
    ("nbf", b"-Infinity", "token not yet valid (nbf)"),
])
def test_exp_and_nbf_must_be_finite_numbers(keys: dict[str, SigningKey], claim: str,
                                            text: bytes, reason: str) -> None:
    """`NaN` passed both checks (every comparison with it is false) and `Infinity` made a session
    that never expires; JSON as Python reads it accepts both."""
    rsa = keys["rsa"]
    claims = {"iss": ISSUER, "aud": AUDIENCE, "sub": "alice", "exp": int(NOW + 60),
              claim: "PLACEHOLDER"}
    payload = json.dumps(claims).encode().replace(b'"PLACEHOLDER"', text)
    guard, events, _ = _guard([rsa])
    verdict = guard.verify(rsa.sign_bytes(payload))
    assert isinstance(verdict, Refusal) and verdict.status == 403, verdict
    assert verdict.reason.startswith(reason), verdict.reason
    assert not any("Traceback" in line for line in events.recent)


def test_keys_a_token_brings_along_are_never_used(keys: dict[str, SigningKey]) -> None:
    """A token may name its own key (`jwk`), a URL of keys (`jku`, `x5u`) or carry a certificate
    chain (`x5c`); the guard only ever checks with the keys of its config, picked by `kid`, and
    fetches nothing but its own `keys` URL."""
    attacker = rsa_key("rsa1")  # the kid of a trusted key, a key of the attacker's
    claims = {"iss": ISSUER, "aud": AUDIENCE, "sub": "mallory", "exp": int(NOW + 60)}
    headers: list[dict[str, Any]] = [
        {"jwk": attacker.jwk},
        {"jku": "http://evil.test/jwks.json"},
        {"x5u": "http://evil.test/cert.pem"},
        {"x5c": ["MIIB" + "A" * 40]},
    ]
    urls: list[str] = []
    clock, events = _clock(), EventLog("t", clock=lambda: NOW)
    document = json.dumps({"keys": [keys["rsa"].jwk]}).encode()
    guard = JwtGuard("jwt0", {**OPTIONS, "keys": "http://keys.test/jwks.json"}, clock, events,
                     fetch=lambda url: urls.append(url) or defer.succeed(document))
    guard.startService()
    for extra in headers:
        verdict = _settle(guard.verify(attacker.sign(claims, extra)))
        assert verdict == Refusal(403, "signature does not verify", reported=True), extra
        other_kid = _settle(guard.verify(rsa_key("evil").sign(claims, extra)))
        assert isinstance(other_kid, Refusal) and "unknown kid 'evil'" in other_kid.reason
    assert set(urls) == {"http://keys.test/jwks.json"}, "no URL from a token was fetched"
    guard.stopService()
