"""Fan-out benchmark: many SSE clients (HTTP/1.1) on one topic while a producer writes at a
fixed rate. Starts its own broker (tansu) and daemon (`twistd -n ssekd`) on free ports.

Reports, per scenario: delivered events/s in aggregate, produce->receive latency p50/p99, the
daemon's CPU and RSS per connection; and one client's catch-up rate against a bare
confluent-kafka consumer on the same topic. Prints a table and writes bench/results/fanout.json.

    python bench/fanout.py                 # all scenarios (a few minutes)
    python bench/fanout.py --quick         # smaller numbers, for development
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import selectors
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ssekd.broker import free_port, port_open, start_broker

TWISTD = str(Path(sys.executable).with_name("twistd"))

CONFIG = """\
name: bench
bindings:
  tcp: {{type: tcp, kind: server, options: {{host: 127.0.0.1, port: {port}}}, exit: http}}
  http: {{type: http, kind: server, exit: sse}}
  sse: {{type: sse, kind: server, exit: sse_kafka}}
  sse_kafka:
    type: sse-kafka
    kind: proxy
    routes:
      - when: [{{path: "/events/{{topic}}"}}]
        exit: cache_client
        with: {{topic: "${{params.topic}}"}}
  cache_client: {{type: kafka, kind: cache_client, exit: cache_server}}
  cache_server:
    type: kafka
    kind: cache_server
    options: {{cache: {{max-messages: 300000, max-bytes: 134217728}}}}
    exit: kafka_client
  kafka_client:
    type: kafka
    kind: client
    options:
      servers: ["{bootstrap}"]
      properties: {{fetch.wait.max.ms: 10}}
"""


# -- client processes -----------------------------------------------------------------------

def _clients(port: int, path: str, n: int, sample_every: int, duration: float,
             ready: Any, go: Any, out: Any) -> None:
    """Open `n` SSE streams; count events on all, parse timestamps on every Nth stream."""
    sel = selectors.DefaultSelector()
    socks = []
    for i in range(n):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: b\r\n\r\n".encode())
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ, (i % sample_every == 0, [b""], [b""]))
        socks.append(s)
    ready.set()
    go.wait()
    count = 0
    latencies: list[float] = []
    end = time.time() + duration
    while (left := end - time.time()) > 0:
        for key, _ in sel.select(min(left, 0.2)):
            sample, tail, _ = key.data
            try:
                data = key.fileobj.recv(262144)  # type: ignore[union-attr]
            except BlockingIOError:
                continue
            if not data:
                sel.unregister(key.fileobj)
                continue
            # "id:" may be split across two reads: count over the previous read's last 2 bytes
            count += (key.data[2][0] + data).count(b"id:")
            key.data[2][0] = data[-2:]
            if sample:
                now = time.time()
                buf = tail[0] + data
                pos = 0
                while True:
                    i = buf.find(b"data:", pos)
                    if i < 0:
                        break
                    j = buf.find(b" ", i)
                    if j < 0:
                        break
                    try:
                        latencies.append(now - float(buf[i + 5:j]))
                    except ValueError:
                        pass
                    pos = j
                tail[0] = buf[pos:][-64:]
    out.put((count, latencies))
    for s in socks:
        s.close()


def _hold_idle(port: int, path: str, n: int, ready: Any, done: Any) -> None:
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: b\r\n\r\n".encode())
        socks.append(s)
    for s in socks:  # wait for every response's headers
        s.settimeout(30)
        s.recv(4096)
    ready.set()
    done.wait()
    for s in socks:
        s.close()


# -- helpers ---------------------------------------------------------------------------------

class Rig:
    def __init__(self) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="ssekd-bench-"))
        self.broker = start_broker(log_path=self.tmp / "tansu.log")
        self.admin = AdminClient({"bootstrap.servers": self.broker.bootstrap})
        self.port = free_port()
        config = self.tmp / "zilla.yaml"
        config.write_text(CONFIG.format(port=self.port, bootstrap=self.broker.bootstrap))
        self.log = open(self.tmp / "daemon.log", "wb")  # noqa: SIM115 - lives as long as the daemon
        import subprocess
        self.daemon = subprocess.Popen([TWISTD, "-n", "--pidfile=", "ssekd", "--config",
                                        str(config)], stdout=self.log, stderr=subprocess.STDOUT,
                                       cwd=self.tmp)
        deadline = time.monotonic() + 20
        while not port_open("127.0.0.1", self.port):
            if time.monotonic() > deadline or self.daemon.poll() is not None:
                raise SystemExit(f"daemon did not start: {self.tmp / 'daemon.log'}")
            time.sleep(0.05)
        self.proc = psutil.Process(self.daemon.pid)
        self.producer = Producer({"bootstrap.servers": self.broker.bootstrap, "linger.ms": 2})

    def topic(self, name: str, partitions: int = 3) -> str:
        self.admin.create_topics([NewTopic(name, partitions, 1)])[name].result(10)
        return name

    def produce_at(self, topic: str, rate: float, seconds: float, pad: int = 100) -> int:
        """Produce `rate`/s for `seconds`, each value "<epoch> <pad>"; return how many."""
        padding = b"x" * pad
        sent = 0
        start = time.time()
        while (elapsed := time.time() - start) < seconds:
            due = int(elapsed * rate) + 1
            while sent < due:
                self.producer.produce(topic, b"%.6f " % time.time() + padding)
                sent += 1
            self.producer.poll(0)
            time.sleep(0.002)
        self.producer.flush(10)
        return sent

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
        self.broker.stop()


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * q))]


def fanout(rig: Rig, clients: int, rate: float, seconds: float, procs: int = 1,
           sample_every: int = 10) -> dict[str, Any]:
    topic = rig.topic(f"fanout-{clients}-{int(rate)}-{time.monotonic_ns()}")
    # warm the topic so streams start at its (empty) tail
    ctx = mp.get_context("fork")
    ready = [ctx.Event() for _ in range(procs)]
    go = ctx.Event()
    out: Any = ctx.Queue()
    per = clients // procs
    ps = [ctx.Process(target=_clients, args=(rig.port, f"/events/{topic}", per, sample_every,
                                             seconds + 3, ready[i], go, out))
          for i in range(procs)]
    for p in ps:
        p.start()
    for r in ready:
        r.wait(120)
    time.sleep(1.0)
    rss = rig.rss()
    cpu0 = rig.cpu()
    go.set()
    t0 = time.time()
    sent = rig.produce_at(topic, rate, seconds)
    produce_time = time.time() - t0
    cpu = rig.cpu() - cpu0
    results = [out.get(timeout=120) for _ in ps]
    for p in ps:
        p.join(30)
    delivered = sum(c for c, _ in results)
    lat = [x for _, ls in results for x in ls]
    return {
        "clients": clients, "rate": rate, "seconds": round(produce_time, 2), "produced": sent,
        "delivered": delivered, "expected": sent * per * procs,
        "delivered_per_s": round(delivered / produce_time),
        "p50_ms": round(_pct(lat, 0.5) * 1000, 2), "p99_ms": round(_pct(lat, 0.99) * 1000, 2),
        "daemon_cpu_pct": round(100 * cpu / produce_time, 1),
        "rss_mib": round(rss / 2**20, 1),
    }


def idle(rig: Rig, n: int) -> dict[str, Any]:
    topic = rig.topic(f"idle-{time.monotonic_ns()}", 1)
    ctx = mp.get_context("fork")
    # open one stream first so the cache and consumer exist before measuring
    warm_ready, warm_done = ctx.Event(), ctx.Event()
    w = ctx.Process(target=_hold_idle, args=(rig.port, f"/events/{topic}", 1, warm_ready,
                                             warm_done))
    w.start()
    warm_ready.wait(30)
    time.sleep(1)
    before = rig.rss()
    ready, done = ctx.Event(), ctx.Event()
    p = ctx.Process(target=_hold_idle, args=(rig.port, f"/events/{topic}", n, ready, done))
    p.start()
    ok = ready.wait(300)
    time.sleep(2)
    after = rig.rss()
    cpu0 = rig.cpu()
    time.sleep(3)
    idle_cpu = (rig.cpu() - cpu0) / 3
    done.set()
    warm_done.set()
    p.join(60)
    w.join(10)
    return {"streams": n, "held": bool(ok), "rss_before_mib": round(before / 2**20, 1),
            "rss_after_mib": round(after / 2**20, 1),
            "kib_per_stream": round((after - before) / n / 1024, 2),
            "idle_cpu_pct": round(100 * idle_cpu, 1)}


def single_client(rig: Rig, messages: int) -> dict[str, Any]:
    topic = rig.topic(f"single-{time.monotonic_ns()}")
    pad = b"x" * 100
    for i in range(messages):
        rig.producer.produce(topic, b"%d " % i + pad)
        if i % 10000 == 0:
            rig.producer.poll(0)
    rig.producer.flush(30)
    # bare confluent-kafka consumer, same topic, from the beginning
    c = Consumer({"bootstrap.servers": rig.broker.bootstrap, "group.id": "bench-bare",
                  "enable.auto.commit": False, "fetch.wait.max.ms": 10,
                  "fetch.queue.backoff.ms": 5, "enable.partition.eof": False})
    c.assign([TopicPartition(topic, p, 0) for p in range(3)])
    got = 0
    t0 = time.time()
    while got < messages:
        batch = c.consume(1000, 1.0)
        got += sum(1 for m in batch if not m.error())
    bare = messages / (time.time() - t0)
    c.close()
    # the cache first loads the topic (a first stream), then one client reads it all
    for label in ("first (cache loading from Kafka)", "cached"):
        s = socket.create_connection(("127.0.0.1", rig.port))
        s.sendall(f"GET /events/{topic} HTTP/1.1\r\nHost: b\r\n\r\n".encode())
        s.settimeout(60)
        n = 0
        last = b""
        t0 = time.time()
        while n < messages:
            data = s.recv(1 << 20)
            if not data:
                break
            n += (last + data).count(b"id:")
            last = data[-2:]
        elapsed = time.time() - t0
        s.close()
        if label == "first (cache loading from Kafka)":
            first = messages / elapsed
    cached = messages / elapsed
    return {"messages": messages, "bare_consumer_per_s": round(bare),
            "sse_client_first_per_s": round(first), "sse_client_cached_per_s": round(cached),
            "ratio_first": round(first / bare, 2), "ratio_cached": round(cached / bare, 2)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", choices=["throughput", "latency", "idle", "single"],
                        action="append")
    args = parser.parse_args(argv)
    q = args.quick
    only = set(args.only or ["throughput", "latency", "idle", "single"])
    results: dict[str, Any] = {"machine": {"cpus": os.cpu_count(),
                                           "python": sys.version.split()[0]}}
    rig = Rig()
    try:
        if "single" in only:
            results["single_client"] = single_client(rig, 50_000 if q else 300_000)
        if "latency" in only:
            results["latency_1000x50"] = fanout(rig, 200 if q else 1000, 50, 5 if q else 15)
        if "throughput" in only:
            results["throughput"] = [fanout(rig, c, r, 5 if q else 10)
                                     for c, r in ([(100, 1000)] if q else
                                                  [(1000, 250), (2000, 150), (200, 1500)])]
        if "idle" in only:
            results["idle"] = idle(rig, 1000 if q else 10_000)
    finally:
        rig.close()
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "fanout.json").write_text(json.dumps(results, indent=2) + "\n")
    print_table(results)
    return 0


def print_table(r: dict[str, Any]) -> None:
    print(f"\nssekd fan-out benchmark ({r['machine']['cpus']} cpus, one daemon process)\n")
    rows = []
    if "latency_1000x50" in r:
        rows.append(r["latency_1000x50"])
    rows += r.get("throughput", [])
    if rows:
        print(f"{'clients':>8} {'ev/s/cl':>8} {'delivered/s':>12} {'of expected':>12} "
              f"{'p50 ms':>8} {'p99 ms':>8} {'cpu %':>6}")
        for x in rows:
            frac = x["delivered"] / x["expected"] if x["expected"] else 0
            print(f"{x['clients']:>8} {x['rate']:>8.0f} {x['delivered_per_s']:>12,} "
                  f"{frac:>12.1%} {x['p50_ms']:>8} {x['p99_ms']:>8} {x['daemon_cpu_pct']:>6}")
    if "idle" in r:
        i = r["idle"]
        print(f"\nidle streams: {i['streams']:,} held={i['held']}  "
              f"{i['kib_per_stream']} KiB RSS each  (RSS {i['rss_before_mib']} -> "
              f"{i['rss_after_mib']} MiB), idle cpu {i['idle_cpu_pct']}%")
    if "single_client" in r:
        s = r["single_client"]
        print(f"\none client, {s['messages']:,} records: bare consumer {s['bare_consumer_per_s']:,}/s; "
              f"SSE first {s['sse_client_first_per_s']:,}/s ({s['ratio_first']:.0%}), "
              f"cached {s['sse_client_cached_per_s']:,}/s ({s['ratio_cached']:.0%})")


if __name__ == "__main__":
    sys.exit(main())
