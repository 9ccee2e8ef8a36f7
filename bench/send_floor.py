"""ssekd's fan-out beside a bare send loop: the CPU a delivered event costs at the least.

The anchor (`serve`, run as its own process) is what one Python process must do at the least
to fan a topic out to the same streams: it accepts the load client's connections, answers each
`GET /events/{topic}` with an event-stream response head, consumes the topic with
confluent-kafka as the producer writes it, and writes each batch - what one `poll` brought,
with the same `id:`/`data:` framing and HTTP/1.1 chunk framing ssekd sends - to every socket
with a plain non-blocking `socket.send`. No framework, no per-stream state beyond the bytes a
socket did not take. Both servers are driven by the same producer and the same readers
(`bench.fanout.rig.run_clients`, which count events by `id:`), in the same run, alternating
which goes first; each row reports the server's process CPU per delivered event, the send
syscalls per event (counted with `perf stat`, `bench.fanout.syscalls`) and the bytes per send.

    python -m bench.send_floor [--quick] [--scenario 1000x250] [--daemon-root PATH]

`--daemon-root PATH` runs ssekd from another checkout (first on the daemon's PYTHONPATH), e.g.
the commit before a change, against the same anchor. Writes bench/results/send_floor.json.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import select
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.common import RESULTS, commit_of
from bench.fanout.rig import Rig, Server
from bench.fanout.scenarios import fanout
from ssekd.dev.broker import free_port

#: (clients, events/s per client): the rates issue 41's target names.
SCENARIOS = [(1000, 100), (1000, 250)]
#: The response head of the bare loop: an event stream, chunked as ssekd's (HTTP/1.1).
HEAD = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n")


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while True:
        group = value & 0x7F
        value >>= 7
        if not value:
            out.append(group)
            return bytes(out)
        out.append(group | 0x80)


def _token(positions: list[int]) -> bytes:
    """An id the size of ssekd's (version, partition count, each partition's next offset)."""
    raw = b"\x01" + _uvarint(2 * len(positions)) + b"".join(
        _uvarint(2 * p) + _uvarint(2 * at) for p, at in enumerate(positions))
    return base64.urlsafe_b64encode(raw).rstrip(b"=")


def serve(port: int, bootstrap: str) -> None:
    """The bare send loop (module docstring); runs until killed."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    listener = socket.create_server(("127.0.0.1", port), backlog=4096)
    listener.setblocking(False)
    poll = select.epoll()
    poll.register(listener.fileno(), select.EPOLLIN)
    asking: dict[int, tuple[socket.socket, bytes]] = {}  # connections whose GET is not whole
    streams: dict[int, socket.socket] = {}
    unsent: dict[int, bytearray] = {}  # what a socket did not take, sent before anything else
    topic = ""
    consumer: Any = None
    positions: list[int] = []

    def drop(fd: int) -> None:
        sock = streams.pop(fd, None) or asking.pop(fd, (None, b""))[0]
        unsent.pop(fd, None)
        if sock is not None:
            poll.unregister(fd)
            sock.close()

    def follow(name: str) -> Any:
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bare-{name}",
                      "enable.auto.commit": False, "fetch.wait.max.ms": 10})
        parts = c.list_topics(name, timeout=10).topics[name].partitions
        c.assign([TopicPartition(name, p, OFFSET_BEGINNING) for p in sorted(parts)])
        positions[:] = [0] * len(parts)
        return c

    while True:
        # Kafka first: `poll` returns as soon as a record is there, `consume(..., 0)` takes what
        # else arrived with it - one batch, as ssekd's tail thread hands the reactor
        batch: list[Any] = []
        if consumer is not None:
            first = consumer.poll(0.01)
            if first is not None:
                batch = [first, *consumer.consume(1000, 0)]
        for fd, _ in poll.poll(0 if consumer is not None else 0.05):
            if fd == listener.fileno():
                while True:
                    try:
                        sock, _ = listener.accept()
                    except BlockingIOError:
                        break
                    sock.setblocking(False)
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    asking[sock.fileno()] = (sock, b"")
                    poll.register(sock.fileno(), select.EPOLLIN)
                continue
            if fd in streams:  # a reader closed its stream
                try:
                    if not streams[fd].recv(4096):
                        drop(fd)
                except (BlockingIOError, InterruptedError):
                    pass
                except OSError:
                    drop(fd)
                continue
            sock, got = asking[fd]
            try:
                more = sock.recv(4096)
            except (BlockingIOError, InterruptedError):
                continue
            if not more:
                drop(fd)
                continue
            got += more
            if b"\r\n\r\n" not in got:
                asking[fd] = (sock, got)
                continue
            del asking[fd]
            name = got.split(b" ", 2)[1].rsplit(b"/", 1)[-1].decode()
            if name != topic:
                if consumer is not None:
                    consumer.close()
                topic, consumer = name, follow(name)
            sock.sendall(HEAD)
            streams[fd] = sock
        if not batch and not unsent:
            continue
        events = []
        for m in batch:
            if m.error() is not None:
                continue
            positions[m.partition()] = m.offset() + 1
            events.append(b"id:" + _token(positions) + b"\ndata:" + (m.value() or b"") + b"\n\n")
        data = b"".join(events)
        chunk = b"%x\r\n%b\r\n" % (len(data), data) if data else b""
        for fd in list(unsent):  # the sockets that did not take everything last time
            left = unsent.pop(fd)
            left += chunk
            try:
                sent = streams[fd].send(left)
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError:
                drop(fd)
                continue
            if sent < len(left):
                unsent[fd] = left[sent:]
        if not chunk:
            continue
        for fd, sock in streams.items():
            if fd in unsent:
                continue
            try:
                sent = sock.send(chunk)
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError:
                continue  # its close shows in the poll
            if sent < len(chunk):
                unsent[fd] = bytearray(chunk[sent:])


def start_bare(rig: Rig) -> Server:
    """The bare send loop in its own process, on the rig's broker."""
    port = free_port()
    log = open(rig.tmp / "bare.log", "wb")  # noqa: SIM115 - lives as long as the process
    process = subprocess.Popen([sys.executable, "-m", "bench.send_floor", "--serve", str(port),
                                "--bootstrap", rig.broker.bootstrap],
                               stdout=log, stderr=subprocess.STDOUT,
                               cwd=Path(__file__).resolve().parents[1])
    server = Server("bare", process, port, rig.tmp / "bare.log")
    rig.servers.append(server)
    return server


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m bench.send_floor", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="5 s per row instead of 10")
    parser.add_argument("--scenario", action="append", default=[],
                        help="CLIENTSxRATE instead of 1000x100 and 1000x250")
    parser.add_argument("--rounds", type=int, default=1, help="each row this many times")
    parser.add_argument("--daemon-root", type=Path,
                        help="run ssekd from this checkout (first on its PYTHONPATH)")
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--bootstrap", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        serve(args.serve, args.bootstrap)
    scenarios = [tuple(int(x) for x in s.split("x")) for s in args.scenario] or SCENARIOS
    seconds = 5 if args.quick else 10
    if args.daemon_root is not None:  # inherited by the daemon that Rig starts
        root = str(args.daemon_root.resolve())
        os.environ["PYTHONPATH"] = os.pathsep.join(
            [root, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))])
    rig = Rig()
    rows: list[dict[str, Any]] = []
    try:
        bare = start_bare(rig)
        daemon_commit = commit_of(args.daemon_root or Path(__file__).resolve().parents[1])
        i = 0
        for _ in range(args.rounds):
            for clients, rate in scenarios:
                for server in (rig.ssekd, bare) if i % 2 == 0 else (bare, rig.ssekd):
                    row = fanout(rig, clients, rate, seconds, server=server, syscalls=True)
                    rows.append(row)
                    print(f"  {server.name:>6} {clients} x {rate}: {row['delivered_per_s']:,}/s "
                          f"{row['cpu_us_per_event']} us/event p99 {row['p99_ms']} ms "
                          f"{row['syscalls_per_event']} sends/event", flush=True)
                i += 1
    finally:
        rig.close()
    result = {"mode": "quick" if args.quick else "full", "cpus": os.cpu_count(),
              "daemon": daemon_commit, "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "rows": rows, "ratios": _ratios(rows)}
    print_table(result)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "send_floor.json").write_text(json.dumps(result, indent=2) + "\n")
    return result



def _ratios(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """ssekd's CPU per event over the bare loop's, per scenario (means over the rounds)."""
    out = []
    for key in dict.fromkeys((r["clients"], r["rate"]) for r in rows):
        def mean(name: str, field: str, key: tuple[int, float] = key) -> float:
            values = [r[field] for r in rows if (r["clients"], r["rate"]) == key
                      and r["server"] == name and r[field] is not None]
            return sum(values) / len(values) if values else float("nan")
        out.append({"clients": key[0], "rate": key[1],
                    "cpu_ratio": round(mean("ssekd", "cpu_us_per_event")
                                       / mean("bare", "cpu_us_per_event"), 2),
                    "syscall_ratio": round(mean("ssekd", "syscalls_per_event")
                                           / mean("bare", "syscalls_per_event"), 2)})
    return out


def print_table(result: dict[str, Any]) -> None:
    print(f"\nssekd ({result['daemon']}) beside the bare send loop ({result['cpus']} cpus, "
          f"{result['mode']}); every stream counted, latency over ~100 sampled streams\n")
    print("| clients x ev/s | server | delivered/s | lost | dup | p50 ms | p99 ms "
          "| CPU us/event | user | system | sends/event | bytes/send | syscalls/event |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in result["rows"]:
        print(f"| {r['clients']:,} x {r['rate']:.0f} | {r['server']} | {r['delivered_per_s']:,} "
              f"| {r['lost']:,} | {r['duplicated']:,} | {r['p50_ms']} | {r['p99_ms']} "
              f"| {r['cpu_us_per_event']} | {r['user_us_per_event']} "
              f"| {r['system_us_per_event']} | {r['syscalls_per_event']} "
              f"| {r['bytes_per_syscall']} | {r['all_syscalls_per_event']} |")
    print()
    for x in result["ratios"]:
        print(f"{x['clients']:,} x {x['rate']:.0f}: ssekd/bare CPU per event {x['cpu_ratio']}, "
              f"send syscalls per event {x['syscall_ratio']}")


if __name__ == "__main__":
    main()
