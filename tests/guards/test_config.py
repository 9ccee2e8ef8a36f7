"""Guards in a config: built by the engine (no longer refused), and the mistakes a config can
make with them reported with file and line, before anything listens."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from twisted.internet.defer import Deferred
from twisted.internet.testing import MemoryReactorClock

from ssekd.config.errors import ConfigError
from ssekd.engine import Engine
from ssekd.guards.jwt import JwtGuard
from ssekd.telemetry.events import EventLog
from tests.support.jwt import ec_key, rsa_key

CONFIG = """\
name: t
guards:
  jwt0:
    type: jwt
    options:
      issuer: https://issuer.test
      challenge: 3
      keys: {keys}
bindings:
  tcp0:
    type: tcp
    kind: server
    options: {{host: 127.0.0.1, port: 7001}}
    exit: http0
  http0:
    type: http
    kind: server
    options:
      authorization:
        {auth_guard}:
          credentials:
            headers: {{authorization: "Bearer {{credentials}}"}}
    routes:
      - when: [{{headers: {{":path": "/private/*"}}}}]
        exit: map0
        guarded: {{{route_guard}: [read]}}
    exit: map0
  map0:
    type: http-filesystem
    kind: proxy
    routes:
      - when: [{{path: "/{{path}}"}}]
        exit: fs0
        with: {{path: "${{params.path}}"}}
  fs0:
    type: filesystem
    kind: server
    options: {{location: .}}
"""


def _write(tmp_path: Path, keys: str, auth_guard: str = "jwt0", route_guard: str = "jwt0") -> Path:
    path = tmp_path / "zilla.yaml"
    path.write_text(CONFIG.format(keys=keys, auth_guard=auth_guard, route_guard=route_guard))
    return path


def _engine(path: Path) -> Engine:
    return Engine(path, MemoryReactorClock(), events=EventLog("t"), print_events=False)


def test_a_config_with_a_jwt_guard_is_built(tmp_path: Path) -> None:
    keys = json.dumps([rsa_key().jwk, ec_key().jwk])
    engine = _engine(_write(tmp_path, keys))
    graph = engine._pending
    assert graph is not None
    guard = graph.guards["jwt0"]
    assert isinstance(guard, JwtGuard)
    assert (sorted(guard.keys or {}), guard.challenge) == (["ec1", "rsa1"], 3.0)


def test_a_jwks_url_is_accepted(tmp_path: Path) -> None:
    graph = _engine(_write(tmp_path, "https://keys.example/jwks.json"))._pending
    assert graph is not None and isinstance(graph.guards["jwt0"], JwtGuard)
    assert "guards.jwt0" in graph.services(), "started with the daemon, to fetch its keys"


@pytest.mark.parametrize(("keys", "line", "path", "message"), [
    ("[{kty: RSA, kid: r1, alg: RS256, e: AQAB}]", 8, "guards.jwt0.options.keys[0]",
     "expected a usable JWK"),
    ('[{kty: EC, kid: e1, alg: ES256, crv: P-256, x: "AAAA", y: "AAAA"}]', 8,
     "guards.jwt0.options.keys[0]", "expected a usable JWK"),
    (json.dumps([ec_key().jwk, {**rsa_key().jwk, "alg": "ES256"}]), 8,
     "guards.jwt0.options.keys[1]", "expected a usable JWK"),
    ("[{kty: RSA, kid: r1, alg: none}]", 8, "guards.jwt0.options.keys[0].alg",
     "expected a signing algorithm other than none"),
    ("ftp://keys.example/jwks.json", 8, "guards.jwt0.options.keys",
     "expected a JWKS URL (http:// or https://) or a list of JWKs, got "
     "'ftp://keys.example/jwks.json'"),
    ("5", 8, "guards.jwt0.options.keys", "expected a JWKS URL (http:// or https://) or a list"),
])
def test_a_malformed_key_is_a_config_error_with_its_line(
        tmp_path: Path, keys: str, line: int, path: str, message: str) -> None:
    config = _write(tmp_path, keys)
    with pytest.raises(ConfigError) as raised:
        _engine(config)
    [issue] = raised.value.issues
    assert (issue.file, issue.line, issue.path) == (config, line, path), str(issue)
    assert message in issue.message
    assert str(issue).startswith(f"{config}:{line}: {path}: ")


@pytest.mark.parametrize(("auth_guard", "route_guard", "line", "path"), [
    ("jwt9", "jwt0", 20, "bindings.http0.options.authorization.jwt9"),
    ("jwt0", "nope", 26, "bindings.http0.routes[0].guarded.nope"),
])
def test_naming_an_unknown_guard_is_a_config_error(
        tmp_path: Path, auth_guard: str, route_guard: str, line: int, path: str) -> None:
    config = _write(tmp_path, json.dumps([rsa_key().jwk]), auth_guard, route_guard)
    with pytest.raises(ConfigError) as raised:
        _engine(config)
    [issue] = raised.value.issues
    assert (issue.line, issue.path) == (line, path), str(issue)
    assert "is not defined under guards" in issue.message


def test_a_reload_keeps_an_unchanged_guard_and_rebuilds_what_a_changed_one_guards(
        tmp_path: Path) -> None:
    path = _write(tmp_path, "http://127.0.0.1:9/jwks.json")
    fetched: list[str] = []
    engine = _engine(path)
    assert engine._pending is not None
    guard = engine._pending.guards["jwt0"]
    assert isinstance(guard, JwtGuard)
    guard._fetch = lambda url: fetched.append(url) or Deferred()  # type: ignore[method-assign]
    engine.startService()
    assert guard.running and fetched == ["http://127.0.0.1:9/jwks.json"], "started: fetches"
    assert engine.reload()
    graph = engine.graph
    assert graph is not None and graph.guards["jwt0"] is guard and guard.running
    assert {"http0", "map0", "fs0", "tcp0"} <= graph.reused
    path.write_text(path.read_text().replace("challenge: 3", "challenge: 5"))
    assert engine.reload()
    graph = engine.graph
    assert graph is not None
    new = graph.guards["jwt0"]
    assert new is not guard and new.challenge == 5.0 and not guard.running
    assert "http0" not in graph.reused, "it checks tokens with the new guard"
    assert {"map0", "fs0"} <= graph.reused
    engine.stopService()
