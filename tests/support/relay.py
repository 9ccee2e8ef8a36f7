"""An SSE relay (sse server -> sse client -> http client -> tcp client) in front of an upstream
ssekd serving Kafka topics: both real daemons on loopback ports, the upstream restartable on its
port, with a metrics page that counts the streams it serves."""

from __future__ import annotations

import re
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from ssekd.dev.broker import free_port
from tests.support import streamd
from tests.support import zilla_config as zc
from tests.support.daemon import Daemon, start_daemon
from tests.support.sse import SseClient
from tests.support.streamd import WWW


@dataclass
class Upstream:
    """The upstream ssekd: its config (kept, to start it again on the same ports)."""

    config: Path
    port: int
    metrics_port: int
    daemon: Daemon | None = None
    started: list[Daemon] = field(default_factory=list)

    def start(self) -> Daemon:
        self.daemon = start_daemon(self.config, wait_ports=[self.port, self.metrics_port])
        self.started.append(self.daemon)
        return self.daemon

    def kill(self) -> None:
        assert self.daemon is not None
        self.daemon.process.kill()
        self.daemon.process.wait(10)

    def metric(self, name: str) -> float:
        """A sample of the upstream sse server's metrics (`stream_active_sent`, ...)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics",
                                    timeout=10) as r:
            page = r.read().decode()
        m = re.search(rf'^{name}\{{[^}}]*binding="sse"[^}}]*\}} (\S+)$', page, re.M)
        return float(m.group(1)) if m else 0.0

    def stop(self) -> None:
        for d in self.started:
            d.stop()


def write_upstream(tmp: Path, bootstrap: str) -> Upstream:
    port, metrics_port = free_port(), free_port()
    config = streamd.config(bootstrap, port)
    config["telemetry"]["exporters"]["prom"] = {
        "type": "prometheus",
        "options": {"endpoints": [{"scheme": "http", "port": metrics_port, "path": "/metrics"}]}}
    return Upstream(zc.write(tmp / f"zilla-{port}.yaml", config), port, metrics_port)


@dataclass
class Relay:
    daemon: Daemon
    port: int

    def open(self, path: str, headers: dict[str, str] | None = None,
             timeout: float = 10.0) -> SseClient:
        return SseClient(self.port, path, headers, timeout)


def relay_config(tmp: Path, upstream_port: int, relay_options: str = "{retry: 200}",
                 http_options: str = "{}", tls_options: str | None = None,
                 trust_store: Path | None = None) -> tuple[Path, int]:
    """The relay's config on a free port: its sse client's options as YAML flow text, its http
    client's, and - for an https upstream - a tls client's, trusting `trust_store`."""
    port = free_port()
    tls: zc.Node = {}
    if tls_options is not None:
        tls = {"upstream_tls": {"type": "tls", "kind": "client", "vault": "upstream_trust",
                                "options": zc.flow(tls_options), "exit": "upstream_tcp"}}
    bindings: zc.Node = {
        "tcp": zc.tcp_server(port),
        "http": zc.http_server(routes=[zc.header_route("/www/*", "files_map")]),
        **zc.files(WWW),
        "sse": zc.sse_server("relay"),
        "relay": {"type": "sse", "kind": "client", "options": zc.flow(relay_options),
                  "routes": [{"when": [{"path": "/events/*"}], "exit": "upstream_http"}]},
        "upstream_http": {"type": "http", "kind": "client", "options": zc.flow(http_options),
                          "exit": "upstream_tls" if tls else "upstream_tcp"},
        **tls,
        "upstream_tcp": {"type": "tcp", "kind": "client",
                         "options": {"host": "127.0.0.1", "port": upstream_port}}}
    vaults = None
    if trust_store is not None:
        vaults = {"upstream_trust": {"type": "filesystem", "options": {"trust": {
            "store": str(trust_store), "type": "pkcs12",
            "password": "${{env.KEYSTORE_PASSWORD}}"}}}}
    config = zc.zilla("relay", bindings, vaults=vaults, telemetry=zc.stdout_telemetry())
    return zc.write(tmp / f"relay-{port}.yaml", config), port


def start_relay(tmp: Path, upstream_port: int, env: dict[str, str] | None = None,
                extra_args: list[str] | None = None, **kw: str | Path | None) -> Relay:
    config, port = relay_config(tmp, upstream_port, **kw)  # type: ignore[arg-type]
    return Relay(start_daemon(config, env=env, wait_ports=[port], extra_args=extra_args), port)


#: For a test whose subject is what one relay process holds (its ring, its count of upstream
#: URLs): each worker of a daemon has its own, and which worker a connection reaches is the
#: kernel's choice (docs/operations.md, Workers).
ONE_PROCESS = ["--workers", "1"]
