"""JWT guard benchmark: what a guard costs. (Not `bench/jwt.py`: a module named `jwt` beside the
others would read as PyJWT to anyone skimming `import jwt`.)

1. Token verification per connect, in-process: verifications/s of `JwtGuard.verify` for RS256
   (2048-bit RSA), ES256 (P-256) and EdDSA (Ed25519) tokens - everything a connect pays for its
   token (parse, key lookup, signature, claims).
2. Fan-out with every stream guarded against the same fan-out unguarded: `clients` SSE streams
   (each authorized with its own `?access_token=`, each holding a lease with its expiry timer)
   on one topic while a producer writes at a fixed rate, with `bench/fanout`'s rig and
   counting clients; delivered events/s compared (the goal: within 10%).

    python -m bench.jwt_guard            # 1,000 streams, 10 s per fan-out run
    python -m bench.jwt_guard --quick    # shorter runs, fewer verifications
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import jwt as pyjwt
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from twisted.internet.testing import MemoryReactorClock

from bench.fanout import rig as fanout
from bench.fanout.scenarios import fanout as run_fanout
from ssekd.guards.jwt import JwtGuard, JwtSession, parse_jwk
from ssekd.telemetry.events import EventLog
from tests.support import zilla_config as zc

ROOT = Path(__file__).resolve().parents[1]

ISSUER, AUDIENCE = "https://issuer.bench", "ssekd-bench"

def _keys() -> dict[str, tuple[Any, str]]:
    return {"RS256": (rsa.generate_private_key(public_exponent=65537, key_size=2048), "RS256"),
            "ES256": (ec.generate_private_key(ec.SECP256R1()), "ES256"),
            "EdDSA": (ed25519.Ed25519PrivateKey.generate(), "EdDSA")}


def _jwk(private: Any, alg: str, kid: str) -> dict[str, Any]:
    public = json.loads(pyjwt.get_algorithm_by_name(alg).to_jwk(private.public_key()))
    return {**public, "kid": kid, "alg": alg}


def _token(private: Any, alg: str, kid: str, ttl: float, sub: str = "bench") -> str:
    now = time.time()
    return pyjwt.encode({"iss": ISSUER, "aud": AUDIENCE, "sub": sub, "scope": "read",
                         "exp": int(now + ttl)}, private, algorithm=alg, headers={"kid": kid})


def verifications(count: int) -> dict[str, Any]:
    """verifications/s per algorithm, each over `count` tokens (distinct subjects)."""
    clock = MemoryReactorClock()
    clock.advance(time.time())
    out: dict[str, Any] = {}
    for alg, (private, _) in _keys().items():
        kid = f"k-{alg}"
        guard = JwtGuard("jwt0", {"issuer": ISSUER, "audience": AUDIENCE}, clock,
                         EventLog("bench"), keys={kid: parse_jwk(_jwk(private, alg, kid))})
        tokens = [_token(private, alg, kid, 3600, sub=f"user-{i}") for i in range(count)]
        t0 = time.perf_counter()
        for t in tokens:
            session = guard.verify(t)
        elapsed = time.perf_counter() - t0
        assert isinstance(session, JwtSession)
        out[alg] = {"verifications_per_s": round(count / elapsed),
                    "us_per_verification": round(elapsed / count * 1e6, 1)}
    return out


def guarded_config(jwk: dict[str, Any]) -> fanout.Config:
    """The fan-out config with the stream route guarded by a jwt guard that trusts `jwk`; the
    rest of the graph (sse-kafka, kafka, telemetry) is the unguarded benchmark's, unchanged."""
    def config(port: int, bootstrap: str, metrics_port: int) -> zc.Node:
        built = fanout.config(port, bootstrap, metrics_port)
        built["guards"] = {"jwt0": zc.jwt_guard(ISSUER, AUDIENCE, [jwk], challenge=30)}
        built["bindings"]["tcp"] = zc.tcp_server(port)
        built["bindings"]["http"] = zc.http_server(
            authorization=zc.authorization(
                credentials={"query": {"access_token": "{credentials}"}}),
            routes=[zc.header_route("/events/*", "sse", guarded={"jwt0": ["read"]})])
        del built["bindings"]["http"]["exit"]
        return built
    return config


def guarded_template() -> tuple[fanout.Config, str]:
    """The fan-out config with the stream route guarded, and a token for it."""
    private = ec.generate_private_key(ec.SECP256R1())
    return (guarded_config(_jwk(private, "ES256", "bench")),
            _token(private, "ES256", "bench", 3600))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--clients", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=100)
    args = parser.parse_args(argv)
    q = args.quick
    seconds = 5 if q else 10
    results: dict[str, Any] = {"machine": {"cpus": os.cpu_count(),
                                           "python": sys.version.split()[0]}}
    results["verify"] = verifications(500 if q else 3000)
    runs: dict[str, Any] = {}
    template, token = guarded_template()
    for name, config, query in (("unguarded", fanout.config, ""),
                                ("guarded", template, f"?access_token={token}")):
        rig = fanout.Rig(config)
        try:
            run_fanout(rig, 50, args.rate, 2, query=query)  # warm the cache and consumer
            runs[name] = run_fanout(rig, args.clients, args.rate, seconds, query=query)
        finally:
            rig.close()
    results["fanout"] = runs
    g, u = runs["guarded"]["delivered_per_s"], runs["unguarded"]["delivered_per_s"]
    results["guarded_vs_unguarded"] = round(g / u, 3) if u else None
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "jwt.json").write_text(json.dumps(results, indent=2) + "\n")
    print_table(results)
    return 0


def print_table(r: dict[str, Any]) -> None:
    print(f"\nssekd jwt guard benchmark ({r['machine']['cpus']} cpus)\n")
    print("token verification per connect (JwtGuard.verify, one thread):")
    for alg, v in r["verify"].items():
        print(f"  {alg:>6}: {v['verifications_per_s']:>8,}/s  ({v['us_per_verification']} us each)")
    print("\nfan-out, every stream counted:")
    print(f"{'':>10} {'clients':>8} {'ev/s/cl':>8} {'delivered/s':>12} {'complete':>11} "
          f"{'p50 ms':>8} {'p99 ms':>8} {'daemon %':>9} {'load':>5}")
    for name, x in r["fanout"].items():
        print(f"{name:>10} {x['clients']:>8} {x['rate']:>8.0f} {x['delivered_per_s']:>12,} "
              f"{x['complete']:>5}/{x['clients']:<5} {x['p50_ms']:>8} {x['p99_ms']:>8} "
              f"{x['daemon_cpu_pct']:>9} {x['load_avg']:>5}")
    print(f"\nguarded / unguarded delivered: {r['guarded_vs_unguarded']}")


if __name__ == "__main__":
    sys.exit(main())
