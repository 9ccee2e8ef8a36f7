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

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl

from twisted.web.server import Request

from ssekd.spi.guard import Guard, Refusal, Renewal, Session
from ssekd.telemetry.redact import redact_uri

CHALLENGE_RESPONSE = b"application/x-challenge-response"
MARK = "{credentials}"


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

    #: The client's address and port: one TCP connection (HTTP/1.1 or HTTP/2).
    connection: tuple[str, int]
    #: Whether that connection multiplexes (HTTP/2): then only it may renew its streams.
    multiplexed: bool

    @classmethod
    def of(cls, request: Request) -> Origin:
        peer: Any = request.getClientAddress()
        host, port = str(getattr(peer, "host", "")), int(getattr(peer, "port", 0) or 0)
        return cls((host, port), request.clientproto == b"HTTP/2")

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

    def redact(self, path: str) -> str:
        """`path` fit for a log line (`ssekd.telemetry.redact`): the values of credential query
        parameters and anything shaped like a JWT hidden - a token must never reach a log."""
        return redact_uri(path, self.query_names)

    def lease(self, request: Request, sessions: Mapping[str, Session]) -> HttpLease:
        challenge = max((self.guards[g].challenge for g in sessions if g in self.guards),
                        default=0.0)
        return HttpLease(self.leases, sessions, challenge, Origin.of(request))
