"""`make run`: everything a fresh machine needs around the daemon, then the daemon.

    python -m ssekd.dev --config etc/zilla.yaml [--dev-broker] [--dev-tokens] [--no-demo]

1. A development TLS store for each vault store the config names that does not exist yet
   (`ssekd.devcert`, password `$KEYSTORE_PASSWORD`, else the documented dev password).
2. With `--dev-broker` (as `make run` passes it), the development broker (tansu) on each local
   address a binding connects to (a kafka client's `servers`) when nothing listens there. A real
   Kafka that already listens is used as it is. Without the flag nothing is started, only
   reported: on a production host whose Kafka is briefly down, an empty fake broker on its
   address would take the daemon's connections and serve nothing.
3. The demo producer (`ssekd produce`) writing to the bootstrap topics, when we started the broker.
4. With `--dev-tokens` (as `make run` passes it), for a guard whose `keys` is a JWKS URL on this
   machine where nothing listens (as in `etc/zilla-jwt.yaml`), the development token service
   (`ssekd.devtoken`) there, with a key it creates under the config's folder
   (`jwt/dev-key.pem`), and a `?token=` link to the demo page. Never without the flag: a token
   service with a key of its own must not stand in for a production JWKS endpoint.
5. `twistd -n ssekd --config …` in the foreground. Ctrl-C or SIGTERM stops all of it.

What a binding connects to and consumes comes from its kind (`KindSpec.connects_to`,
`KindSpec.bootstrap_topics`): this launcher names no binding type.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

from ssekd.bindings.registry import Registry, discover
from ssekd.broker import Broker, port_open, start_broker, stop_process
from ssekd.config import ConfigError
from ssekd.config.load import load_config
from ssekd.config.model import Config

LOCAL_HOSTS = {"localhost", "127.0.0.1", "::1"}


def local_servers(config: Config, registry: Registry) -> list[tuple[str, int]]:
    """(host, port) of every server a binding connects to that is on this machine, once each."""
    found: list[tuple[str, int]] = []
    for b in config.bindings.values():
        connects_to = registry.kind(b).connects_to
        for host, port in connects_to(b.options) if connects_to is not None else ():
            if host in LOCAL_HOSTS:
                address = ("127.0.0.1" if host == "localhost" else host, port)
                found += [address] if address not in found else []
    return found


def bootstrap_topics(config: Config, registry: Registry) -> list[str]:
    """The topics bindings consume from start-up: where the demo producer writes."""
    topics: list[str] = []
    for b in config.bindings.values():
        consumed = registry.kind(b).bootstrap_topics
        if consumed is not None:
            topics += [t for t in consumed(b.options) if t not in topics]
    return topics


def dev_token_guards(config: Config) -> list[tuple[str, int, Any]]:
    """(host, port, options) of each guard whose keys come from a JWKS URL on this machine."""
    found = []
    for guard in config.guards.values():
        keys = guard.options.get("keys")
        if isinstance(keys, str):
            url = urlsplit(keys)
            if url.scheme == "http" and url.hostname in LOCAL_HOSTS and url.port:
                host = "127.0.0.1" if url.hostname == "localhost" else url.hostname
                found.append((host, url.port, guard.options))
    return found


def start_dev_tokens(config: Config, page: str) -> list[subprocess.Popen[bytes]]:
    """The development token service for each local JWKS URL nothing answers yet, and a link
    that opens the demo page with a token (and where to renew it)."""
    from ssekd import devtoken

    started = []
    key_path = config.folder / "jwt" / devtoken.KEY_NAME
    for host, port, options in dev_token_guards(config):
        if port_open(host, port):
            continue
        key = devtoken.ensure_dev_key(key_path)
        issuer, audience = options.get("issuer"), options.get("audience")
        args = ["--key", str(key_path), "--host", host, "--port", str(port)]
        args += ["--issuer", issuer] if issuer else []
        args += ["--audience", audience] if audience else []
        started.append(subprocess.Popen([sys.executable, "-m", "ssekd.devtoken", *args],
                                        start_new_session=True))
        deadline = time.monotonic() + 10
        while not port_open(host, port) and time.monotonic() < deadline:
            time.sleep(0.05)
        token = devtoken.mint(key, issuer, audience, ttl=devtoken.DEFAULT_TTL)
        renew = quote(f"http://{host}:{port}/token?sub=demo&scope=read", safe="")
        print(f"ssekd.dev: development tokens on http://{host}:{port} (key {key_path});\n"
              f"ssekd.dev: open the guarded demo: {page}?token={token}&renew={renew}",
              file=sys.stderr)
    return started


def ensure_dev_stores(config_path: Path) -> None:
    """Create a dev PKCS#12 for vault stores that are missing (only under the config folder)."""
    import yaml

    from ssekd import devcert

    data = yaml.safe_load(config_path.read_text()) or {}
    password = os.environ.setdefault("KEYSTORE_PASSWORD", devcert.DEV_PASSWORD)
    for vault in (data.get("vaults") or {}).values():
        store = ((vault or {}).get("options") or {}).get("keys", {}).get("store")
        if not store:
            continue
        path = (config_path.parent / store).resolve()
        if not path.exists() and config_path.parent.resolve() in path.parents:
            devcert.ensure_dev_store(path.parent, password)
            print(f"ssekd.dev: created development TLS store {path} "
                  f"(CA for curl --cacert: {path.parent / devcert.CA_NAME})", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", "-c", type=Path, default=Path("etc/zilla.yaml"))
    parser.add_argument("--dev-broker", action="store_true",
                        help="start the development broker on local Kafka addresses where "
                             "nothing listens (make run passes it)")
    parser.add_argument("--no-demo", action="store_true", help="do not run the demo producer")
    parser.add_argument("--dev-tokens", action="store_true",
                        help="start the development token service for a guard whose JWKS URL "
                             "is local and silent (make run passes it)")
    parser.add_argument("--page", default="http://localhost:7114/",
                        help="the demo page, for the link printed for a guarded config")
    args = parser.parse_args(argv)

    ensure_dev_stores(args.config)
    try:
        registry = discover()
        config = load_config(args.config, registry)
    except ConfigError as e:
        print(e, file=sys.stderr)
        return 1

    brokers: list[Broker] = []
    children: list[subprocess.Popen[bytes]] = []
    bin_dir = Path(sys.executable).parent
    try:
        if args.dev_tokens:
            children += start_dev_tokens(config, args.page)
        for host, port in local_servers(config, registry):
            if port_open(host, port):
                continue
            if args.dev_broker:
                brokers.append(start_broker(port, host))
                print(f"ssekd.dev: development broker (tansu) on {host}:{port}",
                      file=sys.stderr)
            else:
                print(f"ssekd.dev: nothing listens on {host}:{port} yet; the daemon retries "
                      f"until it does (--dev-broker starts a development broker there)",
                      file=sys.stderr)
        topics = bootstrap_topics(config, registry)
        if brokers and topics and not args.no_demo:
            for topic in topics:
                children.append(subprocess.Popen(
                    [sys.executable, "-m", "ssekd.produce", "--bootstrap",
                     brokers[0].bootstrap, "--topic", topic, "--rate", "2"],
                    start_new_session=True))
                print(f"ssekd.dev: demo producer writing 2 records/s to {topic}",
                      file=sys.stderr)
        # Own sessions: Ctrl-C reaches only this launcher, which stops the daemon once, in order.
        daemon = subprocess.Popen([str(bin_dir / "twistd"), "-n", "--pidfile=", "ssekd",
                                   "--config", str(args.config)], start_new_session=True)
        children.append(daemon)

        forwarded: list[int] = []

        def forward(signum: int, frame: object) -> None:
            # Once: a second SIGTERM during twistd's shutdown only makes it log a traceback.
            if not forwarded:
                forwarded.append(signum)
                daemon.send_signal(signal.SIGTERM)

        signal.signal(signal.SIGTERM, forward)
        signal.signal(signal.SIGINT, forward)
        return daemon.wait()
    finally:
        for child in children:
            stop_process(child)
        for broker in brokers:
            broker.stop()


if __name__ == "__main__":
    sys.exit(main())
