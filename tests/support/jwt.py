"""Helpers for the JWT tests: real keys (generated with `cryptography`), tokens signed by PyJWT,
hand-made bad tokens, and a real JWKS server (stdlib HTTP in a thread) whose key set a test can
rotate or take down."""

from __future__ import annotations

import base64
import json
import subprocess
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import h2.events
import jwt
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from tests.support import zilla_config as zc
from tests.support.daemon import Daemon
from tests.support.h2client import H2SseClient, Stream

ISSUER = "https://issuer.test"
AUDIENCE = "ssekd-test"


@dataclass
class SigningKey:
    """A private key and its public JWK (with `kid` and `alg`)."""

    kid: str
    alg: str
    private: Any
    jwk: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        algo = jwt.get_algorithm_by_name(self.alg)
        public = json.loads(algo.to_jwk(self.private.public_key()))
        self.jwk = {**public, "kid": self.kid, "alg": self.alg, "use": "sig"}

    def sign(self, claims: dict[str, Any], headers: dict[str, Any] | None = None) -> str:
        return jwt.encode(claims, self.private, algorithm=self.alg,
                          headers={"kid": self.kid, **(headers or {})})

    def sign_bytes(self, payload: bytes) -> str:
        """A token whose payload is any bytes, properly signed (e.g. JSON that is no object)."""
        return jwt.PyJWS().encode(payload, self.private, algorithm=self.alg,
                                  headers={"kid": self.kid})

    def token(self, sub: str = "alice", ttl: float = 60.0, now: float | None = None,
              scope: str | list[str] | None = "read", **extra: Any) -> str:
        now = time.time() if now is None else now
        # A fractional exp (a NumericDate may have one): timing tests get the exact deadline.
        claims: dict[str, Any] = {"iss": ISSUER, "aud": AUDIENCE, "sub": sub, "exp": now + ttl,
                                  **extra}
        if scope is not None:
            claims["scope"] = scope
        return self.sign(claims)


def rsa_key(kid: str = "rsa1") -> SigningKey:
    return SigningKey(kid, "RS256", rsa.generate_private_key(public_exponent=65537, key_size=2048))


def ec_key(kid: str = "ec1") -> SigningKey:
    return SigningKey(kid, "ES256", ec.generate_private_key(ec.SECP256R1()))


def ed_key(kid: str = "ed1") -> SigningKey:
    return SigningKey(kid, "EdDSA", ed25519.Ed25519PrivateKey.generate())


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def raw_token(header: Any, payload: Any, signature: bytes = b"x") -> str:
    """A token put together by hand (for shapes PyJWT will not produce)."""
    def part(value: Any) -> str:
        data = value if isinstance(value, bytes) else json.dumps(value).encode()
        return b64url(data)
    return f"{part(header)}.{part(payload)}.{b64url(signature)}"


def tamper_payload(token: str, **changes: Any) -> str:
    header, payload, signature = token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    claims.update(changes)
    return ".".join((header, b64url(json.dumps(claims).encode()), signature))


def tamper_header(token: str, **changes: Any) -> str:
    header, payload, signature = token.split(".")
    fields = json.loads(base64.urlsafe_b64decode(header + "=" * (-len(header) % 4)))
    fields.update(changes)
    return ".".join((b64url(json.dumps(fields).encode()), payload, signature))


def hs256_with_public_key(key: SigningKey, claims: dict[str, Any]) -> str:
    """The classic confusion attack: HMAC "signed" with the RSA public key (PEM) as the secret.
    PyJWT refuses to encode that, so the HMAC is computed here."""
    import hashlib
    import hmac

    from cryptography.hazmat.primitives import serialization

    pem = key.private.public_key().public_bytes(serialization.Encoding.PEM,
                                                serialization.PublicFormat.SubjectPublicKeyInfo)
    head = b64url(json.dumps({"alg": "HS256", "typ": "JWT", "kid": key.kid}).encode())
    body = b64url(json.dumps(claims).encode())
    mac = hmac.new(pem, f"{head}.{body}".encode(), hashlib.sha256).digest()
    return f"{head}.{body}.{b64url(mac)}"


class JwksServer:
    """A real HTTP server in a thread: `/jwks.json` serves `keys` (a list a test may replace
    to rotate), `/token?sub=&scope=&ttl=` mints a token with `signer` (a development token
    service, as a login backend would be). `down()` stops it; `up()` starts it again on the
    same port."""

    def __init__(self, keys: list[SigningKey], signer: SigningKey | None = None,
                 port: int = 0) -> None:
        self.keys = keys
        self.signer = signer or (keys[0] if keys else None)
        self.requests: list[str] = []
        self.port = port
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/jwks.json"

    @property
    def token_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/token"

    def up(self) -> JwksServer:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
                owner.requests.append(self.path)
                url = urlsplit(self.path)
                if url.path == "/jwks.json":
                    body = json.dumps({"keys": [k.jwk for k in owner.keys]}).encode()
                elif url.path == "/token" and owner.signer is not None:
                    q = {k: v[0] for k, v in parse_qs(url.query).items()}
                    body = owner.signer.token(sub=q.get("sub", "alice"),
                                              scope=q.get("scope", "read"),
                                              ttl=float(q.get("ttl", "60"))).encode()
                else:
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Access-Control-Allow-Origin", "*")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        ThreadingHTTPServer.allow_reuse_address = True
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def down(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


# -- a guarded daemon --------------------------------------------------------------------------

WWW = Path(__file__).resolve().parents[2] / "www"  # the demo page of www/


def wait_keys_loaded(daemon: Daemon, detail: str = "") -> None:
    """Wait until `GUARD_JWT_KEYS_LOADED <detail>` has been said once per worker (once without
    workers): each worker's guard fetches its own keys, and one still fetching answers `503`."""
    daemon.wait_output(f"GUARD_JWT_KEYS_LOADED {detail}".rstrip(),
                       count=len(daemon.worker_pids()) or 1)


def config(port: int, bootstrap: str, keys: str | list[dict[str, Any]],
           challenge: int = 3) -> zc.Node:
    """The usual chain with guard jwt0 on /private/* (files) and /events/* and /mine/* (SSE,
    the latter keyed by the token's subject); /www/* open."""
    guarded = {"jwt0": ["read"]}
    http = zc.http_server(authorization=zc.authorization(),
                          routes=[zc.header_route("/private/*", "files_map", guarded=guarded),
                                  zc.header_route("/www/*", "files_map"),
                                  zc.header_route("/events/*", "sse", guarded=guarded)])
    routes = [zc.sse_route("/events/{topic}"),
              zc.sse_route("/mine/{topic}", guarded=guarded,
                           filters=[{"key": "${guarded['jwt0'].identity}"}])]
    return zc.sse_stack(port, bootstrap, http=http, sse=zc.sse_server(max_idle_time=5),
                        routes=routes,
                        extra=zc.files(WWW, paths=["/private/{path}", "/www/{path}"]),
                        guards={"jwt0": zc.jwt_guard(ISSUER, AUDIENCE, keys,
                                                     challenge=challenge)})


def write_config(folder: Path, port: int, bootstrap: str, keys: str | list[dict[str, Any]],
                 challenge: int = 3) -> Path:
    return zc.write(folder / f"zilla-jwt-{port}.yaml", config(port, bootstrap, keys, challenge))


# -- clients -----------------------------------------------------------------------------------

@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes


def curl(url: str, *args: str, token: str | None = None, timeout: float = 10) -> Answer:
    """One request with curl (HTTP/1.1, or HTTP/2 with `--http2-prior-knowledge` in `args`)."""
    auth = ["-H", f"Authorization: Bearer {token}"] if token is not None else []
    result = subprocess.run(["curl", "-s", "-m", str(timeout), "-D", "-", *auth, *args, url],
                            capture_output=True, timeout=timeout + 5)
    head, _, body = result.stdout.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    assert lines and lines[0].startswith("HTTP/"), (result.returncode, result.stderr)
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return Answer(int(lines[0].split()[1]), headers, body)


class CurlStream:
    """`curl -N` on an SSE URL, its output read as it arrives, with arrival times."""

    def __init__(self, url: str, *args: str, token: str | None = None) -> None:
        auth = ["-H", f"Authorization: Bearer {token}"] if token is not None else []
        self.proc = subprocess.Popen(["curl", "-sN", *auth, *args, url], stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL)
        self.chunks: list[tuple[float, bytes]] = []
        self.ended_at: float | None = None
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        import os
        while True:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            self.chunks.append((time.time(), chunk))
        self.proc.wait()
        self.ended_at = time.time()

    @property
    def text(self) -> str:
        return b"".join(c for _, c in self.chunks).decode("utf-8", "replace")

    def wait_for(self, text: str, timeout: float = 10) -> float:
        """When `text` first arrived (epoch seconds)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            seen = b""
            for at, chunk in list(self.chunks):
                seen += chunk
                if text.encode() in seen:
                    return at
            if self.ended_at is not None:
                break
            time.sleep(0.02)
        raise AssertionError(f"{text!r} not in stream: {self.text[-500:]!r}")

    def wait_end(self, timeout: float = 15) -> float:
        self._thread.join(timeout)
        assert self.ended_at is not None, "still streaming"
        return self.ended_at

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self._thread.join(5)


class H2Client(H2SseClient):
    """The tests' HTTP/2 client, plus any method and the raw bytes of each stream."""

    def __init__(self, port: int, **kw: Any) -> None:
        super().__init__(port, **kw)
        self.raw: dict[int, list[tuple[float, bytes]]] = {}

    def request(self, method: str, path: str, headers: dict[str, str] | None = None) -> int:
        stream_id = self.conn.get_next_available_stream_id()
        self.conn.send_headers(stream_id, [(":method", method), (":scheme", self.scheme),
                                           (":authority", self.authority), (":path", path),
                                           *(headers or {}).items()], end_stream=True)
        self.streams[stream_id] = Stream()
        self._flush()
        return stream_id

    def status(self, stream_id: int, timeout: float = 10) -> int:
        assert self.wait(lambda: ":status" in self.streams[stream_id].headers, timeout)
        return int(self.streams[stream_id].headers[":status"])

    def text(self, stream_id: int) -> str:
        return b"".join(c for _, c in self.raw.get(stream_id, [])).decode("utf-8", "replace")

    def _handle(self, events: list[h2.events.Event]) -> None:
        now = time.time()
        for event in events:
            if isinstance(event, h2.events.DataReceived) and event.data:
                self.raw.setdefault(event.stream_id, []).append((now, event.data))
        super()._handle(events)


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


RENEW = {"content-type": "application/x-challenge-response"}
