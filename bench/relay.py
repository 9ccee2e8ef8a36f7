"""Relay cost benchmark: the same fan-out served by ssekd from Kafka, and relayed by a second
ssekd (sse server -> sse client) reading ONE stream of the first.

Starts its own broker (tansu), the upstream daemon (bench/fanout's config) and the relay
daemon on free ports. For each side it runs bench/fanout's measurement - every stream drained
and counted, latency (produce -> receive) on a sample - with the same clients and rate, and
reports the serving daemon's CPU and RSS; for the relayed run also the upstream's CPU and how
many streams it served (its own metrics), which is the point of a relay: one.

    python -m bench.relay            # 200 clients x 100 events/s for 5 s (`make bench`)
    FULL=1 python -m bench.relay     # 1,000 clients x 100 events/s for 15 s
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
import urllib.request
from typing import Any

import psutil

from bench.common import RESULTS, spawn, wait_port
from bench.fanout.rig import TWISTD, Rig
from bench.fanout.scenarios import fanout
from ssekd.dev.broker import free_port
from tests.support import zilla_config as zc


def relay_config(port: int, upstream: int) -> zc.Node:
    """The relay daemon: streams read from the upstream ssekd on `upstream`."""
    return zc.zilla("relay", {
        "tcp": zc.tcp_server(port),
        "http": zc.http_server(),
        "sse": zc.sse_server("relay"),
        "relay": {"type": "sse", "kind": "client", "exit": "upstream_http"},
        "upstream_http": {"type": "http", "kind": "client", "exit": "upstream_tcp"},
        "upstream_tcp": {"type": "tcp", "kind": "client",
                         "options": {"host": "127.0.0.1", "port": upstream}}})


class RelaySide:
    """The relay daemon as the server `fanout()` measures (a `fanout.Server`'s `name`, `port`,
    `cpu` and `rss`): clients connect to it; topics and records go through the upstream's rig."""

    name = "relay"

    def __init__(self, rig: Rig) -> None:
        self.rig = rig
        self.port = free_port()
        config = zc.write(rig.tmp / "relay.yaml", relay_config(self.port, rig.port))
        self.daemon = spawn([TWISTD, "-n", "--pidfile=", "ssekd", "--config", str(config)],
                            cwd=rig.tmp, log=rig.tmp / "relay.log")
        wait_port(self.port, self.daemon)
        self.proc = psutil.Process(self.daemon.pid)

    def cpu(self) -> float:
        t = self.proc.cpu_times()
        return t.user + t.system

    def rss(self) -> int:
        return int(self.proc.memory_info().rss)

    def close(self) -> None:
        self.daemon.terminate()
        try:
            self.daemon.wait(20)
        except Exception:  # noqa: BLE001 - a benchmark cleanup
            self.daemon.kill()


def upstream_streams(rig: Rig) -> float:
    """Streams the upstream's sse server has opened so far (its `stream.opens.sent`)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{rig.metrics_port}/metrics", timeout=10) as r:
        page = r.read().decode()
    m = re.search(r'^stream_opens_sent_total\{[^}]*binding="sse"[^}]*\} (\S+)$', page, re.M)
    return float(m.group(1)) if m else 0.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="the short run (the default)")
    parser.add_argument("--full", action="store_true", help="1,000 clients (also FULL=1)")
    args = parser.parse_args(argv)
    full = (args.full or os.environ.get("FULL") == "1") and not args.quick
    clients, rate, seconds = (1000, 100, 15) if full else (200, 100, 5)
    procs = 2 if full else 1
    results: dict[str, Any] = {"machine": {"cpus": os.cpu_count(),
                                           "python": sys.version.split()[0]},
                               "full": full}
    rig = Rig()
    relay = RelaySide(rig)
    try:
        results["from_kafka"] = fanout(rig, clients, rate, seconds, procs=procs)
        opened = upstream_streams(rig)
        up_cpu0 = rig.cpu()
        t0 = time.time()
        results["relayed"] = fanout(rig, clients, rate, seconds, procs=procs,
                                    server=relay)  # type: ignore[arg-type]
        results["relayed"]["upstream_cpu_pct"] = round(100 * (rig.cpu() - up_cpu0)
                                                       / (time.time() - t0), 1)
        results["relayed"]["upstream_streams"] = upstream_streams(rig) - opened
    finally:
        relay.close()
        rig.close()
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "relay.json").write_text(json.dumps(results, indent=2) + "\n")
    print_table(results)
    return 0


def print_table(r: dict[str, Any]) -> None:
    print(f"\nssekd relay cost ({r['machine']['cpus']} cpus): the same clients and rate served "
          f"from Kafka, then relayed from one upstream stream\n")
    print(f"{'served':>10} {'clients':>8} {'ev/s':>6} {'complete':>11} {'p50 ms':>8} "
          f"{'p99 ms':>8} {'daemon %':>9} {'rss MiB':>8} {'upstream %':>11} {'up streams':>11}")
    for name in ("from_kafka", "relayed"):
        x = r[name]
        print(f"{name:>10} {x['clients']:>8} {x['rate']:>6.0f} "
              f"{x['complete']:>5}/{x['clients']:<5} {x['p50_ms']:>8} {x['p99_ms']:>8} "
              f"{x['daemon_cpu_pct']:>9} {x['rss_mib']:>8} "
              f"{x.get('upstream_cpu_pct', '-'):>11} {x.get('upstream_streams', '-'):>11}")


if __name__ == "__main__":
    sys.exit(main())
