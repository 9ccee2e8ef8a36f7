"""Zilla's SSE + JWT examples on ssekd, as published: sse.kafka.fanout.jwt and sse.proxy.jwt
guard the stream on the **sse server's routes** (`routes[].guarded`), behind TLS and HTTP/2 with
the example's own key store and CA. Tokens are signed with the example's `private.pem` as its
test.sh signs them with jwt-cli (RS256, kid `example`, its issuer and audience). Beyond test.sh:
no token is `401`, a token without the route's role `403`, and continuous authorization works
the same as when the http or sse-kafka binding guards: a challenge `challenge` seconds before
`exp`, a renewal on the connection keeps the stream going, an unrenewed one is reset at `exp`."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jwt
import pytest

from tests.e2e.zilla_examples.conftest import RunExample
from tests.support.broker import Kafka
from tests.support.jwt import RENEW, H2Client, bearer
from tests.support.sse_stand_in import SseStandIn
from tests.support.wait import wait_until
from tests.support.zilla_examples import Example

pytestmark = [pytest.mark.daemon]

ISSUER = "https://auth.example.com"
AUDIENCE = "https://api.example.com"
CHALLENGE = "event:challenge"


def token(example: Example, scope: str | None = "proxy:stream", ttl: float = 86400.0,
          sub: str | None = None) -> str:
    """What test.sh's `jwt-cli encode --alg RS256 --kid example ... --secret @/private.pem`
    makes (plus a `sub`, which a renewal needs to tell its identity)."""
    claims: dict[str, Any] = {"iss": ISSUER, "aud": AUDIENCE, "exp": time.time() + ttl}
    if scope is not None:
        claims["scope"] = scope
    if sub is not None:
        claims["sub"] = sub
    private = (example.source / "private.pem").read_bytes()
    return jwt.encode(claims, private, algorithm="RS256", headers={"kid": "example"})


def curl(example: Example, url: str, *args: str, seconds: float = 3) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["curl", "-s", "--cacert", str(example.source / "test-ca.crt"),
                           "-N", "--max-time", str(seconds), *args, url],
                          capture_output=True, text=True, check=False)


def status(example: Example, url: str) -> str:
    done = curl(example, url, "--http2", "-o", "/dev/null", "-w", "%{http_code}")
    return done.stdout


@pytest.fixture
def fanout(run_example: RunExample) -> Example:
    return run_example("sse.kafka.fanout.jwt")


def test_fanout_jwt_streams_with_a_token_as_test_sh_does(fanout: Example) -> None:
    assert fanout.bootstrap is not None
    port = fanout.port(7143)
    kafka = Kafka(fanout.bootstrap)
    kafka.produce("events", b'{"id":1,"name":"Hello World!"}', b"1")
    kafka.flush()
    url = f"https://localhost:{port}/events?access_token={token(fanout)}"

    def streamed() -> bool:
        done = curl(fanout, url, "--http2", "-H", "Accept:text/event-stream")
        return [line for line in done.stdout.splitlines() if line.startswith("data:")] == \
            ['data:{"id":1,"name":"Hello World!"}']

    wait_until(streamed, 30, interval=1)
    assert status(fanout, f"https://localhost:{port}/events") == "401"
    assert status(fanout, f"https://localhost:{port}/events?access_token="
                          f"{token(fanout, scope='other')}") == "403"
    assert status(fanout, f"https://localhost:{port}/events?access_token=not.a.token") == "403"
    page = curl(fanout, f"https://localhost:{port}/index.html", "--http2")
    assert "<title>" in page.stdout  # the files beside the stream, unguarded


def test_the_sse_routes_guard_keeps_checking_the_token(fanout: Example) -> None:
    """The example's guard has `challenge: 10`: with tokens living 13 s, each stream gets
    `event:challenge` after 3 s; on one connection a renewal `POST` (a token for the same
    `sub`) keeps its stream going past the first token's `exp`, on another none does and the
    stream is reset at `exp`, nothing after it."""
    assert fanout.bootstrap is not None
    port = fanout.port(7143)
    ca = fanout.source / "test-ca.crt"
    kafka = Kafka(fanout.bootstrap)
    kafka.produce("events", b"before", b"k")
    kafka.flush()
    first = token(fanout, ttl=13, sub="alice")
    exp = jwt.decode(first, options={"verify_signature": False})["exp"]
    renewed, unrenewed = H2Client(port, ca=ca), H2Client(port, ca=ca)
    try:
        kept = renewed.open("/events", bearer(first))
        cut = unrenewed.open("/events", bearer(first))
        assert renewed.status(kept) == 200 and unrenewed.status(cut) == 200
        for client, sid in ((renewed, kept), (unrenewed, cut)):
            assert client.wait(lambda c=client, s=sid: CHALLENGE in c.text(s), timeout=12)
        post = renewed.request("POST", "/events",
                               {**RENEW, **bearer(token(fanout, ttl=60, sub="alice"))})
        assert renewed.status(post) == 204
        assert unrenewed.wait(lambda: unrenewed.streams[cut].reset, timeout=15), \
            "the unrenewed stream is reset at exp"
        assert all(at < exp + 0.05 for at, _ in unrenewed.raw[cut]), "a byte after exp"
        while time.time() < exp + 1:
            renewed.pump(0.2)
        kafka.produce("events", b"after exp", b"k2")
        kafka.flush()
        assert renewed.wait(lambda: "data:after exp" in renewed.text(kept), timeout=10)
        assert not renewed.streams[kept].reset
    finally:
        renewed.close()
        unrenewed.close()


@pytest.fixture
def stand_in() -> Iterator[SseStandIn]:
    upstream = SseStandIn()
    yield upstream
    upstream.close()


def test_sse_proxy_jwt_relays_the_upstream_as_test_sh_does(run_example: RunExample,
                                                           stand_in: SseStandIn,
                                                           tmp_path: Path) -> None:
    """test.sh: a stream of the relay, with a token, gets what is written to the upstream's
    input port (`echo '{ "data": "Hello, world" }' | nc localhost 7001`). The upstream is a
    stand-in for Zilla's extras-sse-server image at the example's `sse-server:8001`."""
    example = run_example("sse.proxy.jwt", kafka=False,
                          hosts={"host: sse-server": "host: 127.0.0.1",
                                 "port: 8001": f"port: {stand_in.port}"})
    port = example.port(7143)
    url = f"https://localhost:{port}/events?access_token={token(example)}"
    out = tmp_path / "stream.txt"
    with out.open("w") as sink:
        stream = subprocess.Popen(["curl", "-s", "--cacert", str(example.source / "test-ca.crt"),
                                   "--no-buffer", "-N", "--max-time", "5", url], stdout=sink)
        try:
            wait_until(lambda: stand_in.streams() >= 1, 5, what="the relay's upstream stream")
            stand_in.write_input(b'{ "data": "Hello, world" }\n')
            stream.wait(10)
        finally:
            if stream.poll() is None:
                stream.kill()
    assert "Hello, world" in out.read_text()
    assert status(example, f"https://localhost:{port}/events") == "401"
    assert status(example, f"https://localhost:{port}/events?access_token="
                           f"{token(example, scope='other')}") == "403"
