"""Runs the daemon as `twistd` does, optionally under tracemalloc, and writes a tracemalloc
snapshot each time it gets SIGUSR2 (`bench/idle_memory.py` drives it).

It wraps twistd from the outside rather than asking the daemon for a snapshot so that it
measures any checkout the same way, including commits that predate this file: the checkout
to run goes first on PYTHONPATH and this file is run by its path.

    python bench/traced_daemon.py SNAPSHOT_PREFIX FRAMES -n --pidfile= ssekd --config ...

Tracing starts at the first SIGUSR2 (whose snapshot is then all but empty); FRAMES 0 runs
the daemon without tracemalloc and never sent the signal (for RSS, which tracemalloc's own tables
inflate by more than the streams hold). Snapshot k is written to SNAPSHOT_PREFIX.k, through
a temporary file renamed once complete, so the reader never sees half a file.
"""

from __future__ import annotations

import gc
import json
import os
import signal
import sys
import tracemalloc
from types import FrameType


def census() -> dict[str, list[int]]:
    """Objects the collector tracks, by type: how many, and their own bytes (without what they
    point to; not their `__dict__`, which asking for would build for objects that have none
    yet): what a per-stream count of each class shows is which objects a stream holds."""
    found: dict[str, list[int]] = {}
    for obj in gc.get_objects():
        kind = type(obj)
        name = f"{kind.__module__}.{kind.__qualname__}"
        size = sys.getsizeof(obj)
        entry = found.setdefault(name, [0, 0])
        entry[0] += 1
        entry[1] += size
    return found


def main() -> None:
    # run by its path, Python put bench/ first on sys.path: its modules (models, tls, relay...)
    # would shadow top-level names for the daemon
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    prefix, frames = sys.argv[1], int(sys.argv[2])
    taken = 0

    def snapshot(signum: int, frame: FrameType | None) -> None:
        # runs in the reactor's thread between two bytecodes: the daemon is idle while the
        # benchmark asks, and a bench-only pause of a second is what this costs
        nonlocal taken
        if frames and not tracemalloc.is_tracing():
            # started at the first snapshot, not at launch: tracing the imports and the
            # start-up with this many frames takes minutes on a loaded machine, and the
            # benchmark wants only what is allocated after its first snapshot
            tracemalloc.start(frames)
        gc.collect()  # what the streams hold, not the garbage their connects left behind
        path = f"{prefix}.{taken}"
        tracemalloc.take_snapshot().dump(path + ".tmp")
        with open(path + ".types", "w") as out:  # after: the census allocates
            json.dump(census(), out)
        os.rename(path + ".tmp", path)
        taken += 1

    signal.signal(signal.SIGUSR2, snapshot)
    sys.argv = ["twistd", *sys.argv[3:]]
    from twisted.scripts.twistd import run

    run()


if __name__ == "__main__":
    main()
