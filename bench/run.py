"""`make bench`: every benchmark in turn, each printing its table and writing
bench/results/<name>.json; a summary of all of them goes to bench/results/all.json.

Run one alone with `.venv/bin/python -m bench.<name>` from the checkout's root; choose some
with `python -m bench.run static fanout`; `--quick` (`make bench`, as opposed to `make bench FULL=1`) runs
only the benchmarks that have a short mode, in that mode.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import sys
import time
import traceback

from bench.common import RESULTS

#: In the order they run. Each module has `main() -> dict`.
BENCHES = ["static", "fanout", "filtered", "slow_clients", "tls", "h3", "spark_snapshot", "jwt_guard",
           "relay", "models", "workers", "many_streams", "first_event", "write_path", "compression",
           "cache_gc", "soak", "hot_path", "send_floor", "idle_memory", "limits"]
#: The benchmarks that take `--quick`. (relay runs short unless FULL=1 is in the environment.)
QUICK = {"fanout", "filtered", "h3", "jwt_guard", "relay", "models", "workers", "many_streams",
         "write_path", "compression", "cache_gc", "soak", "hot_path", "send_floor", "idle_memory",
         "limits"}
#: What `--quick` runs: those, and the ones that are short unless FULL=1 says otherwise.
SHORT = QUICK | {"slow_clients", "first_event"}


def main(argv: list[str]) -> int:
    quick = "--quick" in argv
    argv = [a for a in argv if a != "--quick"]
    chosen = argv or [b for b in BENCHES if importlib.util.find_spec(f"bench.{b}") is not None
                      and (not quick or b in SHORT)]
    summary: dict[str, object] = {}
    failed = []
    for name in chosen:
        print(f"\n# bench: {name}\n", flush=True)
        started = time.monotonic()
        try:
            # a bench that parses options sees none of ours but --quick
            sys.argv = [f"bench.{name}"] + (["--quick"] if quick and name in QUICK else [])
            result = importlib.import_module(f"bench.{name}").main()
            summary[name] = {"seconds": round(time.monotonic() - started, 1), "result": result}
        except Exception:
            traceback.print_exc()
            failed.append(name)
            summary[name] = {"error": traceback.format_exc(limit=3)}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "all.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    print(f"\nsummary written to {RESULTS / 'all.json'}")
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
