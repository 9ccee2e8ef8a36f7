"""`make run`: everything a fresh machine needs around the daemon, then the daemon.

    python -m ssekd.dev --config etc/zilla.yaml [--dev-broker] [--dev-tokens] [--no-demo]

0. When a port the config listens on is taken already (a `make run` in another terminal), one
   line says so and nothing is started.
1. A development TLS store for each vault store the config names that does not exist yet, or
   that is a development store the config's password does not open (`ssekd.dev.certs`, with the
   password the config gives the store).
2. With `--dev-broker` (as `make run` passes it), the development broker (tansu) on each local
   address a binding connects to (a kafka client's `servers`) when nothing listens there. A real
   Kafka that already listens is used as it is. Without the flag nothing is started, only
   reported: on a production host whose Kafka is briefly down, an empty fake broker on its
   address would take the daemon's connections and serve nothing.
3. The demo producer (`ssekd produce`) writing to the bootstrap topics, when we started the broker;
   and for the todo demo (`etc/zilla-todo.yaml`: writes to `<name>-commands` with a reply-to
   topic, `<name>-snapshots` among the bootstrap topics) its command service
   (`ssekd.todo_service`) instead, which writes those topics itself.
4. With `--dev-tokens` (as `make run` passes it), for a guard whose `keys` is a JWKS URL on this
   machine where nothing listens (as in `etc/zilla-jwt.yaml`), the development token service
   (`ssekd.dev.token_service`) there, with a key it creates under the config's folder
   (`jwt/dev-key.pem`), and a `?token=` link to the demo page. Never without the flag: a token
   service with a key of its own must not stand in for a production JWKS endpoint.
5. `twistd -n ssekd --config …` in the foreground, its output passed on line by line. Once it
   serves (it listens, and the bootstrap topics are assigned or Kafka is reported unreachable),
   one block says what to open - the pages, the streams, the http-kafka paths with what each
   method does there, the https address with its CA, the guarded demo's link - and that Ctrl-C
   stops it all. Ctrl-C or SIGTERM stops all of it.

What a binding connects to, consumes and writes comes from its kind (`KindSpec.connects_to`,
`KindSpec.bootstrap_topics`, `KindSpec.produces`), and what is served from the config's AsyncAPI
channels and endpoints: this launcher names no binding type.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import IO, Any
from urllib.parse import quote, urlsplit
from urllib.request import urlopen

from ssekd import asyncapi
from ssekd.config import ConfigError
from ssekd.config.load import load_config
from ssekd.config.model import Config
from ssekd.dev.broker import Broker, port_open, start_broker, stop_process
from ssekd.dev.watch import Helper, Watch, broker_process
from ssekd.spi.plugins import Registry, discover
from ssekd.workers.sockets import port_in_use, port_taken

LOCAL_HOSTS = {"localhost", "127.0.0.1", "::1"}
#: Seconds the guarded demo's link token lives: long enough to read the output and click it.
#: The page renews it (with tokens that live `token_service.DEFAULT_TTL`) before it runs out.
LINK_TOKEN_TTL = 300.0
#: Seconds the ready block waits for the bootstrap topics before it is printed anyway.
READY_WAIT = 20.0
#: Records per second the demo producer writes.
DEMO_RATE = 2


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


def command_services(config: Config, registry: Registry) -> list[tuple[str, str]]:
    """(prefix, reply topic) of each todo-style command topic: bindings write `<prefix>-commands`
    with a reply-to topic (`KindSpec.produces`) and `<prefix>-snapshots` is consumed from
    start-up. `ssekd.todo_service` answers those; the demo producer must not write there."""
    consumed = bootstrap_topics(config, registry)
    found: list[tuple[str, str]] = []
    for b in config.bindings.values():
        produces = registry.kind(b).produces
        for topic, reply_to in produces(b) if produces is not None else ():
            prefix = topic.removesuffix("-commands")
            if (reply_to is not None and prefix != topic and f"{prefix}-snapshots" in consumed
                    and (prefix, reply_to) not in found):
                found.append((prefix, reply_to))
    return found


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


def key_url_guards(config: Config) -> list[str]:
    """The jwt guards that fetch their keys from a URL once the daemon runs."""
    return [name for name, guard in config.guards.items()
            if guard.type == "jwt" and isinstance(guard.options.get("keys"), str)]


def listened_ports(config: Config) -> list[tuple[str, int]]:
    """(host, port) of every port the daemon will listen on (its tcp servers)."""
    ports: list[tuple[str, int]] = []
    for server in asyncapi.servers(config):
        host = str(config.bindings[server.binding].options.get("host", "0.0.0.0"))  # noqa: S104
        if (host, server.port) not in ports:
            ports.append((host, server.port))
    return ports


def start_dev_tokens(config: Config, page: str) -> tuple[list[Helper], list[str]]:
    """The development token service for each local JWKS URL nothing answers yet, and links
    that open the demo page with a token (and where to renew it)."""
    from ssekd.dev import token_service

    started = []
    links = []
    key_path = config.folder / "jwt" / token_service.KEY_NAME
    for host, port, options in dev_token_guards(config):
        if port_open(host, port):
            continue
        key = token_service.ensure_dev_key(key_path)
        issuer, audience = options.get("issuer"), options.get("audience")
        args = ["--key", str(key_path), "--host", host, "--port", str(port)]
        args += ["--issuer", issuer] if issuer else []
        args += ["--audience", audience] if audience else []
        service = Helper(f"the token service on {host}:{port}", partial(
            subprocess.Popen, [sys.executable, "-m", "ssekd.dev.token_service", *args],
            start_new_session=True))
        service.launch()
        started.append(service)
        deadline = time.monotonic() + 10
        while not port_open(host, port) and time.monotonic() < deadline:
            time.sleep(0.05)
        token = token_service.mint(key, issuer, audience, ttl=LINK_TOKEN_TTL)
        renew = quote(f"http://{host}:{port}/token?sub=demo&scope=read", safe="")
        say(f"development tokens on http://{host}:{port} (key {shown(key_path)})")
        links.append(f"{page}?token={token}&renew={renew}")
    return started, links


def ensure_dev_stores(config: Config) -> list[Path]:
    """Create a development PKCS#12 for each vault `keys` store under the config's folder that
    is missing, or that is a development store its configured password does not open (made
    with another one); return the CA files of the development stores the config uses."""
    from ssekd.dev import certs

    cas = []
    for vault in config.vaults.values():
        keys = (vault.options or {}).get("keys") or {}
        store = keys.get("store")
        if not store:
            continue
        path = config.resolve_path(str(store))
        password = keys.get("password")
        password = str(password) if password is not None else None
        inside = config.folder.resolve() in path.resolve().parents
        stale = path.exists() and certs.is_dev_store(path) and \
            not certs.store_is_current(path, password)
        if inside and (not path.exists() or stale):
            certs.ensure_dev_store(path.parent, password, force=True)
            say(f"{'made a new' if stale else 'created'} development TLS store "
                f"{shown(path)} (its CA, for curl --cacert: {shown(path.parent / certs.CA_NAME)})")
        if certs.is_dev_store(path):
            cas.append(path.parent / certs.CA_NAME)
    return cas


def shown(path: Path) -> str:
    """A path as short as it can be said from here."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def say(text: str) -> None:
    print(f"ssekd.dev: {text}", file=sys.stderr, flush=True)


@dataclass
class ReadyBlock:
    """What `make run` prints once the daemon serves: what to open, and how to stop."""

    config: Path
    urls: list[tuple[str, str]]
    links: list[str] = field(default_factory=list)
    stop_what: str = "ssekd"

    def text(self) -> str:
        width = max((len(u) for u, _ in self.urls), default=0)
        lines = [f"ssekd.dev: ssekd is serving {self.config}. Open:"]
        lines += [f"  {url:<{width}}  {what}" for url, what in self.urls]
        lines += [f"ssekd.dev: Ctrl-C stops {self.stop_what}."]
        for link in self.links:
            lines += ["ssekd.dev: the guarded demo page, with a token that lives "
                      f"{LINK_TOKEN_TTL / 60:g} minutes (the page renews it):", f"  {link}"]
        return "\n".join(lines)


def ready_block(config_path: Path, config: Config, cas: Sequence[Path], links: Sequence[str],
                started: Sequence[str]) -> ReadyBlock:
    """The pages and streams of the config, by listener: on the first plain port the page and
    each stream, on the first TLS port the page with the CA to trust."""
    urls: list[tuple[str, str]] = []
    found = asyncapi.channels(config)
    listed = asyncapi.servers(config)
    plain = next((s for s in listed if not s.secure), None)
    secure = next((s for s in listed if s.secure), None)
    if plain is not None:
        urls.append((f"{plain.url}/", "the demo page"))
        for c in found:
            if plain in c.servers:
                what = (f"topic {c.topic} as a stream" if c.topic else "a relayed stream") + \
                       (" (needs a token)" if c.guarded else
                        f": curl -N {plain.url}{c.address}")
                urls.append((f"{plain.url}{c.address}", what))
        for address, what in http_kafka_lines(config, plain):
            urls.append((f"{plain.url}{address}", what))
    if secure is not None:
        trust = f" (curl --cacert {shown(cas[0])})" if cas else ""
        urls.append((f"{secure.url}/", f"the same over TLS and HTTP/2{trust}"))
    urls += metrics_lines(config)
    stop = ", ".join(["ssekd", *started[:-1]]) + (f" and {started[-1]}" if started else "")
    return ReadyBlock(config_path, urls, list(links), stop)


def metrics_lines(config: Config) -> list[tuple[str, str]]:
    """The pages of the config's prometheus exporters (`localhost` for a loopback host)."""
    out = []
    for exporter in config.telemetry.exporters.values():
        if exporter.type != "prometheus":
            continue
        for e in exporter.options.get("endpoints", ()):
            host = str(e.get("host", "127.0.0.1"))
            # as the server URLs show theirs (`asyncapi.servers`), and IPv6's loopback too
            shown_host = "localhost" if host in asyncapi.LOCALHOST_SHOWN | {"::1"} else host
            out.append((f"http://{shown_host}:{e['port']}{e.get('path', '/metrics')}",
                        "the daemon's metrics, for Prometheus"))
    return out


def http_kafka_lines(config: Config, server: asyncapi.Server) -> list[tuple[str, str]]:
    """(address, what a request there does) for the http-kafka routes reached on `server`, one
    line per address: its methods, grouped by what they do (the async locations left out: a
    write answers with them)."""
    by_address: dict[str, dict[tuple[str, bool], list[str]]] = {}
    for e in asyncapi.endpoints(config):
        if server in e.servers and not e.polls:
            what = (f"a record to {e.topic}"
                    + (f", answered from {e.reply_to}" if e.reply_to else "") if e.sends else
                    f"the latest {'values' if e.merged else 'value'} of {e.topic}")
            doing = by_address.setdefault(e.address, {})
            doing.setdefault((what, bool(e.guarded)), []).append(e.method or "any method")
    lines = []
    for address, doing in by_address.items():
        parts = [f"{', '.join(methods)}: {what}" + (" (needs a token)" if guarded else "")
                 for (what, guarded), methods in doing.items()]
        lines.append((address, "; ".join(parts)))
    return lines


class DaemonOutput:
    """Passes the daemon's output on, line by line, and notes what says it serves: on threads
    of their own, so a daemon that writes a lot never waits on this launcher."""

    def __init__(self, process: subprocess.Popen[bytes], topics: Sequence[str],
                 guards: Sequence[str] = ()) -> None:
        self.lock = threading.Lock()
        self.waiting = set(topics)
        #: guards whose keys come from a URL and have not said they loaded them (or could not):
        #: their first line would otherwise land under the ready block's links
        self.guards_waiting = set(guards)
        self.kafka_unreachable = False
        self.changed = threading.Event()
        self.threads = [threading.Thread(target=self._pass_on, args=(src, dst), daemon=True)
                        for src, dst in ((process.stdout, sys.stdout),
                                         (process.stderr, sys.stderr)) if src is not None]
        for t in self.threads:
            t.start()

    def _pass_on(self, source: IO[bytes], sink: IO[str]) -> None:
        for raw in iter(source.readline, b""):
            line = raw.decode("utf-8", errors="replace")
            self._note(line)
            with self.lock:
                sink.write(line)
                sink.flush()

    def _note(self, line: str) -> None:
        if " BINDING_KAFKA_PARTITIONS_ASSIGNED " in line:
            topic = line.split(" BINDING_KAFKA_PARTITIONS_ASSIGNED ", 1)[1].split(" ", 1)[0]
            self.waiting.discard(topic)
            self.changed.set()
        elif " BINDING_KAFKA_BROKER_UNAVAILABLE " in line:
            self.kafka_unreachable = True
            self.changed.set()
        elif " GUARD_JWT_KEYS_LOADED " in line or " GUARD_JWT_KEYS_UNAVAILABLE " in line:
            # `namespace:guard [time] EVENT …`
            self.guards_waiting.discard(line.split(" ", 1)[0].rpartition(":")[2])
            self.changed.set()

    def print(self, text: str) -> None:
        with self.lock:
            print(text, flush=True)

    def join(self, timeout: float = 5.0) -> None:
        for t in self.threads:
            t.join(timeout)


def answers_ready(url: str) -> bool:
    """True when a GET of the readiness URL `url` answers 200."""
    plain = url.replace("//localhost:", "//127.0.0.1:", 1)  # an http URL of our own config
    try:
        with urlopen(plain, timeout=1) as answer:  # noqa: S310
            return bool(answer.status == 200)
    except (OSError, ValueError):
        return False  # 503 (an HTTPError) while loading, or not answering yet


def wait_serving(process: subprocess.Popen[bytes], output: DaemonOutput,
                 ports: Sequence[tuple[str, int]], readiness: Sequence[str] = (),
                 timeout: float = READY_WAIT) -> bool:
    """Wait until the daemon accepts connections on every port, its bootstrap topics are
    assigned (or Kafka is reported unreachable), its guards have fetched their keys (or said
    they could not) and its readiness URLs answer 200 (unless Kafka is unreachable: they will
    not before it is back), or `timeout` passed; False if it exited."""
    deadline = time.monotonic() + timeout
    for host, port in ports:
        probe = "127.0.0.1" if host in ("0.0.0.0", "", "localhost") else host  # noqa: S104
        probe = "::1" if probe == "::" else probe
        while not port_open(probe, port):
            if process.poll() is not None:
                return False
            if time.monotonic() > deadline:
                return True
            time.sleep(0.05)
    while ((output.waiting and not output.kafka_unreachable) or output.guards_waiting) \
            and time.monotonic() < deadline:
        if process.poll() is not None:
            return False
        output.changed.wait(0.1)
        output.changed.clear()
    waiting = list(readiness)
    while waiting and not output.kafka_unreachable and time.monotonic() < deadline:
        if process.poll() is not None:
            return False
        waiting = [url for url in waiting if not answers_ready(url)]
        if waiting:
            output.changed.wait(0.2)
            output.changed.clear()
    return process.poll() is None


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m ssekd.dev",
        description="What `make run` runs: prepare what the config needs on a development "
                    "machine (a TLS store, the development broker and demo producer, the "
                    "development token service), then run the daemon in the foreground and "
                    "say what to open once it serves. Ctrl-C stops all of it.")
    p.add_argument("--config", "-c", type=Path, default=Path("etc/zilla.yaml"),
                   help="the zilla.yaml to serve (default: etc/zilla.yaml)")
    p.add_argument("--dev-broker", action="store_true",
                   help="start the development broker on local Kafka addresses where nothing "
                        "listens (make run passes it)")
    p.add_argument("--no-demo", action="store_true", help="do not run the demo producer")
    p.add_argument("--dev-tokens", action="store_true",
                   help="start the development token service for a guard whose JWKS URL is "
                        "local and silent (make run passes it)")
    p.add_argument("--page", default=None,
                   help="the demo page, for the link printed for a guarded config (default: "
                        "/ on the config's first cleartext port)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    from ssekd.dev import certs

    # a config of one's own that reads the store password from the environment, as Zilla's
    # example does, runs with the development store's
    os.environ.setdefault("KEYSTORE_PASSWORD", certs.DEV_PASSWORD)
    try:
        registry = discover()
        config = load_config(args.config, registry)
    except ConfigError as e:
        print(e, file=sys.stderr)
        return 1
    ports = listened_ports(config)
    for host, port in ports:
        if port and port_in_use(host, port):
            say(port_taken(port, args.config))
            return 1
    cas = ensure_dev_stores(config)

    helpers: list[Helper] = []
    daemon: subprocess.Popen[bytes] | None = None
    started: list[str] = []
    links: list[str] = []
    bin_dir = Path(sys.executable).parent
    plain = next((s for s in asyncapi.servers(config) if not s.secure), None)
    page = args.page or (f"{plain.url}/" if plain is not None else "http://localhost:7114/")
    try:
        if args.dev_tokens:
            tokens, links = start_dev_tokens(config, page)
            helpers += tokens
            started += ["the token service"] if tokens else []
        brokers: list[Broker] = []
        for host, port in local_servers(config, registry):
            if port_open(host, port):
                continue
            if args.dev_broker:
                broker = Helper(f"the development broker on {host}:{port}",
                                partial(start_broker, port, host), broker_process)
                brokers.append(broker.launch())
                helpers.append(broker)
                say(f"development broker (tansu) on {host}:{port}")
            else:
                say(f"nothing listens on {host}:{port} yet; the daemon retries until it "
                    f"does (--dev-broker starts a development broker there)")
        started += ["the development broker"] if brokers else []
        topics = bootstrap_topics(config, registry)
        produced = list(topics)  # the todo demo's service writes its topics itself
        services = command_services(config, registry) if brokers and not args.no_demo else []
        for prefix, reply_to in services:
            service = Helper(f"the todo command service of {prefix}-commands", partial(
                subprocess.Popen, [sys.executable, "-m", "ssekd.todo_service", "--bootstrap",
                                   brokers[0].bootstrap, "--prefix", prefix],
                start_new_session=True))
            service.launch()
            helpers.append(service)
            produced = [t for t in produced if t not in (reply_to, f"{prefix}-snapshots")]
            say(f"todo command service answering {prefix}-commands")
        started += ["the todo command service"] if services else []
        if brokers and produced and not args.no_demo:
            for topic in produced:
                producer = Helper(f"the demo producer of {topic}", partial(
                    subprocess.Popen, [sys.executable, "-m", "ssekd.dev.demo_producer",
                                       "--bootstrap", brokers[0].bootstrap, "--topic", topic,
                                       "--rate", str(DEMO_RATE)], start_new_session=True))
                producer.launch()
                helpers.append(producer)
                say(f"demo producer writing {DEMO_RATE} records/s to {topic} (every 25th "
                    f"deletes its key)")
            started += ["the demo producer"]
        # Own sessions: Ctrl-C reaches only this launcher, which stops the daemon once, in order.
        # Unbuffered: its lines are passed on as they come, not when a pipe buffer fills.
        daemon = subprocess.Popen([str(bin_dir / "twistd"), "-n", "--pidfile=", "ssekd",
                                   "--config", str(args.config)], start_new_session=True,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  stdin=subprocess.DEVNULL,
                                  env={**os.environ, "PYTHONUNBUFFERED": "1"})
        output = DaemonOutput(daemon, topics, key_url_guards(config))
        running = daemon

        forwarded: list[int] = []

        def forward(signum: int, frame: object) -> None:
            # Once: a second SIGTERM during twistd's shutdown only makes it log a traceback.
            if not forwarded:
                forwarded.append(signum)
                running.send_signal(signal.SIGTERM)

        signal.signal(signal.SIGTERM, forward)
        signal.signal(signal.SIGINT, forward)
        if wait_serving(daemon, output, ports, asyncapi.readiness_urls(config)) \
                and not forwarded:
            output.print(ready_block(args.config, config, cas, links, started).text())
        # what was started beside the daemon is watched while it runs: started again when it
        # stops, everything stopped when it keeps stopping (ssekd.dev.watch)
        watch = Watch(helpers, say)
        kept = watch.until(lambda: forwarded != [] or running.poll() is not None)
        if not kept:
            forward(signal.SIGTERM, None)
        status = daemon.wait()
        output.join()
        return status if kept else 1
    finally:
        if daemon is not None:
            stop_process(daemon)
        for helper in helpers:
            if isinstance(helper.running, Broker):
                helper.running.stop()
            elif helper.running is not None:
                stop_process(helper.running)


if __name__ == "__main__":
    sys.exit(main())
