"""The jwt guard end to end: the real daemon (twistd) guarded by keys from a real JWKS server,
real tokens, curl for HTTP/1.1 and HTTP/2 (prior knowledge), the `h2` package for several
streams on one connection, and the tansu broker behind."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import jwt
import pytest

from ssekd.dev.broker import Broker, free_port
from tests.support.broker import Kafka
from tests.support.daemon import Daemon, start_daemon
from tests.support.jwt import (
    AUDIENCE,
    ISSUER,
    RENEW,
    CurlStream,
    H2Client,
    JwksServer,
    SigningKey,
    b64url,
    bearer,
    curl,
    ec_key,
    hs256_with_public_key,
    raw_token,
    rsa_key,
    tamper_header,
    tamper_payload,
    wait_keys_loaded,
    write_config,
)

H2 = "--http2-prior-knowledge"
CHALLENGE = ('event:challenge\ndata:{"method":"POST","headers":'
             '{"content-type":"application/x-challenge-response"}}\n\n')

pytestmark = [pytest.mark.daemon, pytest.mark.broker]


@dataclass
class Guarded:
    daemon: Daemon
    port: int
    jwks: JwksServer
    rsa: SigningKey
    ec: SigningKey

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def failures(self) -> list[str]:
        return [line.split("GUARD_JWT_AUTHORIZATION_FAILED ", 1)[1]
                for line in self.daemon.output().splitlines()
                if "GUARD_JWT_AUTHORIZATION_FAILED" in line]

    def wait_failure(self, reason: str, count: int = 1) -> None:
        deadline = time.monotonic() + 10
        while sum(reason in f for f in self.failures()) < count:
            assert time.monotonic() < deadline, (reason, self.failures())
            time.sleep(0.05)


@pytest.fixture(scope="module")
def guarded(kafka_broker: Broker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Guarded]:
    rsa, ec = rsa_key(), ec_key()
    jwks = JwksServer([rsa, ec]).up()
    port = free_port()
    config = write_config(tmp_path_factory.mktemp("jwt"), port, kafka_broker.bootstrap, jwks.url)
    daemon = start_daemon(config, wait_ports=[port])
    wait_keys_loaded(daemon, "2 keys")
    yield Guarded(daemon, port, jwks, rsa, ec)
    daemon.stop()
    jwks.down()


@pytest.fixture(scope="module")
def kafka(kafka_broker: Broker) -> Kafka:
    return Kafka(kafka_broker.bootstrap)


def _topic(kafka: Kafka) -> str:
    topic = kafka.topic(partitions=1, prefix="jwt")
    return topic


@pytest.mark.parametrize("version", ["http/1.1", "h2"])
@pytest.mark.broker
def test_no_token_401_good_token_streams_missing_role_404(guarded: Guarded, kafka: Kafka,
                                                          version: str) -> None:
    args = [H2] if version == "h2" else []
    topic = _topic(kafka)
    kafka.produce(topic, b"hello", key=b"k")
    kafka.flush()
    none = curl(guarded.url(f"/events/{topic}"), *args)
    assert (none.status, none.headers.get("www-authenticate")) == (401, "Bearer")
    good = curl(guarded.url(f"/events/{topic}"), *args, "-m", "1.5",
                token=guarded.rsa.token(ttl=30))
    assert good.status == 200 and good.headers["content-type"] == "text/event-stream"
    assert b"data:hello" in good.body
    also_query = curl(guarded.url(f"/events/{topic}?access_token={guarded.ec.token(ttl=30)}"),
                      *args, "-m", "1.5")
    assert also_query.status == 200 and b"data:hello" in also_query.body
    role = curl(guarded.url(f"/events/{topic}"), *args, token=guarded.rsa.token(scope="other"))
    assert role.status == 404  # a good token without the route's role finds no route (Zilla's)
    guarded.wait_failure("alice lacks role(s) read")
    # static files behind login, and a role required by an sse-kafka route
    assert curl(guarded.url("/private/index.html"), *args).status == 401
    page = curl(guarded.url("/private/index.html"), *args, token=guarded.ec.token())
    assert page.status == 200 and b"<html" in page.body.lower()
    assert curl(guarded.url(f"/mine/{topic}"), *args).status == 401
    assert "access_token=…" in guarded.daemon.output(), "a query token never reaches the log"


def _bad_tokens(g: Guarded) -> list[tuple[str, str, str]]:
    rsa = g.rsa
    now = time.time()
    claims = {"iss": ISSUER, "aud": AUDIENCE, "sub": "alice", "exp": int(now + 60),
              "scope": "read"}
    good = rsa.token()
    return [
        ("expired", rsa.token(now=now - 120, ttl=60), "token expired"),
        ("not yet valid", rsa.token(nbf=int(now + 600)), "token not yet valid (nbf)"),
        ("wrong issuer", rsa.sign({**claims, "iss": "https://evil.test"}), "wrong issuer"),
        ("wrong audience", rsa.sign({**claims, "aud": "other"}), "wrong audience"),
        ("unknown kid", rsa_key("nobody").token(), "unknown kid 'nobody'"),
        ("alg none", raw_token({"alg": "none", "kid": "rsa1"}, claims, b""),
         "unsigned token (alg none) refused"),
        ("hs256 with the rsa public key", hs256_with_public_key(rsa, claims),
         "alg HS256 does not match key 'rsa1' (RS256)"),
        ("tampered payload", tamper_payload(good, sub="mallory"), "signature does not verify"),
        ("tampered header", tamper_header(good, typ="other"), "signature does not verify"),
        ("missing exp", rsa.sign({k: v for k, v in claims.items() if k != "exp"}),
         "missing exp claim"),
        ("over 8 KiB", rsa.token(pad="x" * 9000), "token longer than 8192 bytes"),
        ("garbage", "%%%not.base64%%%.***", "malformed token"),
        ("json not an object", rsa.sign_bytes(b'["alice"]'), "malformed token"),
        ("header not json", f"{b64url(b'nope')}.{b64url(b'{}')}.x", "malformed token"),
    ]


@pytest.mark.parametrize("version", ["http/1.1", "h2"])
def test_every_bad_token_is_refused_with_its_reason(guarded: Guarded, version: str) -> None:
    args = [H2] if version == "h2" else []
    bad = _bad_tokens(guarded)
    for name, token, reason in bad:
        before = sum(reason in f for f in guarded.failures())
        for path in ("/events/anything", "/private/index.html"):
            answer = curl(guarded.url(path), *args, token=token)
            assert answer.status == 403, (name, path, answer)
            assert "www-authenticate" not in answer.headers
        guarded.wait_failure(reason, before + 2)
    output = guarded.daemon.output()
    assert "Traceback" not in output
    for name, token, _ in bad:
        longest = max(token.split("."), key=len)[:40]
        assert longest not in output, f"{name}: never the token itself"


@pytest.mark.broker
def test_challenge_then_renewal_keeps_the_stream_going(guarded: Guarded, kafka: Kafka) -> None:
    """On the wire: the challenge event `challenge` (2) seconds before the token expires, and a
    renewal POST from another connection answered 204, which the daemon gives only when it
    renewed a stream (one that renews nothing is a 403 with its reason); the stream goes on.
    That the renewal moves the cut past the old `exp` is shown on the injected clock
    (guards/test_continuous.py::test_a_renewal_moves_both_deadlines), without waiting for it."""
    topic = _topic(kafka)
    token = guarded.rsa.token(ttl=4)
    exp = float(jwt.decode(token, options={"verify_signature": False})["exp"])
    stream = CurlStream(guarded.url(f"/events/{topic}"), token=token)
    try:
        challenged = stream.wait_for(CHALLENGE, timeout=5)
        assert challenged < exp, (challenged, exp)
        renewal = curl(guarded.url("/any/path"), "-X", "POST", "-H",
                       "Content-Type: application/x-challenge-response",
                       token=guarded.rsa.token(ttl=30))
        assert renewal.status == 204
        kafka.produce(topic, b"after-renewal", key=b"k")
        kafka.flush()
        stream.wait_for("data:after-renewal")
        assert stream.ended_at is None
    finally:
        stream.stop()


class Producer:
    """Writes a record every 50 ms while a test watches a stream end."""

    def __init__(self, kafka: Kafka, topic: str) -> None:
        self.kafka, self.topic = kafka, topic
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        n = 0
        while not self.done.wait(0.05):
            self.kafka.produce(self.topic, b"tick-%d" % n, key=b"k")
            self.kafka.flush()
            n += 1

    def stop(self) -> None:
        self.done.set()
        self.thread.join(5)


@pytest.mark.broker
def test_unrenewed_streams_end_at_exp_and_nothing_follows(guarded: Guarded,
                                                          kafka: Kafka) -> None:
    topic = _topic(kafka)
    producer = Producer(kafka, topic)
    token = guarded.rsa.token(ttl=4)
    exp = float(jwt.decode(token, options={"verify_signature": False})["exp"])
    h1 = CurlStream(guarded.url(f"/events/{topic}"), token=token)
    h2 = H2Client(guarded.port)
    sid = h2.open(f"/events/{topic}", bearer(token))
    try:
        h1.wait_for("data:tick-")
        assert h2.wait(lambda: h2.streams[sid].reset, timeout=8), "HTTP/2: RST_STREAM"
        ended = h1.wait_end()
        assert exp - 0.1 < ended < exp + 0.5, ended - exp
        assert "data:tick-" in h2.text(sid) and CHALLENGE in h2.text(sid)
        assert all(at < exp + 0.05 for at, _ in h1.chunks), "HTTP/1.1: a byte after exp"
        assert all(at < exp + 0.05 for at, _ in h2.raw[sid]), "HTTP/2: a byte after exp"
        h2.pump(1.0)
        assert all(at < exp + 0.05 for at, _ in h2.raw[sid])
        assert h2.terminated is None, "only the stream ends, not the connection"
    finally:
        producer.stop()
        h1.stop()
        h2.close()


@pytest.mark.broker
def test_http2_one_post_renews_every_stream_of_its_identity_on_the_connection(
        guarded: Guarded, kafka: Kafka) -> None:
    """Real HTTP/2 connections: alice's POST on the connection of her streams is answered 204
    (it renewed them), bob's on a connection of alice's streams 403 with its reason, and every
    stream goes on. Which streams survive their `exp` after these POSTs is shown on the injected
    clock (guards/test_continuous.py::test_http2_one_post_renews_every_stream_of_the_identity_
    on_the_connection); the cut itself on the wire by test_unrenewed_streams_end_at_exp_..."""
    topic = _topic(kafka)
    renewed, refused = H2Client(guarded.port), H2Client(guarded.port)
    try:
        token = guarded.rsa.token(ttl=30)
        mine = [renewed.open(f"/events/{topic}", bearer(token)) for _ in range(3)]
        others = [refused.open(f"/events/{topic}", bearer(token)) for _ in range(3)]
        for client, ids in ((renewed, mine), (refused, others)):
            assert all(client.status(i) == 200 for i in ids)
        post = renewed.request("POST", "/renew", {**RENEW, **bearer(guarded.rsa.token(ttl=30))})
        assert renewed.status(post) == 204
        bob = refused.request("POST", "/renew",
                              {**RENEW, **bearer(guarded.rsa.token(sub="bob", ttl=30))})
        assert refused.status(bob) == 403
        guarded.wait_failure("renewal for bob reaches only streams of another identity")
        kafka.produce(topic, b"after-renewal", key=b"k")
        kafka.flush()
        for client, ids in ((renewed, mine), (refused, others)):
            assert client.wait(lambda c=client, s=ids: all("after-renewal" in c.text(i)
                                                           for i in s))
            assert not any(client.streams[i].reset for i in ids)
    finally:
        renewed.close()
        refused.close()


@pytest.mark.broker
def test_http1_renewal_reaches_the_clients_other_connections(guarded: Guarded,
                                                             kafka: Kafka) -> None:
    """Real HTTP/1.1 connections (one curl each): carol's POST from a connection of its own is
    answered 204 (it renewed her streams), one that drops a role 403, eve's 403 (only others'
    streams reach), none at all 401, each with its reason in the log. Which streams survive
    their `exp` after these POSTs is shown on the injected clock (guards/test_continuous.py::
    test_http1_renewal_reaches_the_clients_other_connections_only)."""
    topic = _topic(kafka)
    kafka.produce(topic, b"hello", key=b"k")
    kafka.flush()
    alice = guarded.rsa.token(ttl=30, sub="carol")
    dave = guarded.rsa.token(ttl=30, sub="dave")
    carols = [CurlStream(guarded.url(f"/events/{topic}"), token=alice) for _ in range(3)]
    daves = [CurlStream(guarded.url(f"/events/{topic}"), token=dave) for _ in range(3)]
    try:
        for s in carols + daves:
            s.wait_for("data:hello")
        post = ["-X", "POST", "-H", "Content-Type: application/x-challenge-response"]
        assert curl(guarded.url("/"), *post,
                    token=guarded.rsa.token(sub="carol", scope="")).status == 403
        guarded.wait_failure("renewal for carol drops role(s) read")
        assert curl(guarded.url("/"), *post, token=guarded.rsa.token(sub="carol")).status == 204
        assert curl(guarded.url("/"), *post, token=guarded.rsa.token(sub="eve")).status == 403
        guarded.wait_failure("renewal for eve reaches only streams of another identity")
        assert curl(guarded.url("/"), *post).status == 401
        kafka.produce(topic, b"after-renewal", key=b"k")
        kafka.flush()
        for s in carols + daves:
            s.wait_for("data:after-renewal")
            assert s.ended_at is None
    finally:
        for s in carols + daves:
            s.stop()


@pytest.mark.broker
def test_a_per_user_stream_shows_each_user_only_their_messages(guarded: Guarded,
                                                               kafka: Kafka) -> None:
    topic = _topic(kafka)
    for i in range(3):
        kafka.produce(topic, b"for-alice-%d" % i, key=b"alice")
        kafka.produce(topic, b"for-bob-%d" % i, key=b"bob")
    kafka.flush()
    alice = curl(guarded.url(f"/mine/{topic}"), "-m", "2", token=guarded.rsa.token(sub="alice"))
    bob = curl(guarded.url(f"/mine/{topic}"), H2, "-m", "2", token=guarded.ec.token(sub="bob"))
    assert alice.status == bob.status == 200
    assert [line for line in alice.body.decode().splitlines() if line.startswith("data:")] == \
        [f"data:for-alice-{i}" for i in range(3)]
    assert [line for line in bob.body.decode().splitlines() if line.startswith("data:")] == \
        [f"data:for-bob-{i}" for i in range(3)]
    # both streams are over now: a renewal finds nothing to renew
    renewal = curl(guarded.url("/mine/x"), "-X", "POST", "-H",
                   "Content-Type: application/x-challenge-response",
                   token=guarded.rsa.token(sub="alice"))
    assert renewal.status == 403
    guarded.wait_failure("renewal with no stream to renew")


@pytest.mark.broker
def test_jwks_key_rotation_is_picked_up_without_a_restart(kafka_broker: Broker,
                                                          tmp_path_factory: pytest.TempPathFactory
                                                          ) -> None:
    old, new = rsa_key("2026-old"), ec_key("2026-new")
    jwks = JwksServer([old]).up()
    port = free_port()
    config = write_config(tmp_path_factory.mktemp("rotate"), port, kafka_broker.bootstrap,
                          jwks.url)
    daemon = start_daemon(config, wait_ports=[port])
    try:
        wait_keys_loaded(daemon, "1 keys (2026-old)")
        url = f"http://127.0.0.1:{port}/private/index.html"
        assert curl(url, token=old.token()).status == 200
        jwks.keys = [new]  # the identity provider rotates
        assert curl(url, token=new.token()).status == 200, "fetched when a token named it"
        # with workers, the one that saw the new kid tells the others, which fetch too
        wait_keys_loaded(daemon, "1 keys (2026-new)")
        for _ in range(4):  # new connections: with workers, spread over them
            assert curl(url, token=old.token()).status == 403, "the retired key is gone"
        assert daemon.alive()
    finally:
        daemon.stop()
        jwks.down()


@pytest.mark.broker
def test_jwks_down_at_start_refuses_for_now_then_recovers(kafka_broker: Broker,
                                                          tmp_path_factory: pytest.TempPathFactory
                                                          ) -> None:
    key = rsa_key()
    jwks = JwksServer([key], port=free_port())  # not up yet
    port = free_port()
    config = write_config(tmp_path_factory.mktemp("down"), port, kafka_broker.bootstrap,
                          jwks.url)
    daemon = start_daemon(config, wait_ports=[port])
    try:
        daemon.wait_output("GUARD_JWT_KEYS_UNAVAILABLE")
        page = curl(f"http://127.0.0.1:{port}/private/index.html", token=key.token())
        assert page.status == 503 and int(page.headers["retry-after"]) >= 1
        sse = curl(f"http://127.0.0.1:{port}/events/x", token=key.token())
        assert sse.status == 200, "SSE: a 200 that ends, so the browser comes back"
        assert sse.headers["content-type"] == "text/event-stream"
        assert sse.body.startswith(b"retry:") and b"\n: try later: no keys yet from" in sse.body
        assert curl(f"http://127.0.0.1:{port}/www/index.html").status == 200, \
            "unguarded routes are served"
        jwks.up()
        deadline = time.monotonic() + 15
        while curl(f"http://127.0.0.1:{port}/private/index.html",
                   token=key.token()).status != 200:
            assert time.monotonic() < deadline, daemon.output()[-2000:]
            time.sleep(0.2)
        daemon.wait_output("GUARD_JWT_KEYS_LOADED 1 keys (rsa1)")
    finally:
        daemon.stop()
        jwks.down()
