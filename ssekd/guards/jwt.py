"""The `jwt` guard (docs/protocol.md): bearer tokens checked against JWKs, the cryptography done by PyJWT.

A token passes when its header names a `kid` this guard holds, its `alg` is that key's `alg`
(so `alg: none` and HMAC "signed" with a public key never pass), its signature verifies, it has
an `exp` still in the future, its `nbf` (if any) is not, and its `iss` and `aud` are the
configured ones. The session it yields names an identity (claim `identity`, default `sub`) and
roles (claim `roles`, default `scope`: a space-separated string or a list).

Expiry and not-before are checked here against the reactor's clock rather than by PyJWT (which
reads the system time), so the timing of sessions is testable on an injected clock and agrees
with the timers that challenge and end streams.

`options.keys` is either a list of JWKs or the URL of a JWKS document. A URL is fetched off the
reactor thread when the daemon starts, every `keys-refresh` seconds, and when a token names a
`kid` the guard does not hold (at most once per `KID_REFRESH_INTERVAL`, so a stream of made-up
kids cannot make the daemon hammer the key server). Until a first fetch succeeds, tokens cannot
be checked: requests get a temporary refusal (`503`, or a `200` that ends at once for SSE) and
fetching is retried with back-off; later failures keep the keys already held.

In a daemon with workers, each worker's guard fetches on its own, so the one that saw a token
with a new `kid` would be the only one to drop a key the identity provider retired: a guard that
loads a key set with other kids tells its siblings (`api.Siblings.keys_changed`), and a guard
told so fetches its own - at once, or when its `KID_REFRESH_INTERVAL` since the last such fetch
is over - unless it already holds those kids.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

import jwt
from twisted.application.service import Service
from twisted.internet import defer, threads
from twisted.internet.interfaces import IDelayedCall
from twisted.logger import Logger
from twisted.python.failure import Failure

from ssekd import url_fetch
from ssekd.config.errors import ConfigError
from ssekd.config.model import Guard as GuardConfig
from ssekd.spi.binding import BuildContext, GuardType, Reactor
from ssekd.spi.guard import Refusal, Session
from ssekd.spi.workers import Siblings
from ssekd.telemetry.events import EventLog

log = Logger()

FAILED = "GUARD_JWT_AUTHORIZATION_FAILED"
KEYS_LOADED = "GUARD_JWT_KEYS_LOADED"
KEYS_UNAVAILABLE = "GUARD_JWT_KEYS_UNAVAILABLE"

#: A longer token is refused before it is parsed: real ones are a few hundred bytes, and every
#: byte of a header or query string beyond that is only work for whoever sends it.
MAX_TOKEN_LENGTH = 8192
#: At most one JWKS fetch per this many seconds because a token named an unknown kid.
KID_REFRESH_INTERVAL = 30.0
DEFAULT_KEYS_REFRESH = 600.0
DEFAULT_ROLES_CLAIM = "scope"
DEFAULT_IDENTITY_CLAIM = "sub"
#: Back-off between fetches while no key set was ever loaded: 1, 2, 4 ... at most this.
MAX_RETRY = 30.0
#: The largest JWKS document read (a key set is a few KiB).
MAX_JWKS_BYTES = 1 << 20
#: Seconds a JWKS fetch may take in all (not per read: a server sending a byte every few
#: seconds would otherwise hold it, and every token naming an unknown kid, for ever).
FETCH_DEADLINE = url_fetch.DEFAULT_DEADLINE


@dataclass(frozen=True)
class JwtSession:
    """What a valid token says (the `api.Session` of this guard)."""

    identity: str | None
    roles: frozenset[str]
    expires_at: float | None


@dataclass(frozen=True)
class Key:
    kid: str
    alg: str
    key: Any  # the cryptography key PyJWT built from the JWK


def parse_jwk(data: Mapping[str, Any]) -> Key:
    """One JWK as a `Key`; raises `jwt.PyJWKError` (or ValueError) when it is unusable."""
    kid = data.get("kid")
    if not isinstance(kid, str) or not kid:
        raise ValueError("a key needs a `kid`: tokens pick their key by it")
    if str(data.get("alg", "")).lower() == "none":
        raise ValueError("`alg: none` is no signature")
    jwk = jwt.PyJWK(dict(data))
    return Key(kid, jwk.algorithm_name, jwk.key)


def parse_jwks(document: bytes) -> tuple[dict[str, Key], list[str]]:
    """The signing keys of a JWKS document fetched from a URL, and why any key of it was
    skipped (symmetric keys always are)."""
    data = json.loads(document)
    if not isinstance(data, dict) or not isinstance(data.get("keys"), list):
        raise ValueError("expected a JSON object with a `keys` list")
    keys: dict[str, Key] = {}
    skipped: list[str] = []
    for i, item in enumerate(data["keys"]):
        if not isinstance(item, dict):
            skipped.append(f"keys[{i}]: not an object")
            continue
        if item.get("use", "sig") != "sig":
            continue  # an encryption key: not for checking signatures
        if item.get("kty") == "oct":
            # an HMAC secret: one fetched is known to whoever served (or altered) the document,
            # who could then sign any token; secrets belong in the config, not at a URL
            skipped.append(f"keys[{i}]: a symmetric key (kty oct) is not taken from a URL")
            continue
        try:
            key = parse_jwk(item)
        except Exception as e:  # PyJWT raises several kinds on odd JWKs; any skips the key
            skipped.append(f"keys[{i}]: {_short(e)}")
            continue
        keys[key.kid] = key
    return keys, skipped


def fetch_url(url: str) -> bytes:
    """GET `url` (blocking: run it in a thread), within `FETCH_DEADLINE` seconds in all,
    following redirects only while they stay https (`ssekd.url_fetch`)."""
    status, body = url_fetch.fetch(url, "application/json", FETCH_DEADLINE, MAX_JWKS_BYTES)
    if not 200 <= status < 300:
        raise url_fetch.FetchError(f"HTTP Error {status}")
    if len(body) > MAX_JWKS_BYTES:
        raise ValueError(f"more than {MAX_JWKS_BYTES} bytes")
    return body


def fetch_in_thread(url: str) -> defer.Deferred[bytes]:
    """`fetch_url` on the reactor's thread pool: the reactor thread never waits on the network."""
    return threads.deferToThread(fetch_url, url)


def _short(error: BaseException, limit: int = 120) -> str:
    text = str(error) or type(error).__name__
    return text if len(text) <= limit else text[:limit] + "…"


def _roles(value: Any) -> frozenset[str]:
    if isinstance(value, str):
        return frozenset(value.split())
    if isinstance(value, list):
        return frozenset(v for v in value if isinstance(v, str))
    return frozenset()


def _number(value: Any) -> bool:
    """A NumericDate: a number a float holds, finite. JSON as Python reads it takes `NaN` and
    `Infinity` (and `1e400`, read as infinity): `NaN` passes every comparison by failing it, and
    an infinite `exp` is a session that never ends."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(float(value))
    except OverflowError:  # an int larger than any float
        return False


class JwtGuard(Service):
    """Runtime of a `jwt` guard: checks tokens, holds (and refreshes) its keys."""

    def __init__(self, name: str, options: Mapping[str, Any], clock: Reactor, events: EventLog,
                 keys: Mapping[str, Key] | None = None,
                 fetch: Callable[[str], defer.Deferred[bytes]] = fetch_in_thread,
                 siblings: Siblings | None = None) -> None:
        #: The guard's name in the config (events name it). Not `Service.name`: a binding may
        #: bear the same name, and the engine's MultiService refuses two services of one name.
        self.guard_name = name
        self.clock = clock
        self.events = events
        self.issuer: str | None = options.get("issuer")
        self.audience: str | None = options.get("audience")
        self.challenge = float(options.get("challenge", 0))
        self.roles_claim = str(options.get("roles", DEFAULT_ROLES_CLAIM))
        self.identity_claim = str(options.get("identity", DEFAULT_IDENTITY_CLAIM))
        self.keys_refresh = float(options.get("keys-refresh", DEFAULT_KEYS_REFRESH))
        url = options.get("keys")
        #: The JWKS URL, when the keys come from one.
        self.url: str | None = url if isinstance(url, str) else None
        #: kid -> key; None until a JWKS URL answered once.
        self.keys: dict[str, Key] | None = dict(keys) if keys is not None else None
        self._fetch = fetch
        self.siblings = siblings
        #: The kids a sibling said it loaded while a fetch of ours was under way: compared
        #: again once that fetch is over (it may have started before the key set changed).
        self._sibling_kids: frozenset[str] | None = None
        self._fetching: defer.Deferred[bytes] | None = None
        self._waiters: list[defer.Deferred[None]] = []
        self._timer: IDelayedCall | None = None
        self._failures = 0
        self._last_kid_refresh = float("-inf")
        self._last_attempt = float("-inf")
        self._decode_options: Any = {
            "require": ["exp"], "verify_exp": False, "verify_nbf": False, "verify_iat": False,
            "verify_aud": self.audience is not None, "verify_iss": self.issuer is not None}

    # -- Guard ----------------------------------------------------------------------------

    def verify(self, token: str) -> Session | Refusal | defer.Deferred[Session | Refusal]:
        try:
            return self._verify(token, may_refresh=True)
        except Exception as e:  # a token must never take the request (or the daemon) down
            log.failure("checking a token")
            return self._refuse(f"unreadable token ({type(e).__name__})")

    def report(self, reason: str) -> None:
        self.events.emit(self.guard_name, FAILED, reason)

    # -- checking -------------------------------------------------------------------------

    def _refuse(self, reason: str) -> Refusal:
        self.report(reason)
        return Refusal(403, reason, reported=True)

    def _verify(self, token: str,
                may_refresh: bool) -> Session | Refusal | defer.Deferred[Session | Refusal]:
        if len(token) > MAX_TOKEN_LENGTH:
            return self._refuse(f"token longer than {MAX_TOKEN_LENGTH} bytes")
        try:
            header = jwt.get_unverified_header(token)
        except jwt.InvalidTokenError as e:
            return self._refuse(f"malformed token: {_short(e)}")
        alg = header.get("alg")
        if not isinstance(alg, str) or alg.lower() == "none":
            return self._refuse("unsigned token (alg none) refused")
        kid = header.get("kid")
        if not isinstance(kid, str):
            return self._refuse("token names no kid")
        if self.keys is None:
            reason = f"no keys yet from {self.url}"
            self.events.emit(self.guard_name, FAILED, f"{reason}; try again shortly")
            self._refresh_soon()
            return Refusal(503, reason, retry_after=self._retry_delay(), reported=True)
        key = self.keys.get(kid)
        if key is None:
            if may_refresh and self._may_refresh_for_kid():
                d = self._refresh()
                return d.addCallback(lambda _: self._verify(token, may_refresh=False))
            return self._refuse(f"unknown kid {kid[:64]!r}")
        if alg != key.alg:
            return self._refuse(f"alg {alg[:16]} does not match key {kid[:64]!r} ({key.alg})")
        try:
            claims = jwt.decode(token, key.key, algorithms=[key.alg], audience=self.audience,
                                issuer=self.issuer, options=self._decode_options)
        except jwt.InvalidSignatureError:
            return self._refuse("signature does not verify")
        except jwt.InvalidAudienceError:
            return self._refuse("wrong audience")
        except jwt.InvalidIssuerError:
            return self._refuse("wrong issuer")
        except jwt.MissingRequiredClaimError as e:
            return self._refuse(f"missing {e.claim} claim")
        except jwt.InvalidTokenError as e:
            return self._refuse(f"malformed token: {_short(e)}")
        return self._session(claims)

    def _session(self, claims: dict[str, Any]) -> Session | Refusal:
        now = self.clock.seconds()
        exp = claims["exp"]
        if not _number(exp):
            return self._refuse("exp is not a number")
        identity = claims.get(self.identity_claim)
        who = f" ({str(identity)[:64]})" if isinstance(identity, str | int) else ""
        if exp <= now:
            return self._refuse(f"token expired{who}")
        nbf = claims.get("nbf")
        if nbf is not None and (not _number(nbf) or nbf > now):
            return self._refuse(f"token not yet valid (nbf){who}")
        return JwtSession(
            identity=str(identity) if isinstance(identity, str | int) and
            not isinstance(identity, bool) else None,
            roles=_roles(claims.get(self.roles_claim)), expires_at=float(exp))

    # -- keys from a JWKS URL -------------------------------------------------------------

    def startService(self) -> None:
        super().startService()
        if self.url is not None:
            self._refresh()

    def stopService(self) -> None:
        super().stopService()
        self._cancel_timer()

    def _may_refresh_for_kid(self) -> bool:
        if self.url is None:
            return False
        now = self.clock.seconds()
        if self._fetching is None and now - self._last_kid_refresh < KID_REFRESH_INTERVAL:
            return False
        if self._fetching is None:
            self._last_kid_refresh = now
        return True

    def _retry_delay(self) -> float:
        return float(min(MAX_RETRY, 2 ** max(0, self._failures - 1)))

    def _refresh_soon(self) -> None:
        """Keys are missing and a request wants them: fetch now rather than at the next retry of
        the back-off, unless a fetch is under way or the last one started under a second ago
        (so a crowd of clients cannot turn into a crowd of fetches)."""
        if self._fetching is None and self.running and \
                self.clock.seconds() - self._last_attempt >= 1.0:
            self._refresh()

    def _refresh(self) -> defer.Deferred[None]:
        """Fetch the key set (joining a fetch already under way); fires when it is done, with
        None whatever happened (the keys held afterwards say the rest)."""
        assert self.url is not None
        waiter: defer.Deferred[None] = defer.Deferred()
        self._waiters.append(waiter)
        if self._fetching is None:
            self._cancel_timer()
            self._last_attempt = self.clock.seconds()
            self._fetching = d = self._fetch(self.url)
            d.addCallbacks(self._loaded, self._failed)
            d.addBoth(self._fetched)
        return waiter

    def _loaded(self, body: bytes) -> None:
        try:
            keys, skipped = parse_jwks(body)
        except (ValueError, TypeError) as e:
            self._failed(Failure(e))
            return
        self._failures = 0
        changed = self.keys is not None and set(self.keys) != set(keys)
        self.keys = keys
        if changed and self.siblings is not None:
            self.siblings.keys_changed(self.guard_name, sorted(keys))
        detail = f"{len(keys)} keys ({', '.join(sorted(keys))[:200]}) from {self.url}"
        if skipped:
            detail += f"; skipped {'; '.join(skipped)[:300]}"
        self.events.emit(self.guard_name, KEYS_LOADED, detail)
        self._schedule(self.keys_refresh)

    def _failed(self, failure: Failure) -> None:
        self._failures += 1
        held = "keeping the keys held" if self.keys is not None else "no keys held"
        retry = self._retry_delay() if self.keys is None else min(MAX_RETRY, self.keys_refresh)
        self.events.emit(self.guard_name, KEYS_UNAVAILABLE,
                         f"{self.url}: {_short(failure.value or Exception())}; {held}, retry in {retry:g} s")
        self._schedule(retry)

    def _fetched(self, _: object) -> None:
        self._fetching = None
        waiters, self._waiters = self._waiters, []
        for w in waiters:
            w.callback(None)
        self._follow_sibling()

    def sibling_loaded(self, kids: Collection[str]) -> None:
        """A sibling worker's guard of this name loaded a key set of `kids` (`ssekd.workers.siblings`
        calls this): fetch ours too, so that every worker drops a retired key."""
        if self.url is None:
            return
        self._sibling_kids = frozenset(kids)
        if self._fetching is None:
            self._follow_sibling()

    def _follow_sibling(self) -> None:
        kids, self._sibling_kids = self._sibling_kids, None
        if kids is None or not self.running:
            return
        if self.keys is None:  # still trying to load a first set: try now (the URL answers)
            self._refresh_soon()
            return
        if set(self.keys) == kids:
            return
        now = self.clock.seconds()
        wait = self._last_kid_refresh + KID_REFRESH_INTERVAL - now
        if wait > 0:  # the same limit as for unknown kids: fetch when it is over (or sooner)
            if self._timer is None or self._timer.getTime() > now + wait:
                self._schedule(wait)
                self._last_kid_refresh = now + wait  # that fetch counts for the limit
            return
        self._last_kid_refresh = now
        self._refresh()

    def _schedule(self, delay: float) -> None:
        self._cancel_timer()
        if self.running:
            self._timer = self.clock.callLater(delay, self._tick)

    def _tick(self) -> None:
        self._timer = None
        self._refresh()

    def _cancel_timer(self) -> None:
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = None


def _build(ctx: BuildContext, guard: GuardConfig) -> JwtGuard:
    options = guard.options
    keys = options.get("keys")
    inline: dict[str, Key] | None = None
    if isinstance(keys, list):
        inline = {}
        issues = []
        for i, item in enumerate(keys):
            try:
                key = parse_jwk(item)
            except Exception as e:  # PyJWT raises several kinds on odd JWKs
                issues.append(ctx.issue(("guards", guard.name, "options", "keys", i),
                                        f"expected a usable JWK; {_short(e)}"))
                continue
            inline[key.kid] = key
        if issues:
            raise ConfigError(issues)
    return JwtGuard(guard.name, options, ctx.reactor, ctx.events, keys=inline,
                    siblings=ctx.siblings)


GUARD = GuardType("jwt", _build)
