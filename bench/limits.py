"""The machine's limits in one table: each figure beside its anchor and beside the commit before.

`make bench` ends with this (quick sizes; `make bench FULL=1` full sizes). It runs four
benchmarks twice, with this checkout's daemon and with the daemon of the commit before the work
on these limits (`--before`, abf7a47 by default, taken from this repository's history with `git
archive`), one after the other on the same broker setup, and reads each run's result file:

- `bench.hot_path`: one client reading a whole topic not yet read (cold) and again (cached),
  beside a bare confluent-kafka consumer of the same topic; compiled and pure-Python hot path.
  (It alternates the daemons itself: one run holds the commit before too.)
- `bench.send_floor`: 1,000 streams at 100 and 250 events/s, the daemon's CPU per delivered
  event beside a bare send loop writing the same bytes to as many sockets, and p99.
- `bench.idle_memory`: what an idle stream holds at 10,000 streams (tracemalloc and RSS).
- `bench.many_streams`: 100,000 streams over workers, each counted through a broadcast.

The hand-written bridge (bench/baseline/) is the third anchor: its row comes from
`bench/results/fanout.json` when `bench.fanout` ran in the last hours (as in `make bench`),
else from a short run of it here. The table is printed, and written with every part's figures
to bench/results/limits.json; bench/results/limits.png plots the ratios against the targets.
The parts' own result files stay in bench/results/limits/ (`<part>-now.json`,
`<part>-before.json`).

    python -m bench.limits [--quick] [--full] [--before REV] [--only PART ...]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import RESULTS, ROOT, table, write_result

#: The commit before the work on these limits: the "before" column.
BEFORE = "abf7a47"
PARTS = ("hot_path", "send_floor", "idle_memory", "many_streams")
#: A fanout.json younger than this is taken as this run's (`make bench` ran it first).
FRESH_S = 6 * 3600


def export(rev: str, into: Path) -> Path | None:
    """The daemon's code (ssekd/ and the twistd plugin) at `rev`, unpacked in `into`; None when
    this is not a git checkout holding `rev` (then there is no "before" column)."""
    try:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", rev,
                                  "ssekd", "twisted"], capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        print(f"bench.limits: no {rev} to compare with ({e}); the before column stays empty",
              file=sys.stderr)
        return None
    path = into / rev
    path.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(path, filter="data")
    return path


def run_part(part: str, size: list[str], daemon_root: Path | None, tag: str) -> dict[str, Any]:
    """`python -m bench.<part>` in a process of its own; its result file kept as `<part>-<tag>`."""
    args = [sys.executable, "-m", f"bench.{part}", *size]
    if daemon_root is not None:
        args += ["--daemon-root", str(daemon_root)]
    print(f"\n### {part} ({tag}): {' '.join(args[1:])}\n", flush=True)
    started = time.monotonic()
    done = subprocess.run(args, cwd=ROOT, check=False)
    kept = RESULTS / "limits" / f"{part}-{tag}.json"
    kept.parent.mkdir(parents=True, exist_ok=True)
    produced = RESULTS / f"{part}.json"
    if done.returncode != 0 or not produced.exists():
        return {"error": f"exit {done.returncode}"}
    shutil.copyfile(produced, kept)
    result: dict[str, Any] = json.loads(produced.read_text())
    result["_seconds"] = round(time.monotonic() - started, 1)
    return result


def sizes(part: str, quick: bool, full: bool) -> list[str]:
    if quick:
        return ["--quick"]
    if part == "many_streams":
        return ["--full"] if full else []
    return []


def bridge(quick: bool) -> list[dict[str, Any]]:
    """The hand-written bridge's fan-out rows at 1,000 x 100 and x 250 (bench/baseline/)."""
    path = RESULTS / "fanout.json"
    wanted = {(1000, 100.0), (1000, 250.0)}

    def rows() -> list[dict[str, Any]]:
        if not path.exists() or time.time() - path.stat().st_mtime > FRESH_S:
            return []
        data = json.loads(path.read_text())
        return [r for r in data.get("fanout", [])
                if r.get("server") == "baseline" and (r["clients"], float(r["rate"])) in wanted]

    if len(found := rows()) < len(wanted):
        subprocess.run([sys.executable, "-m", "bench.fanout", "--only", "fanout",
                        "--scenario", "1000x100", "--scenario", "1000x250",
                        *(["--quick"] if quick else [])], cwd=ROOT, check=False)
        found = rows()
    return found


def _get(d: dict[str, Any], *path: Any) -> Any:
    for p in path:
        if isinstance(d, dict) and p in d:
            d = d[p]
        elif isinstance(d, list) and isinstance(p, int) and p < len(d):
            d = d[p]
        else:
            return None
    return d


def _pct(x: Any) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def _floor_row(result: dict[str, Any], server: str, rate: int) -> dict[str, Any]:
    for r in result.get("rows", []):
        if r.get("server") == server and int(r.get("rate", 0)) == rate:
            return dict(r)
    return {}


def summary(parts: dict[str, dict[str, dict[str, Any]]], bridge_rows: list[dict[str, Any]],
            before: str) -> list[dict[str, Any]]:
    """One row per figure: what, anchor, before, now, target, met."""
    out: list[dict[str, Any]] = []
    hot = _get(parts, "hot_path", "now", "daemons") or {}
    bare = hot.get("bare_consumer_per_s")
    for kind, target in (("cold", 0.50), ("cached", 0.95)):
        now = _get(hot, f"compiled_{kind}", "ratio_to_bare")
        pure = _get(hot, f"pure_{kind}", "ratio_to_bare")
        was = _get(hot, f"other_{kind}", "ratio_to_bare")
        out.append({"figure": f"one {kind} client, share of a bare consumer",
                    "anchor": f"bare consumer {bare:,}/s" if bare else "-",
                    "before": _pct(was), "now": f"{_pct(now)} (pure Python {_pct(pure)})",
                    "target": f">= {target:.0%}", "met": now is not None and now >= target})
    floor_now = parts.get("send_floor", {}).get("now", {})
    floor_was = parts.get("send_floor", {}).get("before", {})
    bridge_by = {int(float(r["rate"])): r for r in bridge_rows}
    for rate in (100, 250):
        mine, bare_loop = _floor_row(floor_now, "ssekd", rate), _floor_row(floor_now, "bare", rate)
        was, was_bare = _floor_row(floor_was, "ssekd", rate), _floor_row(floor_was, "bare", rate)
        ratio = (mine["cpu_us_per_event"] / bare_loop["cpu_us_per_event"]
                 if mine and bare_loop else None)
        was_ratio = (was["cpu_us_per_event"] / was_bare["cpu_us_per_event"]
                     if was and was_bare else None)
        out.append({"figure": f"1,000 x {rate}/s: CPU per delivered event, x the bare send loop",
                    "anchor": f"bare loop {bare_loop.get('cpu_us_per_event', '-')} us",
                    "before": f"{was_ratio:.2f}x ({was.get('cpu_us_per_event')} us)"
                    if was_ratio else "-",
                    "now": f"{ratio:.2f}x ({mine.get('cpu_us_per_event')} us)" if ratio else "-",
                    "target": "<= 1.5x", "met": ratio is not None and ratio <= 1.5})
        b = bridge_by.get(rate, {})
        out.append({"figure": f"1,000 x {rate}/s: p99 ms, lost + dup",
                    "anchor": f"bare loop {bare_loop.get('p99_ms', '-')}; bridge "
                              f"{b.get('p99_ms', '-')} ({b.get('lost', '-')} + "
                              f"{b.get('duplicated', '-')})",
                    "before": f"{was.get('p99_ms', '-')} ({was.get('lost', '-')} + "
                              f"{was.get('duplicated', '-')})",
                    "now": f"{mine.get('p99_ms', '-')} ({mine.get('lost', '-')} + "
                           f"{mine.get('duplicated', '-')})",
                    "target": "p99 not above before's, 0 + 0",
                    "met": bool(mine) and mine.get("lost") == 0 and mine.get("duplicated") == 0
                    and (not was or mine["p99_ms"] <= max(was.get("p99_ms", 0), 1) * 1.1)})
    idle_now = parts.get("idle_memory", {}).get("now", {})
    idle_was = parts.get("idle_memory", {}).get("before", {})
    out.append({"figure": f"an idle stream at {idle_now.get('streams', 10_000):,}: KiB "
                          "(tracemalloc / RSS)",
                "anchor": "-",
                "before": f"{idle_was.get('tracemalloc_kib_per_stream', '-')} / "
                          f"{idle_was.get('rss_per_stream_kib', '-')}",
                "now": f"{idle_now.get('tracemalloc_kib_per_stream', '-')} / "
                       f"{idle_now.get('rss_per_stream_kib', '-')}",
                "target": "<= 6 (tracemalloc)",
                "met": (idle_now.get("tracemalloc_kib_per_stream") or 99) <= 6})
    many_now = parts.get("many_streams", {}).get("now", {})
    many_was = parts.get("many_streams", {}).get("before", {})

    def many(r: dict[str, Any]) -> str:
        if not r or "complete" not in r:
            return "-"
        return (f"{r['complete']:,} of {r['expected_streams']:,} complete, {r['lost']:,} lost, "
                f"{r['connects_per_s']:,} connects/s, {r['kib_per_stream']} KiB, keepalive "
                f"{r['keepalive_cpu_pct']}% CPU, {r['worker_restarts']} restarts")
    out.append({"figure": f"{many_now.get('streams', 100_000):,} streams over "
                          f"{many_now.get('workers', '-')} workers, a broadcast",
                "anchor": "-", "before": many(many_was), "now": many(many_now),
                "target": "every stream every event",
                "met": bool(many_now) and many_now.get("complete") ==
                many_now.get("expected_streams") and many_now.get("duplicated") == 0})
    return out


def plot(rows: list[dict[str, Any]], parts: dict[str, Any], path: Path) -> None:
    """Each ratio target: before, now and the target line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    hot = _get(parts, "hot_path", "now", "daemons") or {}
    bars: list[tuple[str, float | None, float | None, float]] = []
    for kind, target in (("cold", 0.5), ("cached", 0.95)):
        bars.append((f"{kind} / bare consumer", _get(hot, f"other_{kind}", "ratio_to_bare"),
                     _get(hot, f"compiled_{kind}", "ratio_to_bare"), target))
    for rate in (100, 250):
        vals = []
        for tag in ("before", "now"):
            r = parts.get("send_floor", {}).get(tag, {})
            mine, floor = _floor_row(r, "ssekd", rate), _floor_row(r, "bare", rate)
            vals.append(mine["cpu_us_per_event"] / floor["cpu_us_per_event"]
                        if mine and floor else None)
        bars.append((f"CPU/event x bare loop\n1,000 x {rate}/s", vals[0], vals[1], 1.5))
    fig, ax = plt.subplots(figsize=(10, 4.5))
    for i, (label, was, now, target) in enumerate(bars):
        ax.bar(i - 0.2, was or 0, 0.4, color="#bbbbbb", label="before" if i == 0 else None)
        ax.bar(i + 0.2, now or 0, 0.4, color="#3070b0", label="now" if i == 0 else None)
        ax.hlines(target, i - 0.45, i + 0.45, colors="#c03030",
                  label="target" if i == 0 else None)
    ax.set_xticks(range(len(bars)), [b[0] for b in bars])
    ax.set_title("ssekd at the machine's limits: ratios to the anchors")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m bench.limits", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="each part's quick size")
    parser.add_argument("--full", action="store_true",
                        help="100,000 streams (as FULL=1 in the environment)")
    parser.add_argument("--before", default=BEFORE, help="the commit to compare with")
    parser.add_argument("--only", action="append", choices=PARTS, default=[])
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    full = args.full or bool(os.environ.get("FULL"))
    chosen = args.only or list(PARTS)
    parts: dict[str, dict[str, dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(prefix="ssekd-before-") as tmp:
        before_root = export(args.before, Path(tmp))
        for part in chosen:
            size = sizes(part, args.quick, full)
            if part == "hot_path":  # alternates the daemons itself, the commit before among them
                parts[part] = {"now": run_part(part, size, before_root, "now")}
                continue
            parts[part] = {"now": run_part(part, size, None, "now")}
            if before_root is not None:
                parts[part]["before"] = run_part(part, size, before_root, "before")
    bridge_rows = bridge(args.quick)
    rows = summary(parts, bridge_rows, args.before)
    print()
    print(table(f"The machine's limits: now ({_head()}) beside the anchors and {args.before}",
                ["figure", "anchor", f"before ({args.before})", "now", "target", "met"],
                [[r["figure"], r["anchor"], r["before"], r["now"], r["target"],
                  "yes" if r["met"] else "no"] for r in rows]))
    RESULTS.mkdir(parents=True, exist_ok=True)
    try:
        plot(rows, parts, RESULTS / "limits.png")
    except Exception as e:  # noqa: BLE001 - a plot is a convenience; the table is the result
        print(f"bench.limits: no plot ({e})", file=sys.stderr)
    result = {"commit": _head(), "before": args.before, "mode":
              "quick" if args.quick else "full" if full else "default", "table": rows,
              "bridge": bridge_rows, "parts": parts}
    write_result("limits", result)
    return result


def _head() -> str:
    done = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True, check=False)
    return done.stdout.strip() or "?"


if __name__ == "__main__":
    main()
