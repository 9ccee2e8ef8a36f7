"""The hot path compiled and not: one client reading a whole topic, cold and cached, beside a
bare confluent-kafka consumer of the same topic; and the per-event cost of encoding in-process.

    python -m bench.hot_path [--quick] [--records N] [--rounds R] [--daemon-root PATH]

Daemons on one broker, each reading the same topic (a new one per round, so every round's
first read is cold for each of them): ssekd with its compiled twin (`ssekd.hotpath`), the same
with `SSEKD_PURE_PYTHON=1`, and with `--daemon-root PATH` a checkout of another commit put first
on its PYTHONPATH (the commit before, say). Per phase: events/s of one SSE client, as a share
of the bare consumer's records/s (the issue's figure), and the daemon's CPU seconds per event,
which a machine shared with other work disturbs far less than a rate (each round alternates
the daemons' order; the table gives medians over rounds). Prints a table, writes
bench/results/hot_path.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from itertools import count
from pathlib import Path
from typing import Any

from confluent_kafka import Message as KafkaRecord

from bench.common import RESULTS
from bench.fanout.rig import TWISTD, Rig, Server, config
from bench.fanout.scenarios import _bare_consumer, _sse_consumer
from ssekd.dev.broker import free_port
from ssekd.hotpath import kernels as pure
from tests.support import zilla_config as zc


def _daemon(rig: Rig, name: str, env: dict[str, str]) -> Server:
    """Another ssekd on the rig's broker, with `env` added to its environment."""
    port, metrics = free_port(), free_port()
    path = rig.tmp / f"{name}.yaml"
    zc.write(path, config(port, rig.broker.bootstrap, metrics))
    log = rig.tmp / f"{name}.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([TWISTD, "-n", "--pidfile=", "ssekd", "--config", str(path)],
                                stdout=out, stderr=subprocess.STDOUT, cwd=rig.tmp,
                                env={**os.environ, **env})
    server = Server(name, proc, port, log)
    rig.servers.append(server)
    return server


def _runs(env: dict[str, str], cwd: Path) -> str:
    """Which hot path a daemon with `env` added runs: asked of a Python started the same way
    (in the daemon's folder: a checkout as the current folder would come first on its path)."""
    code = "import ssekd.hotpath as h; print('compiled' if h.COMPILED else 'pure Python')"
    done = subprocess.run([sys.executable, "-c", code], env={**os.environ, **env},
                          capture_output=True, text=True, check=False, cwd=cwd)
    return done.stdout.strip() or "(no ssekd.hotpath)"


def _read(server: Server, topic: str, messages: int) -> dict[str, float]:
    cpu0 = server.cpu()
    rate, _reader, got = _sse_consumer(server.port, f"/events/{topic}", messages)
    cpu = server.cpu() - cpu0
    return {"per_s": rate, "got": got, "cpu_us_per_event": 1e6 * cpu / max(got, 1)}


def _bare(rig: Rig, topic: str, messages: int) -> dict[str, float]:
    cpu0 = time.process_time()
    rate = _bare_consumer(rig.broker.bootstrap, topic, messages)
    return {"per_s": rate, "cpu_us_per_record": 1e6 * (time.process_time() - cpu0) / messages}


def daemons(records: int, rounds: int, daemon_root: str | None) -> dict[str, Any]:
    rig = Rig()
    rig.ssekd.name = "compiled"
    envs: dict[str, dict[str, str]] = {"compiled": {}, "pure": {"SSEKD_PURE_PYTHON": "1"}}
    variants = [rig.ssekd, _daemon(rig, "pure", envs["pure"])]
    if daemon_root:
        root = str(Path(daemon_root).resolve())
        path = os.pathsep.join([root] + [p for p in os.environ.get("PYTHONPATH", "").split(
            os.pathsep) if p])
        envs["other"] = {"PYTHONPATH": path}
        variants.append(_daemon(rig, "other", envs["other"]))
    rows: dict[str, list[dict[str, float]]] = {f"{s.name}_{ph}": [] for s in variants
                                               for ph in ("cold", "cached")}
    #: per round, the faster of the bare consumer's two reads (before the daemons and after;
    #: the first is often slower, the broker reading the new topic's segments the first time),
    #: as bench.fanout's single-client scenario compares with
    bare: list[dict[str, float]] = []
    try:
        said = {s.name: _runs(envs[s.name], rig.tmp) for s in variants}
        for r in range(rounds):
            topic = rig.topic(f"hot-{r}-{time.monotonic_ns()}")
            rig.fill(topic, records)
            first = _bare(rig, topic, records)
            order = variants if r % 2 == 0 else variants[::-1]
            for server in order:
                for phase in ("cold", "cached"):
                    row = _read(server, topic, records)
                    rows[f"{server.name}_{phase}"].append(row)
                    print(f"  round {r + 1} {server.name:>8} {phase:>6}: {row['per_s']:>9,.0f}/s "
                          f"{row['cpu_us_per_event']:.2f} us/event", flush=True)
            again = _bare(rig, topic, records)
            bare.append(max(first, again, key=lambda b: b["per_s"]))
            print(f"  round {r + 1} bare consumer: {first['per_s']:,.0f}/s, then "
                  f"{again['per_s']:,.0f}/s", flush=True)
    finally:
        rig.close()
    bare_rate = statistics.median(b["per_s"] for b in bare)
    out: dict[str, Any] = {
        "records": records, "rounds": rounds, "hot_path_said": said,
        "bare_consumer_per_s": round(bare_rate),
        "bare_cpu_us_per_record": round(statistics.median(b["cpu_us_per_record"] for b in bare), 3),
    }
    for name, runs in rows.items():
        rate = statistics.median(x["per_s"] for x in runs)
        out[name] = {"per_s": round(rate), "ratio_to_bare": round(rate / bare_rate, 3),
                     "cpu_us_per_event": round(statistics.median(x["cpu_us_per_event"]
                                                                 for x in runs), 3),
                     "got": min(int(x["got"]) for x in runs)}
    return out


def _records(n: int) -> list[Any]:
    """Records as a cache holds the bench's topic: "<n> <100 bytes>", 3 partitions, runs of
    500 of one partition (a fetch's worth)."""
    pad = b"x" * 100
    out = []
    for i in range(n):
        run, at = divmod(i, 500)
        p = run % 3
        out.append((p, (run // 3) * 500 + at, None, b"%d " % i + pad, (), 0, i + 1, 230))
    return out


def micro(events: int, reps: int) -> dict[str, Any]:
    """In-process CPU per event of encoding (a cache read's batches of 1,000) and per record of
    converting confluent-kafka records, compiled and pure, alternating, best of `reps`."""
    from ssekd.bindings.sse_kafka.encoder import KafkaEventEncoder
    impls: dict[str, Any] = {"pure": pure}
    try:
        from ssekd.hotpath import _kernels_c  # type: ignore[attr-defined, unused-ignore]
        impls["compiled"] = _kernels_c
    except ImportError:
        pass
    records = _records(events)
    raw = [KafkaRecord(topic="t", partition=m[0], offset=m[1], key=None, value=m[3],
                       headers=None, timestamp=(1, 1_700_000_000_000)) for m in records]
    best: dict[str, dict[str, float]] = {n: {"encode_ns": 1e9, "convert_ns": 1e9} for n in impls}
    for _ in range(reps):
        for name, impl in impls.items():
            enc = KafkaEventEncoder("t", hot=impl)
            progress = impl.ProgressState()
            t0 = time.process_time()
            for i in range(0, events, 1000):
                enc.encode(records[i:i + 1000], progress, None)
            took = time.process_time() - t0
            best[name]["encode_ns"] = min(best[name]["encode_ns"], 1e9 * took / events)
            t0 = time.process_time()
            for i in range(0, events, 1000):
                impl.records_of_batch(raw[i:i + 1000], count(1).__next__, KafkaRecord.partition,
                                      KafkaRecord.offset, KafkaRecord.key, KafkaRecord.value,
                                      KafkaRecord.headers, KafkaRecord.timestamp)
            took = time.process_time() - t0
            best[name]["convert_ns"] = min(best[name]["convert_ns"], 1e9 * took / events)
    return {n: {k: round(v) for k, v in b.items()} for n, b in best.items()}


def _table(result: dict[str, Any]) -> None:
    d = result["daemons"]
    print(f"\nhot path: one client, {d['records']:,} records, median of {d['rounds']} round(s); "
          f"bare consumer {d['bare_consumer_per_s']:,}/s "
          f"({d['bare_cpu_us_per_record']} us CPU/record)")
    print(f"  {'daemon':<10} {'runs':<16} {'cold/s':>10} {'of bare':>8} {'us/event':>9}"
          f" {'cached/s':>10} {'of bare':>8} {'us/event':>9}")
    for name, said in d["hot_path_said"].items():
        c, k = d[f"{name}_cold"], d[f"{name}_cached"]
        print(f"  {name:<10} {said:<16} {c['per_s']:>10,} {c['ratio_to_bare']:>7.0%} "
              f"{c['cpu_us_per_event']:>9.2f} {k['per_s']:>10,} {k['ratio_to_bare']:>7.0%} "
              f"{k['cpu_us_per_event']:>9.2f}")
    print("  targets: cold >= 50% of the bare consumer, cached >= 95%")
    print("\n  in-process, CPU ns per event (encode) and per record (convert from confluent-kafka):")
    for name, m in result["micro"].items():
        print(f"    {name:<9} encode {m['encode_ns']:>6} ns   convert {m['convert_ns']:>6} ns")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m bench.hot_path", description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--records", type=int)
    parser.add_argument("--rounds", type=int)
    parser.add_argument("--daemon-root", help="a checkout of another commit, run beside")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    records = args.records or (100_000 if args.quick else 1_000_000)
    rounds = args.rounds or (1 if args.quick else 3)
    result = {"micro": micro(50_000 if args.quick else 300_000, 3 if args.quick else 5),
              "daemons": daemons(records, rounds, args.daemon_root)}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "hot_path.json").write_text(json.dumps(result, indent=2) + "\n")
    _table(result)
    return result


if __name__ == "__main__":
    main()
