"""The first minutes of a newcomer: from `make run` in a fresh clone (no `.venv` yet) to the first
event on the demo stream.

    .venv/bin/python -m bench.first_event           # warm: pip's cache as this machine has it
    .venv/bin/python -m bench.first_event --cold    # cold: empty pip and uv caches, every
                                                    # wheel fetched from the package index

The clone holds what `git clone` of the working tree would (tracked files and new ones not
ignored), its configs on free ports (tests/support/checkout.py says why). `make run` makes the
venv, installs (the `demo` extra only), makes the TLS key, starts the broker, the producer and
the daemon; meanwhile this script asks for `/events` every 0.2 s once the port answers, and
notes when the first `data:` line arrives. It reports the seconds to the venv, to the end of the
install, to the ready block, to the first event, the venv's size, and whether the install
printed setuptools' notice blocks (`!!`). Writes bench/results/first_event.json (or
first_event_cold.json).
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench.common import ROOT, table, write_result
from ssekd.dev.broker import port_open
from tests.support.checkout import Ports, tracked_files


def first_event(port: int, deadline: float) -> float | None:
    """The time the first `data:` line of /events arrives, asking until `deadline`."""
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
                s.sendall(b"GET /events HTTP/1.1\r\nHost: localhost\r\n"
                          b"Accept: text/event-stream\r\n\r\n")
                s.settimeout(max(0.1, deadline - time.monotonic()))
                seen = b""
                while b"\ndata:" not in seen:
                    chunk = s.recv(65536)
                    if not chunk:
                        break
                    seen += chunk
                if b"\ndata:" in seen:
                    return time.monotonic()
        except OSError:
            pass
        time.sleep(0.2)
    return None


def folder_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())


def main() -> dict[str, object]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cold", action="store_true", help="with an empty pip cache")
    parser.add_argument("--keep", action="store_true", help="keep the clone (its path printed)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ssekd-first-"))
    clone = work / "ssekd"
    ports = Ports.free()
    for name in tracked_files():
        (clone / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, clone / name)
    for config in (clone / "etc").glob("*.yaml"):
        config.write_text(ports.mapped(config.read_text()))
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "MAKEFLAGS",
                                                            "MAKELEVEL", "MFLAGS")}
    if args.cold:
        env["PIP_CACHE_DIR"] = str(work / "pip-cache")
        env["UV_CACHE_DIR"] = str(work / "uv-cache")
    log = work / "make-run.log"
    started = time.monotonic()
    with open(log, "wb") as out:
        run = subprocess.Popen(["make", "run"], cwd=clone, env=env, stdout=out,
                               stderr=subprocess.STDOUT, start_new_session=True)
    marks: dict[str, float] = {}
    deadline = started + 900

    def watch_stream() -> None:  # from the moment the port answers
        while time.monotonic() < deadline and run.poll() is None:
            if port_open("127.0.0.1", ports[7114]):
                at = first_event(ports[7114], deadline)
                if at is not None:
                    marks["first event"] = at - started
                return
            time.sleep(0.05)

    watcher = threading.Thread(target=watch_stream, daemon=True)
    watcher.start()
    try:
        while time.monotonic() < deadline and run.poll() is None:
            text = log.read_text(errors="replace")
            now = time.monotonic() - started
            if "venv" not in marks and (clone / ".venv" / "bin" / "python").exists():
                marks["venv"] = now
            if "installed" not in marks and "ssekd-checkout.pth" in text:
                marks["installed"] = now
            if "listening" not in marks and "ENGINE_STARTED" in text:
                marks["listening"] = now
            if "ready" not in marks and "Ctrl-C stops" in text:
                marks["ready"] = now
            if "first event" in marks and "ready" in marks:
                break
            time.sleep(0.05)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, 2)  # Ctrl-C
            try:
                run.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(run.pid, 9)
    text = log.read_text(errors="replace")
    venv = clone / ".venv"
    result: dict[str, object] = {
        "cold": args.cold,
        "seconds": {k: round(v, 1) for k, v in marks.items()},
        "venv MB": round(folder_bytes(venv) / 1e6) if venv.exists() else None,
        "setuptools notice": any(w in text for w in ("!!", "SetuptoolsDeprecationWarning",
                                                      "BuildBackendWarning")),
        "pip packages": len(list((venv / "lib").glob("python3*/site-packages/*.dist-info"))),
    }
    print(table("make run in a fresh clone" + (" (cold pip cache)" if args.cold else ""),
                ["step", "seconds after make run"],
                [[k, f"{v:.1f}"] for k, v in sorted(marks.items(), key=lambda kv: kv[1])]))
    print(f"venv: {result['venv MB']} MB, {result['pip packages']} packages; setuptools notice "
          f"printed: {result['setuptools notice']}")
    if "first event" not in marks:
        print(text[-3000:], file=sys.stderr)
    write_result("first_event_cold" if args.cold else "first_event", result)
    if args.keep:
        print(f"kept: {clone}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    return result


if __name__ == "__main__":
    main()
