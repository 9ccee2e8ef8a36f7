"""SSE fan-out over HTTP/3 beside the same over HTTP/2: one daemon, both ways in.

The daemon has the usual tcp -> tls (h2) -> http chain and a quic server whose exit is that
same http server, so both protocols reach the same routes, sse and sse-kafka bindings, with
the same limits (100 streams per connection, either way). One topic (3 partitions), a producer
writing `rate` events/s for `seconds`, and `streams` SSE streams of it over `connections`
connections (100 streams each) held by client processes apart from the daemon's, so their CPU
is not the daemon's. Each protocol gets a fresh daemon (its memory figure starts from the same
point), in turn, alternating which goes first over `--rounds`.

Per row: deliveries/s; events lost and repeated (every stream counted); p50/p99/p999 of the
time from the producer's stamp in the record to the client's receipt, over every tenth stream;
the daemon's CPU (user + system, from /proc, over the window from the first event produced to
the last stream complete) per 1,000 deliveries; its RSS growth from before the clients connect
to after every stream's response head, per stream; the clients' CPU share.

The clients:

* HTTP/3: `tests.support.h3client.H3SseClient` (aioquic's QUIC and HTTP/3 objects, one I/O
  thread per connection), which parses every event; latency taken in its `on_event`.
* HTTP/2: `H2Counter` below, a reader of HTTP/2 frames over TLS that counts each stream's
  events with `bytes.count(b"id:")` and parses only the sampled streams, as the HTTP/1.1
  readers of `bench.fanout` do (the `h2` package costs tens of microseconds a frame: at 50,000
  frames/s the client would take a core of the two).

aioquic is pure Python above its C crypto: the HTTP/3 client costs more CPU per event than
the daemon does. Its share of the machine is in the table; the clients are spread over
`--processes` processes so that no one of them is the bottleneck (each connection is one
thread, and a process's threads share one core).

    .venv/bin/python -m bench.h3 [--quick] [--streams N] [--connections N] [--rate R]
                                 [--seconds S] [--processes N] [--rounds N] [--only h2|h3]
                                 [--profile] [--pin] [--daemon-root PATH]

`--profile` samples the daemon with py-spy during each HTTP/3 row (bench/results/
profile-h3-*.svg and the raw stacks beside it) and prints the functions that cost most.
Writes bench/results/h3.json.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO, Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from cryptography.hazmat.primitives.serialization import Encoding

from bench.common import ROOT, commit_of, free_port, sent_ages, table, write_result
from bench.fanout.rig import TWISTD, Rig, Server, percentile
from bench.fanout.scenarios import _profile, top_costs
from ssekd.dev.broker import start_broker
from ssekd.dev.certs import DEV_PASSWORD, issue, make_ca, write_store
from tests.support import zilla_config as zc
from tests.support.h3client import free_udp_port

#: Streams per connection, either protocol (the http binding's `h2-streams` and the quic
#: binding's `limits.streams` default to it).
PER_CONNECTION = 100
#: Latency is taken on every this-many-th stream.
SAMPLE_EVERY = 10
PROTOCOLS = ("h2", "h3")


def daemon_config(tls_port: int, quic_port: int, bootstrap: str, store: Path) -> zc.Node:
    """tcp -> tls (h2) -> http and quic -> the same http; http -> sse -> sse-kafka -> kafka."""
    quic: zc.Node = {"type": "quic", "kind": "server", "vault": "server",
                     "options": {"host": "127.0.0.1", "port": quic_port, "keys": ["localhost"],
                                 "alpn": ["h3"],
                                 "limits": {"streams": PER_CONNECTION}},
                     "exit": "http"}
    return zc.sse_stack(
        tls_port, bootstrap, name="bench", telemetry={},
        http=zc.http_server(options={"limits": {"h2-streams": PER_CONNECTION}}),
        tls=zc.tls_server("server", alpn=["h2"]),
        vaults={"server": zc.keys_vault(store, DEV_PASSWORD)},
        tcp_options={"limits": {"connections-per-ip": 19000}},
        extra={"quic": quic})


# -- the rig: a broker, a producer, a fresh daemon per row ------------------------------------


class H3Rig(Rig):
    """`bench.fanout`'s rig (its broker, topics, producer) with a daemon that listens on TLS
    (TCP) and QUIC (UDP), started afresh for each row by `restart`."""

    def __init__(self, daemon_root: Path | None = None, daemon_cpu: int | None = None) -> None:
        #: Another checkout whose ssekd the daemon runs (first on its PYTHONPATH), or None.
        self.daemon_root = daemon_root
        #: The one CPU the daemon runs on (`--pin`), or None: any.
        self.daemon_cpu = daemon_cpu
        self.tmp = Path(tempfile.mkdtemp(prefix="ssekd-bench-h3-"))
        ca = make_ca()
        write_store(self.tmp / "localhost.p12", "localhost", issue(ca, ["localhost", "127.0.0.1"]),
                    DEV_PASSWORD)
        self.ca = self.tmp / "ca.pem"
        self.ca.write_bytes(ca.cert.public_bytes(Encoding.PEM))
        self.broker = start_broker(log_path=self.tmp / "tansu.log")
        self.admin = AdminClient({"bootstrap.servers": self.broker.bootstrap})
        self.port = free_port()
        self.quic_port = free_udp_port()
        self.config = zc.write(self.tmp / "zilla.yaml", daemon_config(
            self.port, self.quic_port, self.broker.bootstrap, self.tmp / "localhost.p12"))
        self.servers: list[Server] = []
        self.producer = Producer({"bootstrap.servers": self.broker.bootstrap, "linger.ms": 2})
        self.runs = 0

    def restart(self) -> Server:
        """Stop the daemon (if any) and start a new one; returns it once it answers HTTP/3."""
        for server in self.servers:
            server.close()
        self.servers = []
        self.runs += 1
        log_path = self.tmp / f"daemon-{self.runs}.log"
        log = open(log_path, "wb")  # noqa: SIM115 - the daemon's, as long as it runs
        env = dict(os.environ)
        if self.daemon_root is not None:
            env["PYTHONPATH"] = os.pathsep.join(
                [str(self.daemon_root.resolve()),
                 *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))])
        cpu = self.daemon_cpu
        process = subprocess.Popen([TWISTD, "-n", "--pidfile=", "ssekd", "--config",
                                    str(self.config)],
                                   stdout=log, stderr=subprocess.STDOUT, cwd=self.tmp, env=env,
                                   preexec_fn=None if cpu is None
                                   else lambda: os.sched_setaffinity(0, {cpu}))
        log.close()
        try:
            self.ssekd = Server("ssekd", process, self.port, log_path)
            self.servers.append(self.ssekd)
            _wait_h3(self.quic_port, self.ca, process, log_path)
        except BaseException:
            process.kill()
            raise
        self.daemon, self.proc = process, self.ssekd.proc
        return self.ssekd


def _wait_h3(port: int, ca: Path, process: subprocess.Popen[bytes], log: Path) -> None:
    from tests.support.h3client import H3SseClient

    deadline = time.monotonic() + 30
    while True:
        try:
            H3SseClient(port, ca=ca, observe=False).connect(2).close()
            return
        except ConnectionError:
            if process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"no HTTP/3 handshake on {port}: {log}") from None


# -- the clients (run as `python -m bench.h3 --client ...`) -----------------------------------


class H2Counter:
    """One HTTP/2 connection over TLS holding SSE streams, read with as little Python per
    event as the HTTP/1.1 readers of `bench.fanout`: frame headers are parsed (9 bytes each),
    DATA payloads are counted with `bytes.count(b"id:")`, and only sampled streams are parsed
    for the producer's stamp. Windows are opened wide at the start (and widened again should
    half be used), SETTINGS and PING are acknowledged, HPACK is the `hpack` package's (response
    heads only: decoded to keep its table, and for the status)."""

    WINDOW = 2**31 - 1
    PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

    def __init__(self, port: int, ca: Path, path: str, streams: int, sampled: set[int]) -> None:
        import hpack

        context = ssl.create_default_context(cafile=str(ca))
        context.set_alpn_protocols(["h2"])
        raw = socket.create_connection(("127.0.0.1", port))
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock = context.wrap_socket(raw, server_hostname="localhost")
        if self.sock.selected_alpn_protocol() != "h2":
            raise ConnectionError("the server did not choose h2")
        self.decoder = hpack.Decoder()
        encoder = hpack.Encoder()
        self.ids = [1 + 2 * i for i in range(streams)]
        self.counts = dict.fromkeys(self.ids, 0)
        self.status: dict[int, int] = {}
        self.sampled = {self.ids[i] for i in sampled}
        self.latencies: list[float] = []
        self.resets = 0
        self.goaway = False
        self._tails = dict.fromkeys(self.ids, b"")
        self._text = dict.fromkeys(self.sampled, b"")
        self._taken = dict.fromkeys(self.ids, 0)
        self._taken_all = 0
        self._pending = b""
        out = [self.PREFACE,
               self._frame(4, 0, 0, (2).to_bytes(2, "big") + (0).to_bytes(4, "big")
                           + (4).to_bytes(2, "big") + self.WINDOW.to_bytes(4, "big")),
               self._frame(8, 0, 0, (self.WINDOW - 65535).to_bytes(4, "big"))]
        authority = f"localhost:{port}"
        for stream_id in self.ids:
            block = encoder.encode([(":method", "GET"), (":scheme", "https"),
                                    (":authority", authority), (":path", path),
                                    ("accept", "text/event-stream")])
            out.append(self._frame(1, 0x5, stream_id, block))  # END_STREAM | END_HEADERS
        self.sock.sendall(b"".join(out))
        self.sock.setblocking(False)

    @staticmethod
    def _frame(kind: int, flags: int, stream_id: int, payload: bytes) -> bytes:
        return (len(payload).to_bytes(3, "big") + bytes((kind, flags))
                + stream_id.to_bytes(4, "big") + payload)

    def fileno(self) -> int:
        return self.sock.fileno()

    def read(self) -> None:
        """Everything readable now (a TLS record at a time), frame by frame."""
        chunks = [self._pending]
        while True:
            try:
                data = self.sock.recv(1 << 18)
            except (ssl.SSLWantReadError, BlockingIOError):
                break
            if not data:
                raise ConnectionError("the server closed the connection")
            chunks.append(data)
        if len(chunks) == 1:
            return
        now = time.time()
        data = b"".join(chunks)
        size, pos, out = len(data), 0, []
        counts, tails, sampled = self.counts, self._tails, self.sampled
        taken = self._taken
        while size - pos >= 9:
            length = int.from_bytes(data[pos:pos + 3], "big")
            end = pos + 9 + length
            if end > size:
                break
            kind, flags = data[pos + 3], data[pos + 4]
            stream_id = int.from_bytes(data[pos + 5:pos + 9], "big") & 0x7FFFFFFF
            payload = data[pos + 9:end]
            pos = end
            if kind == 0:  # DATA
                if flags & 0x8:  # PADDED
                    payload = payload[1:len(payload) - payload[0]]
                joined = tails[stream_id] + payload[:2]
                counts[stream_id] += payload.count(b"id:") + joined.count(b"id:")
                tails[stream_id] = payload[-2:]
                if stream_id in sampled:
                    self._times(stream_id, payload, now)
                taken[stream_id] += length
                self._taken_all += length
                if taken[stream_id] > self.WINDOW // 2:
                    out.append(self._frame(8, 0, stream_id, taken[stream_id].to_bytes(4, "big")))
                    taken[stream_id] = 0
            elif kind == 1:  # HEADERS: a response head (no CONTINUATION from this server)
                block = payload
                if flags & 0x8:
                    block = block[1:len(block) - block[0]]
                if flags & 0x20:  # PRIORITY
                    block = block[5:]
                headers = self.decoder.decode(block, raw=True)
                for name, value in headers:
                    if name == b":status":
                        self.status[stream_id] = int(value)
            elif kind == 4 and not flags & 0x1:  # SETTINGS: acknowledge
                out.append(self._frame(4, 0x1, 0, b""))
            elif kind == 6 and not flags & 0x1:  # PING: answer
                out.append(self._frame(6, 0x1, 0, payload))
            elif kind == 3:  # RST_STREAM
                self.resets += 1
            elif kind == 7:  # GOAWAY
                self.goaway = True
        self._pending = data[pos:]
        if self._taken_all > self.WINDOW // 2:
            out.append(self._frame(8, 0, 0, self._taken_all.to_bytes(4, "big")))
            self._taken_all = 0
        if out:
            self.sock.setblocking(True)
            self.sock.sendall(b"".join(out))
            self.sock.setblocking(False)

    def _times(self, stream_id: int, data: bytes, now: float) -> None:
        self._text[stream_id] = sent_ages(self._text[stream_id], data, now, self.latencies)

    def close(self) -> None:
        self.sock.close()


def _sampled(first: int, count: int) -> set[int]:
    """Which of streams `first`..`first+count-1` (numbered over every client) are timed."""
    return {i - first for i in range(first, first + count) if i % SAMPLE_EVERY == 0}


def _commands(stdin: IO[str]) -> Any:
    """`GO`, then `EXPECT <events> <deadline>`, from the driver."""
    for line in stdin:
        yield line.split()


def client_h2(port: int, ca: Path, path: str, connections: int, first: int) -> dict[str, Any]:
    conns = [H2Counter(port, ca, path, PER_CONNECTION,
                       _sampled(first + c * PER_CONNECTION, PER_CONNECTION))
             for c in range(connections)]
    by_fd = {c.fileno(): c for c in conns}
    poll = select.epoll()
    for fd in by_fd:
        poll.register(fd, select.EPOLLIN)
    stdin = sys.stdin.fileno()
    os.set_blocking(stdin, False)
    poll.register(stdin, select.EPOLLIN)
    commands: list[list[str]] = []
    pending = b""

    def step(timeout: float) -> None:
        nonlocal pending
        for fd, _ in poll.poll(timeout):
            if fd == stdin:
                pending += os.read(stdin, 4096)
                *lines, pending = pending.split(b"\n")
                commands.extend(line.decode().split() for line in lines)
            else:
                by_fd[fd].read()

    deadline = time.monotonic() + 60
    while not all(len(c.status) == len(c.ids) for c in conns):
        if time.monotonic() > deadline:
            raise SystemExit("HTTP/2 response heads did not all come")
        step(0.05)
    print(json.dumps({"ready": _statuses(s for c in conns for s in c.status.values())}),
          flush=True)
    while not commands:
        step(0.05)
    cpu0, t0 = time.process_time(), time.time()  # GO
    while len(commands) < 2:
        step(0.005)
    expect, until = int(commands[1][1]), float(commands[1][2])
    on_time = sum(sum(c.counts.values()) for c in conns)
    while min(min(c.counts.values()) for c in conns) < expect and time.time() < until:
        step(0.005)
    result = {"counts": [n for c in conns for n in c.counts.values()],
              "latencies": [x for c in conns for x in c.latencies],
              "cpu": time.process_time() - cpu0, "seconds": time.time() - t0,
              "on_time": on_time, "resets": sum(c.resets for c in conns)}
    for c in conns:
        c.close()
    return result


def client_h3(port: int, ca: Path, path: str, connections: int, first: int) -> dict[str, Any]:
    from tests.support.h3client import H3SseClient, H3Stream, SseEvent

    latencies: list[float] = []
    timed: set[tuple[int, int]] = set()

    def make(c: int) -> Any:
        def on_event(stream: H3Stream, event: SseEvent) -> None:
            if (c, stream.stream_id) in timed:
                try:
                    latencies.append(time.time() - float(event.data.split(" ", 1)[0]))
                except ValueError:
                    pass
        return on_event

    clients = [H3SseClient(port, ca=ca, keep_events=False, observe=False,
                           on_event=make(c)).connect(10) for c in range(connections)]
    ids: list[list[int]] = []
    for c, client in enumerate(clients):
        opened = client.open_many([path] * PER_CONNECTION)
        ids.append(opened)
        timed.update((c, opened[i]) for i in _sampled(first + c * PER_CONNECTION,
                                                      PER_CONNECTION))
    for client, opened in zip(clients, ids, strict=True):
        if not client.wait(_all_answered(client, opened), 60):
            raise SystemExit("HTTP/3 response heads did not all come")
    print(json.dumps({"ready": _statuses(c.streams[i].status for c in clients
                                         for i in c.streams)}), flush=True)
    commands = _commands(sys.stdin)
    next(commands)  # GO
    cpu0, t0 = time.process_time(), time.time()
    _, expect_text, until_text = next(commands)
    expect, until = int(expect_text), float(until_text)

    def counts() -> list[int]:
        return [c.streams[i].count for c, opened in zip(clients, ids, strict=True)
                for i in opened]

    on_time = sum(counts())
    for client, opened in zip(clients, ids, strict=True):
        client.wait(_all_have(client, opened, expect), max(0.0, until - time.time()))
    seconds = time.time() - t0
    result = {"counts": counts(), "latencies": latencies, "cpu": time.process_time() - cpu0,
              "seconds": seconds, "on_time": on_time,
              "resets": sum(1 for c in clients for s in c.streams.values()
                            if s.reset is not None),
              "send_dropped": sum(c.stats.send_dropped for c in clients)}
    for client in clients:
        client.close()
    return result


def _all_answered(client: Any, ids: list[int]) -> Any:
    return lambda: all(client.streams[i].status is not None for i in ids)


def _all_have(client: Any, ids: list[int], events: int) -> Any:
    return lambda: all(client.streams[i].count >= events for i in ids)


def _statuses(values: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for v in values:
        out[str(v)] = out.get(str(v), 0) + 1
    return out


# -- the driver --------------------------------------------------------------------------------


def fanout(rig: H3Rig, protocol: str, streams: int, connections: int, rate: float,
           seconds: float, processes: int, profile: bool = False) -> dict[str, Any]:
    """One row: a fresh daemon, `streams` streams over `connections` connections of
    `protocol`, `rate` events/s for `seconds` (module docstring)."""
    load_before = os.getloadavg()[0]
    server = rig.restart()
    topic = rig.topic(f"h3-{protocol}-{streams}-{int(rate)}-{time.monotonic_ns()}")
    time.sleep(1.0)  # the daemon settles (its first metadata, its timers)
    rss0 = server.rss()
    processes = max(1, min(processes, connections))
    shares = [connections // processes + (1 if p < connections % processes else 0)
              for p in range(processes)]
    clients, first = [], 0
    for share in shares:
        clients.append(subprocess.Popen(
            [sys.executable, "-m", "bench.h3", "--client", protocol, "--port",
             str(rig.quic_port if protocol == "h3" else rig.port), "--ca", str(rig.ca),
             "--path", f"/{topic}", "--connections", str(share), "--first", str(first)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT))
        first += share * PER_CONNECTION
    try:
        statuses: dict[str, int] = {}
        for c in clients:
            assert c.stdout is not None
            line = c.stdout.readline()
            if not line:
                raise RuntimeError(f"a {protocol} client did not get ready")
            for k, v in json.loads(line)["ready"].items():
                statuses[k] = statuses.get(k, 0) + v
        time.sleep(1.0)
        rss = server.rss()
        profilers = _profile(server, f"{protocol}-{streams}x{int(rate)}", seconds) \
            if profile else []
        user0, sys0 = server.cpu_split()
        waited0 = waited(server.proc.pid)
        for c in clients:
            _say(c, "GO")
        t0 = time.time()
        sent = rig.produce_at(topic, rate, seconds)
        produce_time = time.time() - t0
        until = time.time() + 10.0 + streams / 500
        for c in clients:
            _say(c, f"EXPECT {sent} {until}")
        results = []
        for c in clients:
            out, _ = c.communicate(timeout=until - time.time() + 60)
            results.append(json.loads(out.strip().splitlines()[-1]))
        user1, sys1 = server.cpu_split()
        waited1 = waited(server.proc.pid)
    finally:
        for c in clients:
            if c.poll() is None:
                c.kill()
    for p in profilers:
        p.wait(60)
    costs = top_costs(ROOT / "bench" / "results"
                      / f"profile-ssekd-{protocol}-{streams}x{int(rate)}.txt") \
        if profilers else None
    counts = [n for r in results for n in r["counts"]]
    lat = [x for r in results for x in r["latencies"]]
    delivered = sum(counts)
    cpu = user1 + sys1 - user0 - sys0
    elapsed = max(produce_time, *(r["seconds"] for r in results))
    return {
        "protocol": protocol, "streams": len(counts), "connections": connections,
        "client_processes": processes, "rate": rate, "seconds": round(produce_time, 2),
        "statuses": statuses, "produced": sent, "expected": sent * len(counts),
        "delivered": delivered,
        "complete": sum(1 for n in counts if n == sent),
        "lost": sum(max(0, sent - n) for n in counts),
        "duplicated": sum(max(0, n - sent) for n in counts),
        "resets": sum(r["resets"] for r in results),
        "delivered_per_s": round(delivered / elapsed),
        "on_time_per_s": round(sum(r["on_time"] for r in results) / produce_time),
        "latency_samples": len(lat),
        "p50_ms": round(percentile(lat, 0.5) * 1000, 2),
        "p99_ms": round(percentile(lat, 0.99) * 1000, 2),
        "p999_ms": round(percentile(lat, 0.999) * 1000, 2),
        "max_ms": round(max(lat, default=float("nan")) * 1000, 2),
        "daemon_cpu_s": round(cpu, 2),
        "daemon_cpu_pct": round(100 * cpu / elapsed, 1),
        # runnable but not running meanwhile: the share of the window the daemon waited for a
        # core (the clients, the broker and whatever else the machine runs had them)
        "daemon_waited_pct": round(100 * (waited1 - waited0) / elapsed, 1),
        # CPU seconds per 1,000 deliveries, in ms (= µs per delivery)
        "cpu_ms_per_1k": round(cpu * 1e6 / max(1, delivered), 2),
        "user_ms_per_1k": round((user1 - user0) * 1e6 / max(1, delivered), 2),
        "system_ms_per_1k": round((sys1 - sys0) * 1e6 / max(1, delivered), 2),
        "rss_before_mib": round(rss0 / 2**20, 1), "rss_mib": round(rss / 2**20, 1),
        "kib_per_stream": round(max(0, rss - rss0) / max(1, len(counts)) / 1024, 2),
        "client_cpu_pct": round(100 * sum(r["cpu"] for r in results) / elapsed, 1),
        "load_before": round(load_before, 2), "load_avg": round(os.getloadavg()[0], 2),
        **({"top_costs": costs} if costs is not None else {}),
    }


def waited(pid: int) -> float:
    """Seconds the process's threads have spent runnable but not running (waiting on a run
    queue, /proc/<pid>/task/*/schedstat): what the machine's other work took from it."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[1])
        except (OSError, IndexError, ValueError):
            pass  # a thread that ended meanwhile
    return total / 1e9


def _say(client: subprocess.Popen[str], line: str) -> None:
    assert client.stdin is not None
    client.stdin.write(line + "\n")
    client.stdin.flush()


def print_table(result: dict[str, Any]) -> None:
    pinned = ", the daemon alone on a CPU" if result["pinned"] else ""
    print(table(f"SSE fan-out, HTTP/3 beside HTTP/2 (ssekd {result['daemon']}, {result['cpus']} "
                f"cpus{pinned}, {result['mode']}); "
                f"every stream counted, latency over every {SAMPLE_EVERY}th stream",
                ["protocol", "streams x ev/s", "conns / client procs", "delivered/s", "lost",
                 "dup", "p50 ms", "p99 ms", "p999 ms", "daemon CPU ms per 1k", "user/sys",
                 "daemon CPU %", "daemon waited %", "KiB per stream", "client CPU %", "load before"],
                [[r["protocol"], f"{r['streams']:,} x {r['rate']:g}",
                  f"{r['connections']} / {r['client_processes']}", r["delivered_per_s"],
                  r["lost"], r["duplicated"], r["p50_ms"], r["p99_ms"], r["p999_ms"],
                  r["cpu_ms_per_1k"], f"{r['user_ms_per_1k']}/{r['system_ms_per_1k']}",
                  r["daemon_cpu_pct"], r["daemon_waited_pct"], r["kib_per_stream"],
                  r["client_cpu_pct"], r["load_before"]]
                 for r in result["rows"]]))
    for r in result["rows"]:
        for name, share in r.get("top_costs", []):
            print(f"  {r['protocol']} self time {share:.1%} {name}")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m bench.h3", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="200 streams over 2 connections, 5 s (instead of 1,000 over 10, 10 s)")
    parser.add_argument("--streams", type=int)
    parser.add_argument("--rate", type=float, default=50)
    parser.add_argument("--seconds", type=float)
    parser.add_argument("--processes", type=int, help="client processes (default: one per "
                                                      "connection, at most 10)")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--only", choices=PROTOCOLS)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--pin", action="store_true",
                        help="the daemon alone on the last CPU, the clients, broker and "
                             "producer on the others")
    parser.add_argument("--daemon-root", type=Path,
                        help="run ssekd from this checkout (first on its PYTHONPATH), e.g. the "
                             "commit before a change; the clients are this checkout's")
    args = parser.parse_args(argv)
    streams = args.streams or (200 if args.quick else 1000)
    seconds = args.seconds or (5 if args.quick else 10)
    connections = max(1, streams // PER_CONNECTION)
    streams = connections * PER_CONNECTION
    processes = args.processes or min(10, connections)
    protocols = [args.only] if args.only else list(PROTOCOLS)
    daemon_cpu = None
    if args.pin:
        cpus = sorted(os.sched_getaffinity(0))
        if len(cpus) < 2:
            raise SystemExit("--pin needs two CPUs")
        daemon_cpu = cpus[-1]
        os.sched_setaffinity(0, set(cpus[:-1]))  # inherited by the broker and the clients
    rig = H3Rig(args.daemon_root, daemon_cpu)
    rows: list[dict[str, Any]] = []
    try:
        for n in range(args.rounds):
            for protocol in protocols if n % 2 == 0 else protocols[::-1]:
                row = fanout(rig, protocol, streams, connections, args.rate, seconds,
                             processes, profile=args.profile and protocol == "h3")
                rows.append(row)
                print(f"  {protocol} {streams:,} x {args.rate:g}: {row['delivered_per_s']:,}/s "
                      f"lost {row['lost']:,} p99 {row['p99_ms']} ms "
                      f"{row['cpu_ms_per_1k']} ms CPU per 1k, {row['kib_per_stream']} KiB "
                      f"per stream, clients {row['client_cpu_pct']}%", flush=True)
    finally:
        rig.close()
    result = {"mode": "quick" if args.quick else "full", "cpus": os.cpu_count(),
              "pinned": daemon_cpu is not None,
              "daemon": commit_of(args.daemon_root or ROOT), "rows": rows}
    print()
    print_table(result)
    path = write_result("h3", result)
    print(f"\nwritten {path}")
    return result



def _client_main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--client", choices=PROTOCOLS, required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--ca", type=Path, required=True)
    parser.add_argument("--path", required=True)
    parser.add_argument("--connections", type=int, required=True)
    parser.add_argument("--first", type=int, required=True)
    a = parser.parse_args(argv)
    run = client_h3 if a.client == "h3" else client_h2
    print(json.dumps(run(a.port, a.ca, a.path, a.connections, a.first)), flush=True)


if __name__ == "__main__":
    if "--client" in sys.argv:
        _client_main(sys.argv[1:])
    else:
        main()
