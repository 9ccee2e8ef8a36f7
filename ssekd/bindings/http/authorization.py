"""The http binding's `options.authorization` (docs/config-reference.md, docs/protocol.md):
where a request carries its token for each guard, the sessions its tokens open, and continuous
authorization - the leases long-lived responses hold, and the renewal requests that extend them.

A renewal is a `POST` (any path) with `Content-Type: application/x-challenge-response` and fresh
credentials. It reaches the leases of its own connection (HTTP/2: every stream of that
connection, as in Zilla) and, for HTTP/1.1 streams, the leases of the same client address on
other connections too - an HTTP/1.1 connection carrying a stream has no room for the POST, so a
browser sends it on another one (ssekd goes further than Zilla here). Only leases whose session
names the same identity are renewed, and only when the new token keeps every role the old one
had: one user's token can never extend another user's stream.

In a daemon with workers, the POST may land on a worker that holds none of the client's streams:
the worker that gets it also asks its siblings (`api.Siblings`) to renew that client's HTTP/1.1
streams, and `combine` makes one answer of what every worker did.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl

from twisted.internet import defer
from twisted.web import http
from twisted.web.server import NOT_DONE_YET, Request

from ssekd.bindings.http.roles import HttpBinding, TemporaryRefusals
from ssekd.deferred_answer import answer_later
from ssekd.spi.guard import Guard, Refusal, Renewal, Session
from ssekd.spi.workers import Siblings
from ssekd.telemetry.redact import redact_uri

CHALLENGE_RESPONSE = b"application/x-challenge-response"
MARK = "{credentials}"
#: Seconds a client is told to wait when a guard cannot check tokens for now.
DEFAULT_RETRY_AFTER = 5.0

#: What a guard answered for a token: settled, or still fetching keys.
Verdicts = Mapping[str, "Session | Refusal | defer.Deferred[Session | Refusal]"]


@dataclass(frozen=True)
class CredentialPattern:
    """A value pattern like `Bearer {credentials}`: the text around the token."""

    prefix: str
    suffix: str

    @classmethod
    def compile(cls, pattern: str) -> CredentialPattern:
        prefix, mark, suffix = pattern.partition(MARK)
        if not mark:  # no marker: the whole value is the token
            return cls("", "")
        return cls(prefix, suffix)

    def token(self, value: str) -> str | None:
        """The token in `value`, or None when the value does not have this shape. The prefix is
        matched without regard to case: `bearer x` is as good as `Bearer x` (RFC 9110 §11.1)."""
        if len(value) < len(self.prefix) + len(self.suffix):
            return None
        if value[:len(self.prefix)].lower() != self.prefix.lower():
            return None
        if self.suffix and not value.endswith(self.suffix):
            return None
        token = value[len(self.prefix):len(value) - len(self.suffix)].strip()
        return token or None


@dataclass(frozen=True)
class Credentials:
    """Where one guard's token is read: cookies, then headers, then query (first hit wins)."""

    cookies: tuple[tuple[str, CredentialPattern], ...] = ()
    headers: tuple[tuple[str, CredentialPattern], ...] = ()
    query: tuple[tuple[str, CredentialPattern], ...] = ()

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> Credentials:
        def compiled(section: str) -> tuple[tuple[str, CredentialPattern], ...]:
            return tuple((str(name), CredentialPattern.compile(str(p)))
                         for name, p in (options.get(section) or {}).items())
        return cls(compiled("cookies"), compiled("headers"), compiled("query"))

    def find(self, request: Request) -> str | None:
        req: Any = request
        for name, pattern in self.cookies:
            raw = req.getCookie(name.encode("latin-1"))
            token = pattern.token(raw.decode("latin-1")) if raw is not None else None
            if token:
                return token
        for name, pattern in self.headers:
            raw = req.getHeader(name.encode("latin-1"))
            token = pattern.token(raw.decode("latin-1")) if raw is not None else None
            if token:
                return token
        if self.query:
            _, _, qs = bytes(req.uri).partition(b"?")
            params: dict[str, str] = {}
            for k, v in parse_qsl(qs.decode("latin-1"), keep_blank_values=False):
                params.setdefault(k, v)
            for name, pattern in self.query:
                value = params.get(name)
                token = pattern.token(value) if value is not None else None
                if token:
                    return token
        return None


def is_renewal(request: Request) -> bool:
    """A challenge response: `POST` with `Content-Type: application/x-challenge-response`."""
    if request.method != b"POST":
        return False
    content_type = request.getHeader(b"content-type") or b""
    return content_type.split(b";")[0].strip().lower() == CHALLENGE_RESPONSE


@dataclass(frozen=True)
class Origin:
    """Where a request came from, as renewal matching needs it."""

    #: The client's address and port: one TCP connection (HTTP/1.1 or HTTP/2), or one QUIC
    #: connection (HTTP/3: the address it began from, which stays its name if it migrates).
    connection: tuple[str, int]
    #: Whether that connection multiplexes (HTTP/2, HTTP/3): then only it may renew its
    #: streams.
    multiplexed: bool

    @classmethod
    def of(cls, request: Request) -> Origin:
        peer: Any = request.getClientAddress()
        host, port = str(getattr(peer, "host", "")), int(getattr(peer, "port", 0) or 0)
        return cls((host, port), request.clientproto in (b"HTTP/2", b"HTTP/3"))

    @classmethod
    def sibling(cls, host: str) -> Origin:
        """A renewal from `host` that reached another worker: no connection of this one, so it
        reaches the HTTP/1.1 leases of that host only."""
        return cls((host, 0), False)


class HttpLease:
    """The `api.Lease` of one long-lived response (see the module docstring)."""

    __slots__ = ("_renewed", "challenge", "leases", "origin", "sessions")

    def __init__(self, leases: Leases, sessions: Mapping[str, Session], challenge: float,
                 origin: Origin) -> None:
        self.leases = leases
        self.sessions = dict(sessions)
        self.challenge = challenge
        self.origin = origin
        self._renewed: Callable[[], None] | None = None

    @property
    def expires_at(self) -> float | None:
        times = [s.expires_at for s in self.sessions.values() if s.expires_at is not None]
        return min(times) if times else None

    def hold(self, renewed: Callable[[], None]) -> None:
        self._renewed = renewed
        self.leases.add(self)

    def release(self) -> None:
        self._renewed = None
        self.leases.discard(self)

    def renew(self, guard: str, session: Session) -> None:
        self.sessions[guard] = session
        if self._renewed is not None:
            self._renewed()


class Leases:
    """The leases held open on one http binding, found by connection and by client address."""

    def __init__(self) -> None:
        self._by_connection: dict[tuple[str, int], dict[HttpLease, None]] = {}
        #: HTTP/1.1 leases by client host (they may be renewed from another connection).
        self._by_host: dict[str, dict[HttpLease, None]] = {}

    def __len__(self) -> int:
        return sum(len(v) for v in self._by_connection.values())

    def add(self, lease: HttpLease) -> None:
        self._by_connection.setdefault(lease.origin.connection, {})[lease] = None
        if not lease.origin.multiplexed:
            self._by_host.setdefault(lease.origin.connection[0], {})[lease] = None

    def discard(self, lease: HttpLease) -> None:
        connection = lease.origin.connection
        held = self._by_connection.get(connection)
        if held is not None:
            held.pop(lease, None)
            if not held:
                del self._by_connection[connection]
        by_host = self._by_host.get(connection[0])
        if by_host is not None:
            by_host.pop(lease, None)
            if not by_host:
                del self._by_host[connection[0]]

    def reachable(self, origin: Origin) -> Iterator[HttpLease]:
        """The leases a renewal from `origin` may renew: those of its connection, and HTTP/1.1
        leases of the same client host."""
        seen = dict(self._by_connection.get(origin.connection, {}))
        seen.update(self._by_host.get(origin.connection[0], {}))
        yield from list(seen)


def renew(leases: Leases, origin: Origin, guard: str, session: Session) -> Renewal:
    """Extend the leases `origin` reaches that hold a session of `guard` for the same identity,
    when `session` keeps all their roles; otherwise say why nothing was renewed."""
    if session.identity is None:  # "the same identity" means nothing without one
        return Renewal(0, Refusal(403, "renewal with a token that names no identity"))
    held = [lease for lease in leases.reachable(origin) if guard in lease.sessions]
    if not held:
        return Renewal(0, Refusal(403, "renewal with no stream to renew"), reach=0)
    same = [lease for lease in held if lease.sessions[guard].identity == session.identity]
    if not same:
        return Renewal(0, Refusal(403, f"renewal for {session.identity} reaches only streams of "
                                       f"another identity"), reach=1)
    renewed = 0
    dropped: set[str] = set()
    for lease in same:
        missing = lease.sessions[guard].roles - session.roles
        if missing:
            dropped |= missing
            continue
        lease.renew(guard, session)
        renewed += 1
    if not renewed:
        return Renewal(0, Refusal(403, f"renewal for {session.identity} drops role(s) "
                                       f"{' '.join(sorted(dropped))}"), reach=2)
    return Renewal(renewed)


def combine(local: Renewal, elsewhere: Iterable[Renewal]) -> Renewal:
    """One outcome of a renewal tried on this worker (`local`) and on its siblings: the sum of
    what they renewed, else the refusal that got furthest (this worker's on a tie), so that a
    client is told its new token drops a role rather than that one worker held no stream."""
    tried = [local, *elsewhere]
    renewed = sum(r.renewed for r in tried)
    if renewed:
        return Renewal(renewed)
    return max(tried, key=lambda r: r.reach)


class Authorization:
    """The http binding's `options.authorization`: guards with where their tokens are, and the
    leases of the responses they authorized."""

    def __init__(self, guards: Mapping[str, Guard], credentials: Mapping[str, Credentials]) -> None:
        self.guards = dict(guards)
        self.credentials = dict(credentials)
        self.leases = Leases()

    def tokens(self, request: Request) -> dict[str, str]:
        """guard name -> the token the request carries for it."""
        found = {}
        for guard, credentials in self.credentials.items():
            token = credentials.find(request)
            if token is not None:
                found[guard] = token
        return found

    @property
    def query_names(self) -> frozenset[str]:
        """The query parameters any guard reads a token from: never logged, never relayed."""
        return frozenset(n for c in self.credentials.values() for n, _ in c.query)

    @property
    def header_names(self) -> frozenset[str]:
        """The request headers (lower case) any guard reads a token from."""
        return frozenset(n.lower() for c in self.credentials.values() for n, _ in c.headers)

    def redact(self, path: str) -> str:
        """`path` fit for a log line (`ssekd.telemetry.redact`): the values of credential query
        parameters and anything shaped like a JWT hidden - a token must never reach a log."""
        return redact_uri(path, self.query_names)

    def lease(self, request: Request, sessions: Mapping[str, Session]) -> HttpLease:
        challenge = max((self.guards[g].challenge for g in sessions if g in self.guards),
                        default=0.0)
        return HttpLease(self.leases, sessions, challenge, Origin.of(request))

    def verdicts(self, request: Request) -> Verdicts:
        """What each guard says of the token the request carries for it."""
        return {g: self.guards[g].verify(token) for g, token in self.tokens(request).items()}


def settled(verdicts: Verdicts) -> defer.Deferred[dict[str, Session | Refusal]]:
    """`verdicts` once every guard has answered; a guard that failed to is a temporary refusal."""
    pending = {g: v for g, v in verdicts.items() if isinstance(v, defer.Deferred)}

    def resume(results: list[tuple[bool, Any]]) -> dict[str, Session | Refusal]:
        done: dict[str, Session | Refusal] = {
            g: v for g, v in verdicts.items() if not isinstance(v, defer.Deferred)}
        for guard, (ok, value) in zip(pending, results, strict=True):
            done[guard] = value if ok else Refusal(503, "cannot check the token now",
                                                   DEFAULT_RETRY_AFTER)
        return done

    d = defer.DeferredList(list(pending.values()), consumeErrors=True)
    return d.addCallback(resume)


def answer_refusal(request: Request, target: HttpBinding | None, guard: str, refusal: Refusal,
                   authorization: Authorization | None) -> bytes:
    """Answer a refusal: `401` with `WWW-Authenticate`, `403`, or - temporary - `503` with
    `Retry-After` (an SSE exit answers that its own way, see `api.TemporaryRefusals`); the
    guard reports it unless it has already."""
    if not refusal.reported and authorization is not None and guard in authorization.guards:
        authorization.guards[guard].report(refusal.reason)
    if refusal.status == http.SERVICE_UNAVAILABLE:
        retry = refusal.retry_after or DEFAULT_RETRY_AFTER
        if isinstance(target, TemporaryRefusals):
            return target.answer_unavailable(request, refusal.reason, retry)
        request.setHeader(b"Retry-After", str(math.ceil(retry)).encode())
    elif refusal.status == http.UNAUTHORIZED:
        request.setHeader(b"WWW-Authenticate", b"Bearer")
    request.setResponseCode(refusal.status)
    return b""


#: What a client is told a refused renewal needs, by the start of the refusal's reason.
_RENEWAL_HINTS = (
    ("renewal without credentials", "send the new token where the stream sent its own (the "
                                    "http binding's `authorization`: a header, a cookie or the "
                                    "query)"),
    ("renewal with a token that names no identity", "the token needs the guard's identity "
                                                     "claim (`sub` by default): a renewal "
                                                     "renews the streams of that identity"),
    ("renewal with no stream to renew", "no stream opened with this guard's token is open "
                                        "from this client. A renewal reaches the streams of its "
                                        "own connection (HTTP/2), and over HTTP/1.1 those of the "
                                        "client's other connections: keep the stream open (in "
                                        "another terminal, or in the background) and renew it "
                                        "before its token's exp"),
    ("renewal for", "a renewal renews only streams opened with a token of the same identity, "
                    "and only when the new token keeps every role of the old one"),
)


def renewal_refused(request: Request, refusal: Refusal) -> bytes:
    """The body of a refused renewal: what was refused and what a renewal needs, in plain text
    (its status and events are `answer_refusal`'s). The reason names no token, at most the
    identity the client's own token names."""
    hint = next((h for start, h in _RENEWAL_HINTS if refusal.reason.startswith(start)),
                "the token was not accepted: see the guard's rules in the security docs")
    request.setHeader(b"Content-Type", b"text/plain; charset=utf-8")
    return f"renewal refused: {refusal.reason}\n{hint}\n".encode()


class Renewals:
    """The challenge responses (renewal `POST`s, `is_renewal`) of one http binding.

    One reaches the HTTP/1.1 streams of the same client on other connections too (module
    docstring), which with workers may be on any worker: the valid tokens also go to the sibling
    workers, which renew the client's HTTP/1.1 streams they hold, and the POST is answered once
    they have (or have not in time)."""

    def __init__(self, binding: str, authorization: Authorization,
                 siblings: Siblings | None) -> None:
        self.binding = binding
        self.authorization = authorization
        self.siblings = siblings

    def answer(self, request: Request, verdicts: Mapping[str, Session | Refusal]
               ) -> bytes | int:
        """`204` when the renewal renewed a stream, else the refusal."""
        auth = self.authorization
        if not verdicts:
            guard = next(iter(auth.guards), "")
            refusal = Refusal(401, "renewal without credentials")
            answer_refusal(request, None, guard, refusal, auth)
            return renewal_refused(request, refusal)
        origin = Origin.of(request)
        outcomes = self._here(origin, verdicts)
        tokens = auth.tokens(request)
        forward = {g: tokens[g] for g, v in verdicts.items()
                   if not isinstance(v, Refusal) and v.identity is not None}
        if self.siblings is None or not forward:
            return self._answer(request, outcomes)
        d = self.siblings.renew(self.binding, origin.connection[0], forward)
        answer_later(request, d.addCallback(lambda elsewhere: self._answer(
            request, {g: combine(o, (e[g] for e in elsewhere if g in e))
                      for g, o in outcomes.items()})), auth.redact)
        return NOT_DONE_YET

    def for_sibling(self, host: str, tokens: Mapping[str, str]
                    ) -> defer.Deferred[dict[str, Renewal]]:
        """A renewal that a sibling worker got from client `host`: check `tokens` with this
        worker's guards and renew that host's HTTP/1.1 leases here. What renewed nothing is not
        reported here (the sibling answers the client, and reports), and nothing is forwarded
        again."""
        guards = self.authorization.guards
        verdicts = {g: guards[g].verify(t) for g, t in tokens.items() if g in guards}
        return settled(verdicts).addCallback(
            lambda done: self._here(Origin.sibling(host), done))

    def _here(self, origin: Origin, verdicts: Mapping[str, Session | Refusal]
              ) -> dict[str, Renewal]:
        """What each guard's verdict renews on this worker."""
        leases = self.authorization.leases
        return {g: Renewal(0, v, reach=-1) if isinstance(v, Refusal)
                else renew(leases, origin, g, v) for g, v in verdicts.items()}

    def _answer(self, request: Request, outcomes: Mapping[str, Renewal]) -> bytes:
        if any(o.renewed for o in outcomes.values()):
            request.setResponseCode(http.NO_CONTENT)
            return b""
        guard, refused = next((g, o.refusal) for g, o in outcomes.items()
                              if o.refusal is not None)
        answer_refusal(request, None, guard, refused, self.authorization)
        return renewal_refused(request, refused)
