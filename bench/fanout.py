"""Fan-out benchmark: many SSE clients (HTTP/1.1) on one topic while a producer writes at a
fixed rate. Starts its own broker (tansu) and daemon (`twistd -n ssekd`) on free ports.

Reports, per scenario: delivered events/s in aggregate, produce->receive latency p50/p99, the
daemon's CPU and RSS per connection; and one client's catch-up rate against a bare
confluent-kafka consumer on the same topic. Prints a table and writes bench/results/fanout.json.

How the clients are measured (they share the daemon's cores, so they must stay cheap):

- one process reads all the streams of a scenario with `recv_into` into one preallocated buffer
  and counts events with `bytearray.count(b"id:")` (plus a 4-byte check for an `id:` split
  across reads): C-level work per read, no per-event Python;
- every stream is drained and counted; `complete` is how many streams got exactly every event
  produced (`over` counts streams that got more: a duplicate), so a miss anywhere shows;
- latency (receive time minus the producer's timestamp in the payload) is parsed on a fixed
  sample of 50 streams spread over the clients, so its cost does not grow with the client count;
- the reader's own CPU share is reported next to the daemon's, to show it is not the bottleneck;
- the single-client comparison runs the bare consumer (cold), the SSE stream while the daemon's
  cache loads the topic from Kafka (cold), the SSE stream served from the cache, then the bare
  consumer again, and compares each SSE rate with the faster bare run.

The machine's load average is recorded with each scenario: run it more than once on a shared
machine and compare ranges.

    python bench/fanout.py                 # all scenarios (a few minutes)
    python bench/fanout.py --quick         # smaller numbers, for development
    python bench/fanout.py --only latency --only single
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import select
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

from ssekd.broker import free_port, port_open, start_broker  # noqa: E402 - after the sys.path line above

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
telemetry:
  exporters:
    prom: {{type: prometheus, options: {{endpoints: [{{port: {metrics_port}}}]}}}}
"""


# -- client processes -----------------------------------------------------------------------

class _Reader:
    """Counts the events of many SSE streams cheaply, and times a fixed sample of them.

    The counting is C-level work per `recv_into`: `bytearray.count(b"id:")` over a preallocated
    buffer, plus a 4-byte check for an `id:` split across two reads. Only the sampled streams
    pay for finding `data:` and parsing the producer's timestamp, so one Python process can
    drain a thousand sockets without becoming what the benchmark measures.
    """

    def __init__(self, socks: list[socket.socket], sampled: set[int]) -> None:
        self.socks = socks
        self.sampled = sampled
        self.counts = [0] * len(socks)
        self.latencies: list[float] = []
        self._tails = [b""] * len(socks)  # last 2 bytes of each stream's previous read
        self._text = [b""] * len(socks)  # unparsed end of a sampled stream's previous read
        self._buf = bytearray(1 << 18)
        self._view = memoryview(self._buf)
        self._poll = select.epoll()
        self._by_fd: dict[int, int] = {}
        for i, s in enumerate(socks):
            s.setblocking(False)
            self._by_fd[s.fileno()] = i
            self._poll.register(s.fileno(), select.EPOLLIN)
        self.open = len(socks)

    def run(self, until: Any) -> None:
        """Read until `until()` is true or every stream ended."""
        buf, view, counts, tails = self._buf, self._view, self.counts, self._tails
        while self.open and not until():
            for fd, _ in self._poll.poll(0.1):
                i = self._by_fd[fd]
                try:
                    n = self.socks[i].recv_into(buf)
                except BlockingIOError:
                    continue
                if not n:
                    self._poll.unregister(fd)
                    self.open -= 1
                    continue
                head = bytes(view[:2])
                counts[i] += buf.count(b"id:", 0, n) + (tails[i] + head).count(b"id:")
                tails[i] = bytes(view[max(0, n - 2):n])
                if i in self.sampled:
                    self._times(i, bytes(view[:n]))

    def _times(self, i: int, data: bytes) -> None:
        now = time.time()
        text = self._text[i] + data
        pos = 0
        while True:
            a = text.find(b"data:", pos)
            if a < 0:
                break
            b = text.find(b" ", a)
            if b < 0:
                break
            try:
                self.latencies.append(now - float(text[a + 5:b]))
            except ValueError:
                pass
            pos = b
        self._text[i] = text[pos:][-64:]


def _clients(port: int, path: str, n: int, sample: int, ready: Any, go: Any, expected: Any,
             deadline: Any, out: Any) -> None:
    """Open `n` SSE streams; count every event on all of them, time `sample` of them.

    Reads until each stream has the `expected` count (set by the producer once it is done) or
    the `deadline` passes, then reports per-stream counts, latencies and its own CPU time.
    """
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: b\r\n\r\n".encode())
        socks.append(s)
    step = max(1, n // sample) if sample else n + 1
    reader = _Reader(socks, set(range(0, n, step)))
    ready.set()
    go.wait()
    cpu0 = time.process_time()
    t0 = time.time()

    def done() -> bool:
        want = expected.value
        if want >= 0 and min(reader.counts) >= want:
            return True
        return deadline.value > 0 and time.time() > deadline.value

    reader.run(done)
    out.put((reader.counts, reader.latencies, time.process_time() - cpu0, time.time() - t0))
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
    def __init__(self, template: str = CONFIG) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="ssekd-bench-"))
        self.broker = start_broker(log_path=self.tmp / "tansu.log")
        self.admin = AdminClient({"bootstrap.servers": self.broker.bootstrap})
        self.port = free_port()
        self.metrics_port = free_port()
        config = self.tmp / "zilla.yaml"
        config.write_text(template.format(port=self.port, bootstrap=self.broker.bootstrap,
                                          metrics_port=self.metrics_port))
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
           sample: int = 50, query: str = "") -> dict[str, Any]:
    """`clients` streams of one topic while `rate` events/s are produced for `seconds`.

    Every stream is drained and counted (a stream that misses or repeats an event shows in
    `complete`); latency is taken on `sample` streams spread over the clients. `query` is added
    to each stream's path (e.g. `?access_token=...` for guarded streams, `bench/jwt.py`).
    """
    topic = rig.topic(f"fanout-{clients}-{int(rate)}-{time.monotonic_ns()}")
    ctx = mp.get_context("fork")
    ready = [ctx.Event() for _ in range(procs)]
    go = ctx.Event()
    expected = ctx.Value("q", -1)
    deadline = ctx.Value("d", 0.0)
    out: Any = ctx.Queue()
    per = clients // procs
    ps = [ctx.Process(target=_clients, args=(rig.port, f"/events/{topic}{query}", per,
                                             max(1, sample // procs), ready[i], go, expected,
                                             deadline, out))
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
    expected.value = sent
    deadline.value = time.time() + 10.0
    results = [out.get(timeout=120) for _ in ps]
    for p in ps:
        p.join(30)
    counts = [c for r in results for c in r[0]]
    lat = [x for r in results for x in r[1]]
    delivered = sum(counts)
    return {
        "clients": clients, "rate": rate, "seconds": round(produce_time, 2), "produced": sent,
        "delivered": delivered, "expected": sent * len(counts),
        "complete": sum(1 for c in counts if c == sent),
        "over": sum(1 for c in counts if c > sent),
        "delivered_per_s": round(delivered / produce_time),
        "latency_streams": sum(max(1, sample // procs) for _ in ps),
        "latency_samples": len(lat),
        "p50_ms": round(_pct(lat, 0.5) * 1000, 2), "p99_ms": round(_pct(lat, 0.99) * 1000, 2),
        "max_ms": round(max(lat, default=float("nan")) * 1000, 2),
        "daemon_cpu_pct": round(100 * cpu / produce_time, 1),
        "client_cpu_pct": round(100 * sum(r[2] for r in results) / produce_time, 1),
        "load_avg": round(os.getloadavg()[0], 2),
        "rss_mib": round(rss / 2**20, 1),
    }


def _scraper(port: int, interval: float, stop: Any, out: Any) -> None:
    """GET the metrics page every `interval` seconds until `stop`; report the scrape times."""
    import urllib.request

    times: list[float] = []
    size = 0
    while not stop.is_set():
        began = time.monotonic()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            size = len(r.read())
        took = time.monotonic() - began
        times.append(took)
        stop.wait(max(0.0, interval - took))
    out.put((times, size))


def scrape_overhead(rig: Rig, clients: int, rate: float, seconds: float,
                    rounds: int = 2) -> dict[str, Any]:
    """The same fan-out with and without a scraper hitting the metrics page every 100 ms, in
    alternating order (`rounds` of each): delivered events/s and the daemon's CPU per 1,000
    deliveries, so the cost of metrics being read shows even when delivery keeps up."""
    ctx = mp.get_context("fork")
    runs: list[dict[str, Any]] = []
    for i in range(rounds):
        for scraping in ((False, True) if i % 2 == 0 else (True, False)):
            stop = ctx.Event()
            out: Any = ctx.Queue()
            scraper = ctx.Process(target=_scraper, args=(rig.metrics_port, 0.1, stop, out)) \
                if scraping else None
            if scraper is not None:
                scraper.start()
            run = fanout(rig, clients, rate, seconds)
            if scraper is not None:
                stop.set()
                times, size = out.get(timeout=30)
                scraper.join(10)
                run.update(scrapes=len(times), scrape_p50_ms=round(_pct(times, 0.5) * 1000, 2),
                           scrape_max_ms=round(max(times, default=0.0) * 1000, 2),
                           page_bytes=size)
            run["scraping"] = scraping
            run["cpu_ms_per_1000"] = round(run["daemon_cpu_pct"] / 100 * run["seconds"] * 1e6
                                           / max(1, run["delivered"]), 2)
            runs.append(run)

    def mean(key: str, scraping: bool) -> float:
        values = [r[key] for r in runs if r["scraping"] is scraping]
        return sum(values) / len(values)

    base, scraped = mean("delivered_per_s", False), mean("delivered_per_s", True)
    cpu_base, cpu_scraped = mean("cpu_ms_per_1000", False), mean("cpu_ms_per_1000", True)
    return {
        "clients": clients, "rate": rate, "runs": runs,
        "delivered_per_s_without": round(base), "delivered_per_s_with": round(scraped),
        "throughput_cost_pct": round(100 * (base - scraped) / base, 2),
        "cpu_ms_per_1000_without": round(cpu_base, 2),
        "cpu_ms_per_1000_with": round(cpu_scraped, 2),
        "cpu_cost_pct": round(100 * (cpu_scraped - cpu_base) / cpu_base, 2),
        "complete": all(r["complete"] == r["clients"] for r in runs),
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


def _bare_consumer(bootstrap: str, topic: str, messages: int) -> float:
    """Records/s of a plain confluent-kafka consumer reading `topic` from its beginning."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-bare",
                  "enable.auto.commit": False, "fetch.wait.max.ms": 10,
                  "fetch.queue.backoff.ms": 5, "enable.partition.eof": False})
    c.assign([TopicPartition(topic, p, 0) for p in range(3)])
    got = 0
    t0 = time.time()
    while got < messages:
        batch = c.consume(1000, 1.0)
        got += sum(1 for m in batch if not m.error())
    rate = messages / (time.time() - t0)
    c.close()
    return rate


def _sse_consumer(port: int, path: str, messages: int) -> tuple[float, float]:
    """Events/s of one SSE stream reading `messages` events, and the reader's CPU share."""
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: b\r\n\r\n".encode())
    s.settimeout(60)
    buf = bytearray(1 << 20)
    view = memoryview(buf)
    n = 0
    tail = b""
    t0 = time.time()
    cpu0 = time.process_time()
    while n < messages:
        got = s.recv_into(buf)
        if not got:
            break
        n += buf.count(b"id:", 0, got) + (tail + bytes(view[:2])).count(b"id:")
        tail = bytes(view[max(0, got - 2):got])
    elapsed = time.time() - t0
    cpu = time.process_time() - cpu0
    s.close()
    if n != messages:
        raise SystemExit(f"single client got {n} events of {messages}")
    return messages / elapsed, cpu / elapsed


def single_client(rig: Rig, messages: int) -> dict[str, Any]:
    """One client reading a whole topic, against a bare consumer of the same topic.

    Order: bare consumer (cold), SSE stream while the daemon's cache loads the topic from Kafka
    (cold), SSE stream served from the cache, bare consumer again. Each SSE figure is compared
    with the faster of the two bare runs.
    """
    topic = rig.topic(f"single-{time.monotonic_ns()}")
    pad = b"x" * 100
    for i in range(messages):
        rig.producer.produce(topic, b"%d " % i + pad)
        if i % 10000 == 0:
            rig.producer.poll(0)
    rig.producer.flush(30)
    bare_cold = _bare_consumer(rig.broker.bootstrap, topic, messages)
    cpu0 = rig.cpu()
    first, first_client = _sse_consumer(rig.port, f"/events/{topic}", messages)
    first_cpu = (rig.cpu() - cpu0) * first / messages
    cpu0 = rig.cpu()
    cached, cached_client = _sse_consumer(rig.port, f"/events/{topic}", messages)
    cached_cpu = (rig.cpu() - cpu0) * cached / messages
    bare_again = _bare_consumer(rig.broker.bootstrap, topic, messages)
    bare = max(bare_cold, bare_again)
    return {"messages": messages, "bare_consumer_per_s": round(bare),
            "bare_cold_per_s": round(bare_cold), "bare_again_per_s": round(bare_again),
            "sse_client_first_per_s": round(first), "sse_client_cached_per_s": round(cached),
            "ratio_first": round(first / bare, 2), "ratio_cached": round(cached / bare, 2),
            "daemon_cpu_pct_first": round(100 * first_cpu, 1),
            "daemon_cpu_pct_cached": round(100 * cached_cpu, 1),
            "reader_cpu_pct_first": round(100 * first_client, 1),
            "reader_cpu_pct_cached": round(100 * cached_client, 1),
            "load_avg": round(os.getloadavg()[0], 2)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", choices=["throughput", "latency", "idle", "single", "scrape"],
                        action="append")
    args = parser.parse_args(argv)
    q = args.quick
    only = set(args.only or ["throughput", "latency", "idle", "single", "scrape"])
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
        if "scrape" in only:
            results["scrape_overhead"] = scrape_overhead(rig, 200 if q else 1000, 100,
                                                         5 if q else 10)
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
        print("every stream counted; latency over the sampled streams (recv time - produce time)")
        print(f"{'clients':>8} {'ev/s/cl':>8} {'delivered/s':>12} {'complete':>11} "
              f"{'p50 ms':>8} {'p99 ms':>8} {'daemon %':>9} {'reader %':>9} {'load':>5}")
        for x in rows:
            print(f"{x['clients']:>8} {x['rate']:>8.0f} {x['delivered_per_s']:>12,} "
                  f"{x['complete']:>5}/{x['clients']:<5} {x['p50_ms']:>8} {x['p99_ms']:>8} "
                  f"{x['daemon_cpu_pct']:>9} {x['client_cpu_pct']:>9} {x['load_avg']:>5}")
    if "scrape_overhead" in r:
        s = r["scrape_overhead"]
        print(f"\nscraping /metrics every 100 ms, {s['clients']:,} x {s['rate']:.0f}/s "
              f"(alternating runs): delivered {s['delivered_per_s_without']:,}/s without, "
              f"{s['delivered_per_s_with']:,}/s with ({s['throughput_cost_pct']}% cost); daemon "
              f"CPU {s['cpu_ms_per_1000_without']} -> {s['cpu_ms_per_1000_with']} ms per 1,000 "
              f"deliveries ({s['cpu_cost_pct']}%); every stream complete: {s['complete']}")
        for x in s["runs"]:
            extra = (f" scrapes {x['scrapes']} p50 {x['scrape_p50_ms']} ms max "
                     f"{x['scrape_max_ms']} ms ({x['page_bytes']:,} bytes)"
                     if x["scraping"] else "")
            print(f"  {'with   ' if x['scraping'] else 'without'} {x['delivered_per_s']:>9,}/s "
                  f"cpu {x['daemon_cpu_pct']}% p99 {x['p99_ms']} ms{extra}")
    if "idle" in r:
        i = r["idle"]
        print(f"\nidle streams: {i['streams']:,} held={i['held']}  "
              f"{i['kib_per_stream']} KiB RSS each  (RSS {i['rss_before_mib']} -> "
              f"{i['rss_after_mib']} MiB), idle cpu {i['idle_cpu_pct']}%")
    if "single_client" in r:
        s = r["single_client"]
        print(f"\none client, {s['messages']:,} records: bare consumer "
              f"{s['bare_consumer_per_s']:,}/s (cold {s['bare_cold_per_s']:,}, again "
              f"{s['bare_again_per_s']:,}); SSE first {s['sse_client_first_per_s']:,}/s "
              f"({s['ratio_first']:.0%}, daemon {s['daemon_cpu_pct_first']}% cpu), cached "
              f"{s['sse_client_cached_per_s']:,}/s ({s['ratio_cached']:.0%}, daemon "
              f"{s['daemon_cpu_pct_cached']}% cpu); load {s['load_avg']}")


if __name__ == "__main__":
    sys.exit(main())
