"""Writes: a sync POST answered with the reply of the service behind, through ssekd's http-kafka
(`produce` with `reply-to`) beside the REST handler a team would write
(bench/baseline/rest.py), on the same broker, responder and load client.

    .venv/bin/python -m bench.write_path [--quick] [--seconds S] [--connections C ...]

`wrk` (`--latency`, a Lua script giving each request an idempotency key of its own) keeps C
connections busy for S seconds against each server in turn, alternating which goes first. The
responder (`--responder`, a process of its own) stands for the service: it answers each command
on its reply-to topic with `201` and the body. Reported per run: requests/s, p50/p99 latency
from wrk's histogram, and answers that were not 2xx. The broker is tansu with
`fetch.wait.max.ms: 10` on every consumer, so a reply's trip costs up to a few fetch waits.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import BIN, ROOT, free_port, spawn, stop, table, wait_port, write_result
from tests.support import zilla_config as zc


def daemon_config(port: int, bootstrap: str) -> zc.Node:
    """tcp -> http -> http-kafka: POST /commands produced to `commands`, answered from
    `replies`."""
    route = {"when": [{"method": "POST", "path": "/commands"}], "exit": "cc",
             "with": {"capability": "produce", "topic": "commands", "key": "${idempotencyKey}",
                      "reply-to": "replies"}}
    return zc.zilla("bench", {
        "tcp0": zc.tcp_server(port, "http0"),
        "http0": zc.http_server("hk0"),
        "hk0": {"type": "http-kafka", "kind": "proxy", "routes": [route]},
        **zc.kafka(bootstrap, cache={"bootstrap": ["replies"]}, cache_client="cc",
                   cache_server="cs", client="kc")})

LUA = """\
local counter = 0
local threads = 0
function setup(thread)
  threads = threads + 1
  thread:set("tid", threads)
end
function request()
  counter = counter + 1
  return wrk.format("POST", "/commands",
    {["Content-Type"] = "application/json",
     ["Idempotency-Key"] = string.format("b-%d-%d-%d", run, tid, counter)},
    '{"title": "bench"}')
end
"""


def responder(bootstrap: str, topic: str) -> None:
    """The service behind: every command gets `201` on its reply-to topic, in batches."""
    from confluent_kafka import OFFSET_END, Consumer, Producer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-responder",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 10,
                         "fetch.queue.backoff.ms": 1})
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1})
    meta = consumer.list_topics(topic, timeout=10).topics[topic]
    consumer.assign([TopicPartition(topic, p, OFFSET_END) for p in meta.partitions])
    print("responder ready", flush=True)
    while True:
        first = consumer.poll(0.05)
        if first is None:
            producer.poll(0)
            continue
        for m in [first, *consumer.consume(999, 0)]:
            if m.error() is not None:
                continue
            headers = dict(m.headers() or ())
            correlation, reply_to = headers.get("zilla:correlation-id"), \
                headers.get("zilla:reply-to")
            if not isinstance(correlation, bytes) or not isinstance(reply_to, bytes):
                continue
            producer.produce(reply_to.decode(), key=m.key(), value=m.value(),
                             headers=[("zilla:correlation-id", correlation),
                                      (":status", b"201"),
                                      ("location", b"/commands/" + (m.key() or b""))])
        producer.poll(0)


def wrk(url: str, seconds: int, connections: int, script: Path, run: int) -> dict[str, float]:
    script.write_text(f"run = {run}\n" + LUA)
    out = subprocess.run(["wrk", "-t2", f"-c{connections}", f"-d{seconds}s", "--latency",
                          "-s", str(script), url],
                         capture_output=True, text=True, check=True).stdout
    rate = re.search(r"Requests/sec:\s+([\d.]+)", out)
    if rate is None:
        raise RuntimeError(out)
    percentiles = {int(p): _ms(v, unit) for p, v, unit in
                   re.findall(r"^\s+(50|99)%\s+([\d.]+)(us|ms|s)$", out, re.MULTILINE)}
    bad = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    errors = re.search(r"Socket errors: .*timeout (\d+)", out)
    return {"requests_per_s": float(rate.group(1)), "p50_ms": percentiles.get(50, 0.0),
            "p99_ms": percentiles.get(99, 0.0), "not_2xx": float(bad.group(1)) if bad else 0.0,
            "timeouts": float(errors.group(1)) if errors else 0.0}


def _ms(value: str, unit: str) -> float:
    return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one short run per server")
    parser.add_argument("--seconds", type=int, default=None)
    parser.add_argument("--connections", type=int, nargs="*", default=None)
    parser.add_argument("--responder", nargs=2, metavar=("BOOTSTRAP", "TOPIC"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if args.responder:
        responder(*args.responder)
        return {}
    seconds = args.seconds or (5 if args.quick else 15)
    connections = args.connections or ([16] if args.quick else [16, 64])
    rounds = 1 if args.quick else 2
    from ssekd.dev.broker import start_broker
    from ssekd.todo_service import ensure_topics

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        broker = start_broker(free_port(), log_path=root / "tansu.log")
        procs = []
        try:
            ensure_topics(broker.bootstrap, {"commands": {}, "replies": {}})
            service = spawn([sys.executable, "-m", "bench.write_path", "--responder",
                             broker.bootstrap, "commands"], cwd=ROOT, log=root / "responder.log")
            procs.append(service)
            deadline = time.monotonic() + 20
            while "ready" not in (root / "responder.log").read_text():
                if time.monotonic() > deadline or service.poll() is not None:
                    raise RuntimeError((root / "responder.log").read_text())
                time.sleep(0.05)
            ssekd_port, rest_port = free_port(), free_port()
            zc.write(root / "zilla.yaml", daemon_config(ssekd_port, broker.bootstrap))
            ssekd = spawn([str(BIN / "twistd"), "-n", "--pidfile=", "ssekd", "--config",
                           "zilla.yaml"], cwd=root, log=root / "ssekd.log")
            procs.append(ssekd)
            rest = spawn([sys.executable, str(ROOT / "bench" / "baseline" / "rest.py"),
                          "--bootstrap", broker.bootstrap, "--port", str(rest_port),
                          "--commands", "commands", "--replies", "replies"],
                         log=root / "rest.log")
            procs.append(rest)
            wait_port(ssekd_port, ssekd)
            wait_port(rest_port, rest)
            servers = {"ssekd": f"http://127.0.0.1:{ssekd_port}/commands",
                       "baseline": f"http://127.0.0.1:{rest_port}/commands"}
            script = root / "post.lua"
            run = 0
            for url in servers.values():  # warm both: producers, reply topics
                run += 1
                wrk(url, 1, 2, script, run)
            rows: list[list[Any]] = []
            results: list[dict[str, Any]] = []
            for c in connections:
                for r in range(rounds):
                    order = list(servers) if r % 2 == 0 else list(reversed(servers))
                    for name in order:
                        run += 1
                        got = wrk(servers[name], seconds, c, script, run)
                        results.append({"server": name, "connections": c, **got})
                        rows.append([name, c, got["requests_per_s"], got["p50_ms"],
                                     got["p99_ms"], int(got["not_2xx"])])
        finally:
            for p in procs:
                stop(p)
            broker.stop()
    print(table(f"Sync POST answered with the service's reply, wrk -t2 -d{seconds}s",
                ["server", "connections", "req/s", "p50 ms", "p99 ms", "not 2xx"], rows))
    data = {"seconds": seconds, "runs": results}
    path = write_result("write_path", data)
    print(f"\nwritten {path}")
    return data


if __name__ == "__main__":
    main()
