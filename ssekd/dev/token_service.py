"""A development token service, so `make run CONFIG=etc/zilla-jwt.yaml` runs the guarded demo on
a fresh machine, the way `ssekd.dev.certs` makes its TLS store.

    python -m ssekd.dev.token_service --key etc/jwt/dev-key.pem --port 7180 \
        --issuer http://localhost:7180 --audience ssekd-demo

creates the key when it is missing (EC P-256, PEM, readable by its owner only) and serves

* `GET /jwks.json`: the public key as a JWKS document - what the guard's `keys` URL points at;
* `GET /token?sub=demo&scope=read&ttl=30`: a fresh token signed with the key, as a login backend
  would hand one to a signed-in page (the demo page fetches one here to answer a challenge).

It signs anything for anyone: a stand-in for an identity provider on a developer's machine,
never to be exposed. It uses the standard library's HTTP server (a separate process: it has no
reactor to block).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

KEY_NAME = "dev-key.pem"
DEFAULT_TTL = 30.0
ALG = "ES256"


def ensure_dev_key(path: Path) -> ec.EllipticCurvePrivateKey:
    """The development signing key at `path`, created (mode 600) when missing."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        key = ec.generate_private_key(ec.SECP256R1())
        pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(pem)
    loaded = serialization.load_pem_private_key(path.read_bytes(), password=None)
    if not isinstance(loaded, ec.EllipticCurvePrivateKey):
        raise ValueError(f"{path}: expected an EC private key")
    return loaded


def kid_of(key: ec.EllipticCurvePrivateKey) -> str:
    """A stable key id: the start of the SHA-256 of the public key, so a new key is a new kid."""
    der = key.public_key().public_bytes(serialization.Encoding.DER,
                                        serialization.PublicFormat.SubjectPublicKeyInfo)
    return "dev-" + hashlib.sha256(der).hexdigest()[:16]


def jwks(key: ec.EllipticCurvePrivateKey) -> dict[str, Any]:
    public = json.loads(jwt.get_algorithm_by_name(ALG).to_jwk(key.public_key()))
    return {"keys": [{**public, "kid": kid_of(key), "alg": ALG, "use": "sig"}]}


def mint(key: ec.EllipticCurvePrivateKey, issuer: str | None, audience: str | None,
         sub: str = "demo", scope: str = "read", ttl: float = DEFAULT_TTL) -> str:
    now = int(time.time())
    claims: dict[str, Any] = {"sub": sub, "scope": scope, "iat": now, "exp": now + int(ttl)}
    if issuer:
        claims["iss"] = issuer
    if audience:
        claims["aud"] = audience
    return jwt.encode(claims, key, algorithm=ALG, headers={"kid": kid_of(key)})


def serve(key: ec.EllipticCurvePrivateKey, host: str, port: int, issuer: str | None,
          audience: str | None) -> ThreadingHTTPServer:
    document = json.dumps(jwks(key)).encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the standard library's name
            url = urlsplit(self.path)
            if url.path == "/jwks.json":
                body, kind = document, "application/json"
            elif url.path == "/token":
                q = {k: v[0] for k, v in parse_qs(url.query).items()}
                try:
                    ttl = min(float(q.get("ttl", DEFAULT_TTL)), 86400.0)
                except ValueError:
                    ttl = DEFAULT_TTL
                body = mint(key, issuer, audience, q.get("sub", "demo"), q.get("scope", "read"),
                            ttl).encode()
                kind = "text/plain"
            else:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Cache-Control", "no-store")
            self.send_header("Access-Control-Allow-Origin", "*")  # the demo page is elsewhere
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return ThreadingHTTPServer((host, port), Handler)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ssekd.dev.token_service",
        description="A development token service: serves the public key at /jwks.json and "
                    "signs a token for anyone at /token?sub=...&scope=...&ttl=... (what `make "
                    "run CONFIG=etc/zilla-jwt.yaml` starts). Never expose it.")
    parser.add_argument("--key", type=Path, default=Path("etc/jwt") / KEY_NAME,
                        help="the signing key, made when missing (default: etc/jwt/dev-key.pem)")
    parser.add_argument("--host", default="127.0.0.1",
                        help="the address to listen on (default: 127.0.0.1)")
    parser.add_argument("--port", type=int, default=7180,
                        help="the port to listen on (default: 7180)")
    parser.add_argument("--issuer", help="the tokens' `iss` claim")
    parser.add_argument("--audience", help="the tokens' `aud` claim")
    parser.add_argument("--mint", action="store_true", help="print one token and exit")
    parser.add_argument("--sub", default="demo", help="the minted token's subject (default: demo)")
    parser.add_argument("--ttl", type=float, default=DEFAULT_TTL,
                        help=f"the minted token's lifetime in seconds (default: {DEFAULT_TTL:g})")
    args = parser.parse_args(argv)
    key = ensure_dev_key(args.key)
    if args.mint:
        print(mint(key, args.issuer, args.audience, args.sub, ttl=args.ttl))
        return 0
    server = serve(key, args.host, args.port, args.issuer, args.audience)
    print(f"ssekd.dev.token_service: keys at http://{args.host}:{args.port}/jwks.json, tokens at "
          f"/token", file=sys.stderr)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
