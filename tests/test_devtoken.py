"""`make run CONFIG=etc/zilla-jwt.yaml`: the development token service its guard's JWKS URL
points at, and the tokens it mints, which the guard accepts."""

from __future__ import annotations

import json
import stat
import threading
import time
import urllib.request
from pathlib import Path

from twisted.internet.testing import MemoryReactorClock

from ssekd.config.load import load_config
from ssekd.dev import token_service
from ssekd.dev.broker import free_port
from ssekd.dev.launcher import dev_token_guards
from ssekd.guards.jwt import JwtGuard, JwtSession, parse_jwks
from ssekd.spi.plugins import discover
from ssekd.telemetry.events import EventLog

ROOT = Path(__file__).resolve().parents[1]


def test_the_guarded_demo_config_points_at_a_local_token_service() -> None:
    config = load_config(ROOT / "etc" / "zilla-jwt.yaml", discover(),
                         environ={"KEYSTORE_PASSWORD": "x"})
    [(host, port, options)] = dev_token_guards(config)
    assert (host, port, options["audience"]) == ("127.0.0.1", 7180, "ssekd-demo")
    plain = load_config(ROOT / "etc" / "zilla.yaml", discover(),
                        environ={"KEYSTORE_PASSWORD": "x"})
    assert dev_token_guards(plain) == [] and plain.guards == {}, "the default demo is unguarded"


def test_the_service_serves_its_key_and_tokens_the_guard_accepts(tmp_path: Path) -> None:
    key_path = tmp_path / "jwt" / token_service.KEY_NAME
    key = token_service.ensure_dev_key(key_path)
    assert stat.S_IMODE(key_path.stat().st_mode) == 0o600
    assert token_service.kid_of(token_service.ensure_dev_key(key_path)) == token_service.kid_of(key), "kept"
    port = free_port()
    server = token_service.serve(key, "127.0.0.1", port, "http://localhost:7180", "ssekd-demo")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        base = f"http://127.0.0.1:{port}"
        document = urllib.request.urlopen(f"{base}/jwks.json", timeout=5).read()
        reply = urllib.request.urlopen(f"{base}/token?sub=bob&ttl=20", timeout=5)
        token = reply.read().decode()
        assert reply.headers["Access-Control-Allow-Origin"] == "*"
    finally:
        server.shutdown()
        server.server_close()
    keys, skipped = parse_jwks(document)
    assert skipped == [] and list(keys) == [token_service.kid_of(key)]
    clock = MemoryReactorClock()
    clock.advance(time.time())
    guard = JwtGuard("jwt0", {"issuer": "http://localhost:7180", "audience": "ssekd-demo"},
                     clock, EventLog("t"), keys=keys)
    session = guard.verify(token)
    assert isinstance(session, JwtSession) and session.identity == "bob"
    assert session.roles == {"read"} and session.expires_at is not None
    assert 18 <= session.expires_at - clock.seconds() <= 20  # whole seconds
    assert json.loads(document)["keys"][0]["alg"] == "ES256"
