"""What an idle stream costs in memory, and where it goes.

Starts the benchmark's daemon (the fan-out config: tcp -> http -> sse -> sse-kafka -> kafka
cache, a prometheus exporter) on a tansu broker, opens one stream so the topic's consumer and
cache exist, then N idle streams of that topic (10,000; 2,000 with `--quick`), held by load
client processes as in the fan-out benchmark's idle scenario. Two runs:

1. under tracemalloc (`bench/traced_daemon.py`, enough frames to see who asked): a snapshot
   before and after the N streams; bytes per stream is the difference over N, and the
   allocation sites are grouped by where the memory was allocated (file:line) and the nearest
   frame of ssekd that led there;
2. without tracemalloc (whose tables inflate RSS): RSS before and after, per stream.

`--daemon-root PATH` runs the daemon from another checkout (put first on its PYTHONPATH), so
a commit before this benchmark existed is measured the same way; the broker, the load clients
and this analysis come from this checkout.

    python -m bench.idle_memory [--quick] [--streams N] [--daemon-root PATH] [--top 20]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

import psutil
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from bench.common import table, write_result
from bench.fanout.rig import config, hold_idle
from ssekd.dev.broker import free_port, port_open, start_broker
from tests.support import zilla_config as zc

ROOT = Path(__file__).resolve().parent.parent
RUNNER = ROOT / "bench" / "traced_daemon.py"
#: Frames kept per allocation: enough to reach from CPython and Twisted back into ssekd.
FRAMES = 40


def idle_config(port: int, bootstrap: str, metrics_port: int) -> zc.Node:
    """The fan-out benchmark's daemon, with room for more than 10,000 streams in one process."""
    built = config(port, bootstrap, metrics_port)
    built["bindings"]["sse"]["options"] = {"limits": {"streams": 20000}}
    return built


class Daemon:
    """The daemon under `bench/traced_daemon.py`, from `root`'s checkout."""

    def __init__(self, tmp: Path, bootstrap: str, root: Path, frames: int) -> None:
        self.port = free_port()
        cfg = tmp / "zilla.yaml"
        zc.write(cfg, idle_config(self.port, bootstrap, free_port()))
        self.prefix = tmp / f"snapshot-{frames}"
        self.taken = 0
        self.types: list[dict[str, list[int]]] = []
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [str(root), *[p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]])
        self.log = tmp / f"daemon-{frames}.log"
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, str(RUNNER), str(self.prefix), str(frames),
                 "-n", "--pidfile=", "ssekd", "--config", str(cfg)],
                stdout=log, stderr=subprocess.STDOUT, cwd=tmp, env=env)
        deadline = time.monotonic() + 300  # a loaded 2-core machine starts it slowly
        while not port_open("127.0.0.1", self.port):
            if time.monotonic() > deadline or self.process.poll() is not None:
                raise SystemExit(f"the daemon did not start: {self.log}")
            time.sleep(0.1)
        self.proc = psutil.Process(self.process.pid)

    def rss(self) -> int:
        return int(self.proc.memory_info().rss)

    def snapshot(self) -> tracemalloc.Snapshot:
        path = Path(f"{self.prefix}.{self.taken}")
        self.taken += 1
        self.process.send_signal(signal.SIGUSR2)
        deadline = time.monotonic() + 300
        while not path.exists():
            if time.monotonic() > deadline or self.process.poll() is not None:
                raise SystemExit(f"no snapshot from the daemon: {self.log}")
            time.sleep(0.2)
        snap = tracemalloc.Snapshot.load(str(path))
        types = Path(f"{path}.types")
        deadline = time.monotonic() + 120
        while True:  # written after the snapshot
            try:
                self.types.append(json.loads(types.read_text()))
                break
            except (OSError, ValueError):
                if time.monotonic() > deadline:
                    raise SystemExit(f"no census from the daemon: {self.log}") from None
                time.sleep(0.2)
        path.unlink()
        types.unlink()
        return snap

    def close(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()


def hold(port: int, path: str, n: int) -> tuple[Any, list[Any]]:
    """Open `n` idle streams from load client processes (2,500 each); return the event that
    closes them and the processes, once every stream has its response's headers."""
    ctx = mp.get_context("fork")
    done = ctx.Event()
    procs = max(1, -(-n // 2500))
    ready = [ctx.Event() for _ in range(procs)]
    shares = [n // procs + (1 if i < n % procs else 0) for i in range(procs)]
    # tracemalloc slows every allocation: time for a traced daemon on a loaded machine to answer
    ps = [ctx.Process(target=hold_idle, args=(port, path, shares[i], ready[i], done, 300))
          for i in range(procs)]
    for p in ps:
        p.start()
    if not all(r.wait(600) for r in ready):
        raise SystemExit("the load clients did not open their streams")
    return done, ps


def release(done: Any, ps: list[Any]) -> None:
    done.set()
    for p in ps:
        p.join(60)


def measure(tmp: Path, bootstrap: str, topic: str, root: Path, n: int,
            frames: int) -> dict[str, Any]:
    """One run: the daemon, a warm stream, then `n` more; snapshots (frames > 0) or RSS.

    The first snapshot starts tracemalloc (`bench/traced_daemon.py`): the difference is what
    was allocated after it and is still held at the second."""
    daemon = Daemon(tmp, bootstrap, root, frames)
    path = f"/events/{topic}"
    try:
        warm = hold(daemon.port, path, 1)
        time.sleep(1)
        before = daemon.snapshot() if frames else daemon.rss()
        streams = hold(daemon.port, path, n)
        time.sleep(2)
        after = daemon.snapshot() if frames else daemon.rss()
        release(*streams)
        release(*warm)
    finally:
        daemon.close()
    if not frames:
        assert isinstance(before, int) and isinstance(after, int)
        return {"rss_before_mib": round(before / 2**20, 1),
                "rss_after_mib": round(after / 2**20, 1),
                "rss_per_stream_kib": round((after - before) / n / 1024, 2)}
    assert isinstance(before, tracemalloc.Snapshot) and isinstance(after, tracemalloc.Snapshot)
    result = breakdown(before, after, n)
    result["objects"] = objects(daemon.types[0], daemon.types[1], n)
    return result


def objects(before: dict[str, list[int]], after: dict[str, list[int]],
            n: int) -> list[dict[str, Any]]:
    """Objects per stream by type (the collector's census at each snapshot), most first."""
    rows = []
    for name, (count, size) in after.items():
        was, was_size = before.get(name, [0, 0])
        if count - was >= n // 2:
            rows.append({"type": name, "per_stream": round((count - was) / n, 2),
                         "bytes_per_stream": round((size - was_size) / n, 1)})
    return sorted(rows, key=lambda r: -r["bytes_per_stream"])


def _short(filename: str) -> str:
    for mark in ("/site-packages/", "/lib/python3"):
        if mark in filename:
            return filename.split(mark, 1)[1].split("/", 1)[-1] if mark == "/lib/python3" \
                else filename.split(mark, 1)[1]
    for mark in ("/ssekd/", "/twisted/"):
        if mark in filename:
            return filename[filename.rindex(mark) + 1:]
    return filename


def _via(tb: tracemalloc.Traceback) -> str:
    """The innermost frame of ssekd's own code in `tb` (who asked for the memory)."""
    frames = list(tb)  # oldest first
    for frame in reversed(frames):
        if "/ssekd/" in frame.filename and "/site-packages/" not in frame.filename:
            return f"{_short(frame.filename)}:{frame.lineno}"
    return "-"


def breakdown(before: tracemalloc.Snapshot, after: tracemalloc.Snapshot,
              n: int) -> dict[str, Any]:
    """Bytes per stream in all, and per allocation site (file:line, and the ssekd line that
    led there), from the difference between two snapshots."""
    ignore = [tracemalloc.Filter(False, tracemalloc.__file__),
              tracemalloc.Filter(False, "<unknown>")]
    before, after = before.filter_traces(ignore), after.filter_traces(ignore)
    total = sum(s.size for s in after.statistics("filename")) - \
        sum(s.size for s in before.statistics("filename"))
    sites: dict[tuple[str, str], list[int]] = {}
    for diff in after.compare_to(before, "traceback"):
        if not diff.size_diff:
            continue
        top = diff.traceback[-1] if len(diff.traceback) else None
        site = f"{_short(top.filename)}:{top.lineno}" if top else "-"
        acc = sites.setdefault((site, _via(diff.traceback)), [0, 0])
        acc[0] += diff.size_diff
        acc[1] += diff.count_diff
    rows = sorted(((site, via, size / n, count / n) for (site, via), (size, count)
                   in sites.items()), key=lambda r: -r[2])
    return {"tracemalloc_bytes_per_stream": round(total / n, 1),
            "sites": [{"site": s, "via": v, "bytes_per_stream": round(b, 1),
                       "blocks_per_stream": round(c, 2)} for s, v, b, c in rows]}


def main() -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m bench.idle_memory")
    parser.add_argument("--quick", action="store_true", help="2,000 streams")
    parser.add_argument("--streams", type=int, default=None)
    parser.add_argument("--daemon-root", type=Path, default=ROOT,
                        help="the checkout whose daemon runs (default: this one)")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--no-rss", action="store_true", help="the tracemalloc run only")
    parser.add_argument("--rss-only", action="store_true", help="the RSS run only")
    args = parser.parse_args(sys.argv[1:])
    n = args.streams or (2000 if args.quick else 10_000)
    root = args.daemon_root.resolve()
    tmp = Path(tempfile.mkdtemp(prefix="ssekd-idle-memory-"))
    broker = start_broker(log_path=tmp / "tansu.log")
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        topic = f"idle-{time.monotonic_ns()}"
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(10)
        traced: dict[str, Any] = {"tracemalloc_bytes_per_stream": float("nan"), "sites": [], "objects": []} \
            if args.rss_only else measure(tmp, broker.bootstrap, topic, root, n, FRAMES)
        rss: dict[str, Any] = {} if args.no_rss else measure(tmp, broker.bootstrap, topic, root, n, 0)
    finally:
        broker.stop()
    sites = traced["sites"]
    shown = sites[:args.top]
    rest = sum(s["bytes_per_stream"] for s in sites[args.top:])
    rows = [[s["site"], s["via"], s["bytes_per_stream"], s["blocks_per_stream"]] for s in shown]
    rows.append(["(the rest)", "", round(rest, 1), ""])
    rows.append(["total (tracemalloc)", "", traced["tracemalloc_bytes_per_stream"], ""])
    print(table(f"Idle stream memory: {n:,} streams, daemon from {root}",
                ["allocated at", "asked by (ssekd)", "bytes/stream", "blocks/stream"], rows))
    print()
    print(table("Objects per stream (the collector's census; own bytes, without what they "
                "point to)", ["type", "per stream", "bytes/stream"],
                [[o["type"], o["per_stream"], o["bytes_per_stream"]] for o in traced["objects"]]))
    print()
    print(f"tracemalloc: {traced['tracemalloc_bytes_per_stream'] / 1024:.2f} KiB per stream")
    if rss:
        print(f"RSS (without tracemalloc): {rss['rss_per_stream_kib']} KiB per stream "
              f"({rss['rss_before_mib']} -> {rss['rss_after_mib']} MiB)")
    result = {"streams": n, "daemon_root": str(root),
              "tracemalloc_kib_per_stream": round(traced["tracemalloc_bytes_per_stream"] / 1024,
                                                  2),
              **rss, "objects": traced["objects"], "sites": sites[:60]}
    write_result("idle_memory", result)
    return result


if __name__ == "__main__":
    main()
