"""Helpers for the JWT tests: real keys (generated with `cryptography`), tokens signed by PyJWT,
hand-made bad tokens, and a real JWKS server (stdlib HTTP in a thread) whose key set a test can
rotate or take down."""

from __future__ import annotations

import base64
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

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
        claims: dict[str, Any] = {"iss": ISSUER, "aud": AUDIENCE, "sub": sub,
                                  "exp": int(now + ttl) if ttl == int(ttl) else now + ttl,
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
