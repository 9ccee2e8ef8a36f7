"""TLS benchmark: full handshakes per second, and SSE fan-out over HTTP/2 vs HTTP/1.1 (both TLS).

Handshakes: parallel `openssl s_time -new` against ssekd's tls binding and, as the baseline,
`twistd web` serving TLS with the same certificate (the same Twisted/pyOpenSSL stack without
ssekd's SNI/ALPN/routing); TLS 1.3 and TLS 1.2.

Fan-out: one topic, `subscribers` SSE streams - as HTTP/2 streams, 100 per connection, or as
one HTTP/1.1 connection each - held by client processes; then `messages` messages are produced
at a steady `rate`, as on a live topic. Reported per protocol: time until every stream has every
event, latency from produce to receipt (p50/p99), and ssekd's CPU time per 1,000 deliveries
(the fair figure on a small machine, where clients and server share the cores).

    .venv/bin/python -m bench.tls            # prints tables, writes bench/results/tls.json
"""

from __future__ import annotations

import argparse
import json
import re
import select
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat

from bench.common import BIN, ROOT, free_port, spawn, stop, table, wait_port, write_result
from ssekd.dev.broker import start_broker
from ssekd.dev.certs import DEV_PASSWORD, issue, make_ca, write_store
from tests.support import zilla_config as zc


def daemon_config(port: int, bootstrap: str) -> zc.Node:
    """tcp -> tls (h2, http/1.1) -> http -> files under /www/ and sse -> sse-kafka -> kafka."""
    return zc.sse_stack(
        port, bootstrap, name="bench", www="www", telemetry={},
        tls=zc.tls_server("server", sni=["localhost"], alpn=["http/1.1", "h2"]),
        vaults={"server": zc.keys_vault("localhost.p12", "${{env.KEYSTORE_PASSWORD}}")},
        names={"tcp": "tcp_in", "tls": "tls_in", "http": "http_in"})


# -- handshakes ------------------------------------------------------------------------------


def s_time(port: int, seconds: int, parallel: int, version: str) -> float:
    """Full handshakes per second from `parallel` `openssl s_time -new` processes."""
    argv = ["openssl", "s_time", "-connect", f"127.0.0.1:{port}", "-new",
            "-time", str(seconds), version]
    procs = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              stdin=subprocess.DEVNULL, text=True) for _ in range(parallel)]
    total = 0.0
    for p in procs:
        out, _ = p.communicate(timeout=seconds + 60)
        m = re.search(r"(\d+) connections in (\d+) real seconds", out)
        if not m:
            raise RuntimeError(f"openssl s_time said: {out}")
        total += int(m.group(1)) / max(1, int(m.group(2)))
    return total


# -- fan-out clients (run as subprocesses of this script) -------------------------------------


def _record(stream_events: list[int], payload: bytes, now_ns: int) -> None:
    try:
        stream_events.append(now_ns - int(payload))
    except ValueError:
        pass


def client_h2(port: int, ca: Path, topic: str, streams: int, expect: int,
              timeout: float) -> dict[str, Any]:
    from tests.support.h2client import H2SseClient

    latencies: list[int] = []
    with H2SseClient(port, ca=ca) as client:
        ids = [client.open(f"/{topic}") for _ in range(streams)]
        client.wait(lambda: all(client.streams[i].headers for i in ids), timeout)
        print("READY", flush=True)
        seen = dict.fromkeys(ids, 0)
        deadline = time.monotonic() + timeout
        sock = client.sock
        while time.monotonic() < deadline and min(seen.values()) < expect:
            # Stamp receipt when the socket turns readable, as the HTTP/1.1 client does (a
            # `pump(0.05)` runs out its whole 50 ms, which added up to 50 ms to each latency).
            if not (isinstance(sock, ssl.SSLSocket) and sock.pending()):
                select.select([sock], [], [], 0.05)
            now = time.time_ns()
            client.pump(0)
            for i in ids:
                data = client.streams[i].data
                for payload in data[seen[i]:]:
                    _record(latencies, payload.encode(), now)
                seen[i] = len(data)
        done = time.monotonic()
    return {"received": sum(seen.values()), "latencies_ns": latencies, "done": done}


class _H1Stream:
    """One HTTP/1.1 SSE response over TLS, de-chunked just enough to find `data:` lines."""

    def __init__(self, sock: ssl.SSLSocket) -> None:
        self.sock = sock
        self.raw = b""
        self.head_done = False
        self.body = b""
        self.count = 0

    def feed(self, data: bytes, latencies: list[int], now: int) -> None:
        self.raw += data
        if not self.head_done:
            if b"\r\n\r\n" not in self.raw:
                return
            _, self.raw = self.raw.split(b"\r\n\r\n", 1)
            self.head_done = True
        pos, pieces = 0, [self.body]
        while True:  # chunked transfer coding: size line, data, CRLF
            line_end = self.raw.find(b"\r\n", pos)
            if line_end < 0:
                break
            size = int(self.raw[pos:line_end].split(b";")[0] or b"0", 16)
            if len(self.raw) < line_end + 2 + size + 2:
                break
            pieces.append(self.raw[line_end + 2:line_end + 2 + size])
            pos = line_end + 2 + size + 2
        self.raw = self.raw[pos:]
        self.body = b"".join(pieces)
        blocks = self.body.split(b"\n\n")
        self.body = blocks.pop()  # an incomplete event, or b""
        for block in blocks:
            for line in block.split(b"\n"):
                if line.startswith(b"data:"):
                    self.count += 1
                    _record(latencies, line[5:], now)


def client_h1(port: int, ca: Path, topic: str, conns: int, expect: int,
              timeout: float) -> dict[str, Any]:
    context = ssl.create_default_context(cafile=str(ca))
    context.set_alpn_protocols(["http/1.1"])
    streams: dict[int, _H1Stream] = {}
    for _ in range(conns):
        sock = context.wrap_socket(socket.create_connection(("127.0.0.1", port)),
                                   server_hostname="localhost")
        sock.sendall(f"GET /{topic} HTTP/1.1\r\nHost: localhost:{port}\r\n"
                     f"Accept: text/event-stream\r\n\r\n".encode())
        sock.setblocking(False)
        streams[sock.fileno()] = _H1Stream(sock)
    latencies: list[int] = []
    socks = [s.sock for s in streams.values()]
    ready_deadline = time.monotonic() + timeout
    announced = False
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not announced and (all(s.head_done for s in streams.values())
                              or time.monotonic() > ready_deadline):
            print("READY", flush=True)
            announced = True
            deadline = time.monotonic() + timeout
        if announced and min(s.count for s in streams.values()) >= expect:
            break
        readable = select.select(socks, [], [], 0.05)[0]
        now = time.time_ns()
        for sock in readable:
            stream = streams[sock.fileno()]
            while True:
                try:
                    data = sock.recv(1 << 16)
                except (ssl.SSLWantReadError, BlockingIOError):
                    break
                if not data:
                    break
                stream.feed(data, latencies, now)
    done = time.monotonic()
    for s in socks:
        s.close()
    return {"received": sum(s.count for s in streams.values()), "latencies_ns": latencies,
            "done": done}


# -- fan-out driver --------------------------------------------------------------------------


def fanout(port: int, ca: Path, bootstrap: str, pid: int, protocol: str, subscribers: int,
           messages: int, rate: float, processes: int, timeout: float = 120) -> dict[str, Any]:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"fanout-{protocol.replace('/', '')}-{time.monotonic_ns()}"
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the topic exists
    for f in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        f.result(10)
    per_process = subscribers // processes
    clients = [subprocess.Popen(
        [sys.executable, "-m", "bench.tls", "--client", protocol, "--port", str(port), "--ca", str(ca),
         "--topic", topic, "--streams", str(per_process), "--expect", str(messages)],
        stdout=subprocess.PIPE, text=True, cwd=ROOT) for _ in range(processes)]
    for c in clients:
        assert c.stdout is not None
        line = c.stdout.readline()
        if line.strip() != "READY":
            raise RuntimeError(f"client did not get ready: {line!r}")
    server = psutil.Process(pid)
    cpu_before = sum(server.cpu_times()[:2])
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    started = time.monotonic()
    for n in range(messages):
        # Paced, as a live topic is: each event is its own write to every stream, which is
        # what HTTP/2 framing and TLS records cost per delivery.
        delay = started + n / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        producer.produce(topic, value=str(time.time_ns()).encode())
        producer.poll(0)
    producer.flush(30)
    results = []
    for c in clients:
        out, _ = c.communicate(timeout=timeout)
        results.append(json.loads(out.strip().splitlines()[-1]))
    cpu = sum(server.cpu_times()[:2]) - cpu_before
    finished = max(r["done"] for r in results)
    received = sum(r["received"] for r in results)
    latencies = sorted(x for r in results for x in r["latencies_ns"])
    elapsed = finished - started
    expected = per_process * processes * messages
    return {
        "protocol": protocol, "subscribers": per_process * processes,
        "connections": processes if protocol == "h2" else per_process * processes,
        "messages": messages, "rate_per_s": rate, "expected": expected, "received": received,
        "seconds": elapsed, "deliveries_per_s": received / elapsed if elapsed else 0.0,
        "latency_p50_ms": latencies[len(latencies) // 2] / 1e6 if latencies else None,
        "latency_p99_ms": latencies[int(len(latencies) * 0.99)] / 1e6 if latencies else None,
        "server_cpu_s": cpu, "server_cpu_ms_per_1k": cpu * 1e6 / received if received else None,
    }


def main(seconds: int = 5, subscribers: int = 200, seconds_of_events: int = 5,
         rates: tuple[float, ...] = (20, 100), processes: int = 2) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "www").mkdir()
        (root / "www" / "one-k.txt").write_bytes(b"x" * 1024)
        ca = make_ca()
        leaf = issue(ca, ["localhost", "127.0.0.1"])
        write_store(root / "localhost.p12", "localhost", leaf, DEV_PASSWORD)
        (root / "ca.pem").write_bytes(ca.cert.public_bytes(Encoding.PEM))
        (root / "key.pem").write_bytes(leaf.key.private_bytes(
            Encoding.PEM, PrivateFormat.TraditionalOpenSSL, NoEncryption()))
        (root / "cert.pem").write_bytes(leaf.cert.public_bytes(Encoding.PEM))
        broker = start_broker(log_path=root / "tansu.log")
        port, web_port = free_port(), free_port()
        zc.write(root / "zilla.yaml", daemon_config(port, broker.bootstrap))
        ssekd = spawn([str(BIN / "twistd"), "-n", "--pidfile=", "ssekd", "--config",
                       "zilla.yaml"], cwd=root, env={"KEYSTORE_PASSWORD": DEV_PASSWORD},
                      log=root / "ssekd.log")
        web = spawn([str(BIN / "twistd"), "-n", "--pidfile=", "--logfile=/dev/null", "web",
                     "--path", str(root / "www"), "--listen",
                     f"ssl:{web_port}:interface=127.0.0.1:privateKey=key.pem:certKey=cert.pem"],
                    cwd=root)
        try:
            wait_port(port, ssekd)
            wait_port(web_port, web)
            handshakes: dict[str, dict[str, float]] = {}
            for version in ("-tls1_3", "-tls1_2"):
                handshakes[version[1:]] = {
                    "ssekd": s_time(port, seconds, processes, version),
                    "twistd web": s_time(web_port, seconds, processes, version),
                }
            runs = [fanout(port, root / "ca.pem", broker.bootstrap, ssekd.pid, protocol,
                           subscribers, int(rate * seconds_of_events), rate, processes)
                    for rate in rates for protocol in ("h2", "http/1.1")]
        finally:
            stop(ssekd)
            stop(web)
            broker.stop()
    print(table(f"Full TLS handshakes/s (openssl s_time -new, {processes} in parallel, "
                f"{seconds}s, P-256 key)", ["protocol", "ssekd", "twistd web"],
                [[v, h["ssekd"], h["twistd web"]] for v, h in handshakes.items()]))
    print()
    print(table(f"SSE fan-out over TLS to {subscribers} streams, {seconds_of_events}s of events",
                ["events/s", "protocol", "connections", "received/expected", "seconds",
                 "deliveries/s", "p50 ms", "p99 ms", "ssekd CPU ms per 1k"],
                [[r["rate_per_s"], r["protocol"], r["connections"],
                  f"{r['received']}/{r['expected']}",
                  r["seconds"], r["deliveries_per_s"], r["latency_p50_ms"],
                  r["latency_p99_ms"], r["server_cpu_ms_per_1k"]] for r in runs]))
    data = {"handshakes_per_s": handshakes, "fanout": runs}
    path = write_result("tls", data)
    print(f"\nwritten {path}")
    return data


def _client_main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--client", choices=["h2", "http/1.1"], required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--ca", type=Path, required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--streams", type=int, required=True)
    parser.add_argument("--expect", type=int, required=True)
    parser.add_argument("--timeout", type=float, default=90)
    a = parser.parse_args(argv)
    run = client_h2 if a.client == "h2" else client_h1
    result = run(a.port, a.ca, a.topic, a.streams, a.expect, a.timeout)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    if "--client" in sys.argv:
        _client_main(sys.argv[1:])
    else:
        main()
