"""Continuous authorization in-process, on an injected clock: the http binding's root with a
jwt guard in front of an sse server. A stream gets `event:challenge` `challenge` seconds before
its token expires, a renewal POST moves its deadlines, and at the expiry it is cut (HTTP/1.1:
the connection aborted; HTTP/2: the stream reset) with not one byte more written. Renewals reach
only streams of the same identity, on the same connection (HTTP/2) or client (HTTP/1.1) - and
with workers, an HTTP/1.1 renewal reaches that client's streams on the sibling workers too."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from twisted.internet import defer
from twisted.internet.address import IPv4Address
from twisted.internet.testing import MemoryReactorClock
from twisted.web.server import NOT_DONE_YET
from twisted.web.test.requesthelper import DummyRequest

from ssekd.bindings.http.authorization import Authorization, Credentials
from ssekd.bindings.http.cors import AccessControl
from ssekd.bindings.http.server import HttpRoot, HttpRoute
from ssekd.bindings.sse.server import SseServer
from ssekd.bindings.sse.wire import CHALLENGE
from ssekd.guards.jwt import JwtGuard, parse_jwk
from ssekd.spi.guard import Renewal
from ssekd.telemetry.events import EventLog
from tests.support.jwt import AUDIENCE, ISSUER, SigningKey, rsa_key

NOW = 1_800_000_000.0


class Transport:
    def __init__(self) -> None:
        self.aborted = False

    def abortConnection(self) -> None:  # noqa: N802 - Twisted's name
        self.aborted = True


class Channel:
    """What an H2Stream offers a request: `abortConnection` resets the stream."""

    def __init__(self) -> None:
        self.reset = False

    def abortConnection(self) -> None:  # noqa: N802
        self.reset = True


class Request(DummyRequest):  # type: ignore[misc]
    producer: Any = None

    def __init__(self, path: bytes, method: bytes, host: str, port: int, h2: bool,
                 headers: dict[bytes, bytes]) -> None:
        super().__init__(path.strip(b"/").split(b"/"))
        self.method, self.uri, self.path = method, path, path
        self.client = IPv4Address("TCP", host, port)
        self.clientproto = b"HTTP/2" if h2 else b"HTTP/1.1"
        self.transport: Any = None if h2 else Transport()
        self.channel = Channel()
        headers = {b"host": b"example.test", **headers}
        for k, v in headers.items():
            self.requestHeaders.setRawHeaders(k, [v])

    def isSecure(self) -> bool:  # noqa: N802
        return False

    def registerProducer(self, producer: Any, streaming: bool) -> None:  # noqa: N802
        self.producer = producer

    def unregisterProducer(self) -> None:  # noqa: N802
        self.producer = None

    @property
    def cut(self) -> bool:
        return self.channel.reset if self.transport is None else self.transport.aborted


class Handle:
    def __init__(self) -> None:
        self.closed = False

    def pause(self) -> None: ...

    def resume(self) -> None: ...

    def close(self) -> None:
        self.closed = True


class Source:
    def __init__(self) -> None:
        self.sinks: list[Any] = []

    def open(self, request: Any, sink: Any) -> Handle:
        self.sinks.append(sink)
        return Handle()


class Linked:
    """`api.Siblings` of in-process workers: the other stacks' roots, asked directly."""

    def __init__(self) -> None:
        self.roots: list[HttpRoot] = []
        self.asked: list[tuple[str, str, dict[str, str]]] = []

    def renew(self, binding: str, host: str, tokens: Mapping[str, str]
              ) -> defer.Deferred[list[Mapping[str, Renewal]]]:
        self.asked.append((binding, host, dict(tokens)))
        asks: list[defer.Deferred[dict[str, Renewal]]] = [
            r.renew_for_sibling(host, tokens) for r in self.roots]
        return defer.gatherResults(asks).addCallback(list)

    def keys_changed(self, guard: str, kids: Any) -> None:
        raise AssertionError("inline keys never change")


class Stack:
    def __init__(self, key: SigningKey, challenge: float = 3,
                 siblings: Linked | None = None) -> None:
        self.key = key
        self.clock = MemoryReactorClock()
        self.clock.advance(NOW)
        self.events = EventLog("t", clock=self.clock.seconds)
        self.guard = JwtGuard("jwt0", {"issuer": ISSUER, "audience": AUDIENCE,
                                       "challenge": challenge},
                              self.clock, self.events, keys={key.kid: parse_jwk(key.jwk)})
        self.source = Source()
        self.sse = SseServer("sse", self.source, self.clock, self.events)  # type: ignore[arg-type]
        auth = Authorization({"jwt0": self.guard}, {"jwt0": Credentials.from_options(
            {"headers": {"authorization": "Bearer {credentials}"}})})
        self.leases = auth.leases
        self.root = HttpRoot("http0", [HttpRoute((), self.sse, {"jwt0": ("read",)})], None,
                             AccessControl.from_options(None), self.events, auth,
                             siblings=siblings)

    def token(self, ttl: float, sub: str = "alice", scope: str = "read") -> str:
        return self.key.token(sub=sub, scope=scope, ttl=ttl, now=self.clock.seconds())

    def request(self, method: bytes = b"GET", token: str | None = None, port: int = 5000,
                host: str = "10.0.0.1", h2: bool = False,
                content_type: bytes | None = None) -> tuple[Request, Any]:
        headers = {}
        if token is not None:
            headers[b"authorization"] = b"Bearer " + token.encode()
        if content_type is not None:
            headers[b"content-type"] = content_type
        req = Request(b"/events", method, host, port, h2, headers)
        return req, self.root.render(req)

    def open(self, token: str, **kw: Any) -> Request:
        req, body = self.request(token=token, **kw)
        assert body is NOT_DONE_YET and req.responseCode == 200, (req.responseCode, body)
        return req

    def renew(self, token: str | None, **kw: Any) -> int:
        req, body = self.request(b"POST", token, content_type=b"application/x-challenge-response",
                                 **kw)
        assert isinstance(body, bytes) or (body is NOT_DONE_YET and req.finished), \
            "siblings answer at once"
        #: What the client read: a 204 has no body, a refusal says why in plain text.
        self.body = body if isinstance(body, bytes) else b"".join(req.written)
        return int(req.responseCode)

    def failures(self) -> list[str]:
        return [line.split("GUARD_JWT_AUTHORIZATION_FAILED ", 1)[1] for line in self.events.recent
                if "GUARD_JWT_AUTHORIZATION_FAILED" in line]


@pytest.fixture(scope="module")
def key() -> SigningKey:
    return rsa_key()


def _sent(req: Request) -> bytes:
    return b"".join(req.written)


@pytest.mark.parametrize("h2", [False, True])
def test_challenge_at_exp_minus_challenge_then_cut_at_exp(key: SigningKey, h2: bool) -> None:
    s = Stack(key)
    req = s.open(s.token(ttl=5), h2=h2)
    s.clock.advance(1.99)
    assert CHALLENGE not in _sent(req)
    s.clock.advance(0.01)
    assert _sent(req).endswith(CHALLENGE)
    assert CHALLENGE == (b'event:challenge\ndata:{"method":"POST","headers":'
                         b'{"content-type":"application/x-challenge-response"}}\n\n')
    s.source.sinks[0].write(b"data:before\n\n")
    s.clock.advance(2.99)
    assert not req.cut
    s.clock.advance(0.01)
    assert req.cut, "HTTP/2: RST_STREAM; HTTP/1.1: connection aborted"
    written = len(req.written)
    s.source.sinks[0].write(b"data:after\n\n")
    s.clock.advance(30)
    assert len(req.written) == written, "not one byte after the expiry"
    assert not req.finished, "cut, not a finished 200 that would invite a reconnect"
    assert len(s.leases) == 0 and s.clock.getDelayedCalls() == []


def test_a_renewal_moves_both_deadlines(key: SigningKey) -> None:
    s = Stack(key)
    req = s.open(s.token(ttl=5), port=5001)
    s.clock.advance(2.5)
    assert s.renew(s.token(ttl=10), port=5002) == 204, "HTTP/1.1: from another connection"
    s.clock.advance(3)  # past the old exp
    assert not req.cut
    assert _sent(req).count(CHALLENGE) == 1
    s.clock.advance(6.5)  # new exp - challenge = 2.5 + 7
    assert _sent(req).count(CHALLENGE) == 2
    s.clock.advance(3)
    assert req.cut


def test_http2_one_post_renews_every_stream_of_the_identity_on_the_connection(
        key: SigningKey) -> None:
    s = Stack(key)
    mine = [s.open(s.token(ttl=5), h2=True, port=6000) for _ in range(3)]
    bobs = s.open(s.token(ttl=5, sub="bob"), h2=True, port=6000)
    elsewhere = s.open(s.token(ttl=5), h2=True, port=6001)
    s.clock.advance(2)
    assert s.renew(s.token(ttl=60), h2=True, port=6000) == 204
    s.clock.advance(3)
    assert [r.cut for r in mine] == [False, False, False]
    assert bobs.cut, "another identity's stream on the same connection is not renewed"
    assert elsewhere.cut, "HTTP/2: a stream on another connection is not renewed"


def test_http1_renewal_reaches_the_clients_other_connections_only(key: SigningKey) -> None:
    s = Stack(key)
    mine = [s.open(s.token(ttl=5), port=7000 + i) for i in range(3)]
    other_client = s.open(s.token(ttl=5), host="10.0.0.2", port=7000)
    s.clock.advance(2)
    assert s.renew(s.token(ttl=60), port=7100) == 204
    s.clock.advance(3)
    assert [r.cut for r in mine] == [False, False, False]
    assert other_client.cut


def test_renewals_that_renew_nothing_are_refused_with_a_reason(key: SigningKey) -> None:
    s = Stack(key)
    req = s.open(s.token(ttl=5, scope="read write"), port=5001)
    s.clock.advance(2)
    assert s.renew(None) == 401
    assert s.body.startswith(b"renewal refused: renewal without credentials\n")
    assert s.renew(s.token(ttl=60, sub="mallory")) == 403
    assert b"only streams opened with a token of the same identity" in s.body
    assert s.renew(s.token(ttl=60, scope="read")) == 403, "drops a role the stream had"
    assert s.renew(s.token(ttl=60), host="10.9.9.9") == 403, "no stream of that client"
    assert s.body.startswith(b"renewal refused: renewal with no stream to renew\n")
    assert b"keep the stream open" in s.body, "the body says what a renewal needs"
    assert s.renew("garbage") == 403
    assert s.body.startswith(b"renewal refused: malformed token")
    assert s.renew(s.key.sign({"iss": ISSUER, "aud": AUDIENCE, "scope": "read write",
                               "exp": s.clock.seconds() + 60})) == 403, "no identity"
    expired = s.token(ttl=1)
    s.clock.advance(1)
    assert s.renew(expired) == 403
    assert s.failures() == [
        "renewal without credentials",
        "renewal for mallory reaches only streams of another identity",
        "renewal for alice drops role(s) write",
        "renewal with no stream to renew",
        "malformed token: Not enough segments",
        "renewal with a token that names no identity",
        "token expired (alice)",
    ]
    s.clock.advance(2)
    assert req.cut


def test_refusals_of_the_stream_itself(key: SigningKey) -> None:
    s = Stack(key)
    req, _ = s.request()
    assert (req.responseCode, req.responseHeaders.getRawHeaders(b"www-authenticate")) == \
        (401, [b"Bearer"])
    req, _ = s.request(token=s.token(ttl=5, scope="other"))
    assert req.responseCode == 404, "good credentials without the role: no route, as in Zilla"
    req, _ = s.request(token=s.token(ttl=-1))
    assert req.responseCode == 403
    assert s.failures() == ["no credentials", "alice lacks role(s) read", "token expired (alice)"]
    assert s.source.sinks == [], "nothing was opened"


def test_a_token_inside_its_challenge_window_is_challenged_at_once(key: SigningKey) -> None:
    s = Stack(key)
    req = s.open(s.token(ttl=2))
    s.clock.advance(0)
    assert _sent(req).endswith(CHALLENGE)


def workers(key: SigningKey) -> tuple[Stack, Stack, Linked]:
    """Two workers of one daemon: `a` (asked by the tests, its siblings recorded) and `b`."""
    to_b, to_a = Linked(), Linked()
    a, b = Stack(key, siblings=to_b), Stack(key, siblings=to_a)
    to_b.roots, to_a.roots = [b.root], [a.root]
    return a, b, to_b


def advance(seconds: float, *stacks: Stack) -> None:
    for s in stacks:
        s.clock.advance(seconds)


def test_with_workers_an_http1_renewal_reaches_the_clients_streams_on_every_worker(
        key: SigningKey) -> None:
    a, b, asked = workers(key)
    on_a = a.open(a.token(ttl=5), port=7000)
    on_b = b.open(b.token(ttl=5), port=7001)
    bobs = b.open(b.token(ttl=5, sub="bob"), port=7002)
    other_client = b.open(b.token(ttl=5), host="10.0.0.2", port=7000)
    h2_on_b = b.open(b.token(ttl=5), h2=True, port=7003)
    advance(2, a, b)
    fresh = a.token(ttl=60)
    assert a.renew(fresh, port=7100) == 204
    assert asked.asked == [("http0", "10.0.0.1", {"jwt0": fresh})]
    advance(3, a, b)
    assert not on_a.cut and not on_b.cut
    assert bobs.cut and other_client.cut, "only the same identity, of the same client"
    assert h2_on_b.cut, "an HTTP/2 stream is renewed from its own connection only"


def test_with_workers_an_http2_renewal_reaches_the_clients_http1_streams_too(
        key: SigningKey) -> None:
    a, b, _ = workers(key)
    h1_on_b = b.open(b.token(ttl=5), port=7001)
    advance(2, a, b)
    assert a.renew(a.token(ttl=60), h2=True, port=7100) == 204, "as in one process"
    advance(3, a, b)
    assert not h1_on_b.cut
    assert a.failures() == b.failures() == []


def test_with_workers_a_renewal_only_a_sibling_could_renew_is_still_renewed(
        key: SigningKey) -> None:
    a, b, _ = workers(key)
    only_on_b = b.open(b.token(ttl=5), port=7001)
    advance(2, a, b)
    assert a.renew(a.token(ttl=60), port=7100) == 204, "a holds nothing, b renewed"
    advance(3, a, b)
    assert not only_on_b.cut
    assert a.failures() == b.failures() == []


def test_with_workers_the_most_telling_refusal_is_answered_and_reported_once(
        key: SigningKey) -> None:
    a, b, asked = workers(key)
    a.open(a.token(ttl=5, sub="bob"), port=7000)
    b.open(b.token(ttl=5, scope="read write"), port=7001)
    advance(2, a, b)
    assert a.renew(a.token(ttl=60, scope="read")) == 403, "b: alice's stream drops a role"
    assert a.renew(a.token(ttl=60, sub="mallory")) == 403
    assert a.renew(a.token(ttl=60), host="10.9.9.9") == 403
    assert a.renew("garbage") == 403
    assert a.renew(a.key.sign({"iss": ISSUER, "aud": AUDIENCE, "scope": "read",
                               "exp": a.clock.seconds() + 60})) == 403
    assert len(asked.asked) == 3, "a refused token, or one naming no identity, goes nowhere"
    assert a.failures() == [
        "renewal for alice drops role(s) write",
        "renewal for mallory reaches only streams of another identity",
        "renewal with no stream to renew",
        "malformed token: Not enough segments",
        "renewal with a token that names no identity",
    ]
    assert b.failures() == [], "the worker the client asked reports, once"
