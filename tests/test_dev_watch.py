"""What `make run` started beside the daemon is watched (`ssekd.dev.watch`): a helper that stops
is said in one line and started again; one that keeps stopping stops everything, with a
non-zero exit. The rules on fakes and an injected clock; the broker killed under a real
`make run`, which says so, starts it again, and goes on serving."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from ssekd.dev.watch import MAX_RESTARTS, WINDOW, Helper, Watch
from tests.support.checkout import Ports, clean_clone, venv_is_current
from tests.support.launched import launch
from tests.support.wait import wait_until


class Fake:
    def __init__(self) -> None:
        self.status: int | None = None

    def poll(self) -> int | None:
        return self.status


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def watch_of(*names: str) -> tuple[Watch, dict[str, list[Fake]], list[str], Clock]:
    made: dict[str, list[Fake]] = {n: [] for n in names}

    def start(name: str) -> Fake:
        made[name].append(Fake())
        return made[name][-1]

    said: list[str] = []
    clock = Clock()
    helpers = [Helper(n, lambda n=n: start(n)) for n in names]
    for h in helpers:
        h.launch()
    return Watch(helpers, said.append, clock, lambda _: None), made, said, clock


def test_a_helper_that_stops_is_said_and_started_again() -> None:
    watch, made, said, clock = watch_of("the development broker on 127.0.0.1:9092", "producer")
    assert watch.look() and said == []
    made["the development broker on 127.0.0.1:9092"][0].status = -9
    assert watch.look()
    assert said == ["the development broker on 127.0.0.1:9092 stopped (killed by signal 9); "
                    "starting it again"]
    assert len(made["the development broker on 127.0.0.1:9092"]) == 2
    assert len(made["producer"]) == 1, "the others are left alone"


def test_a_helper_that_keeps_stopping_stops_everything() -> None:
    watch, made, said, clock = watch_of("producer")
    for _ in range(MAX_RESTARTS):
        made["producer"][-1].status = 1
        assert watch.look()
        clock.now += 1
    made["producer"][-1].status = 1
    assert not watch.look() and watch.gave_up is not None
    assert said[-1] == f"producer stopped again (exit status 1), after {MAX_RESTARTS} " \
                       f"restarts within {WINDOW:g} s: stopping everything"
    assert len(made["producer"]) == MAX_RESTARTS + 1, "not started a fifth time"


def test_restarts_long_ago_do_not_count() -> None:
    watch, made, said, clock = watch_of("producer")
    for _ in range(MAX_RESTARTS * 3):
        made["producer"][-1].status = 0
        assert watch.look()
        clock.now += WINDOW / MAX_RESTARTS + 1


def test_a_helper_that_cannot_be_started_again_stops_everything() -> None:
    said: list[str] = []
    calls = [0]

    def start() -> Fake:
        calls[0] += 1
        if calls[0] > 1:
            raise RuntimeError("tansu exited with 1 (port 9092 taken?)")
        f = Fake()
        f.status = 1
        return f

    helper = Helper("the development broker", start)
    helper.launch()
    watch = Watch([helper], said.append, Clock(), lambda _: None)
    assert not watch.until(lambda: False)
    assert said[-1] == "the development broker could not be started again (tansu exited with " \
                       "1 (port 9092 taken?)): stopping everything"


@pytest.mark.daemon
@pytest.mark.timeout(180)
def test_make_run_starts_its_broker_again_when_it_dies(tmp_path: Path) -> None:
    """The development broker killed under `make run`: one line says so, it is started again,
    and the stream serves the demo producer's records again (the broker's log is gone: a new
    incarnation, which the daemon resumes into)."""
    ports = Ports.free()
    folder = clean_clone(tmp_path / "ssekd", ports)
    assert venv_is_current(folder)
    run = launch(".venv/bin/python -m ssekd.dev --dev-broker --config etc/zilla.yaml", folder)
    try:
        run.wait_output("Ctrl-C stops", timeout=120)
        tansu = tansu_of(run.process.pid, ports[9092])
        os.kill(tansu, signal.SIGKILL)
        said = f"ssekd.dev: the development broker on 127.0.0.1:{ports[9092]} stopped " \
               f"(killed by signal 9); starting it again"
        run.wait_output(said, timeout=20)

        def restarted() -> bool:
            # the line comes as the new broker is being started: it may not be there yet
            try:
                return tansu_of(run.process.pid, ports[9092]) != tansu
            except AssertionError:
                return False

        wait_until(restarted, 20, interval=0.2, what="a new tansu under make run")

        def streams() -> bool:
            out = subprocess.run(["curl", "-s", "-N", "--max-time", "3",
                                  f"http://127.0.0.1:{ports[7114]}/events"],
                                 capture_output=True, text=True, check=False).stdout
            return "\ndata:" in "\n" + out

        wait_until(streams, 60, interval=1)
        assert run.running()
    finally:
        assert run.interrupt() == 0, run.output()[-3000:]


def tansu_of(root: int, port: int) -> int:
    """The pid of the tansu process started under `root` listening on `port`."""
    def children(pid: int) -> list[int]:
        try:
            found = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        except OSError:
            return []
        return [int(c) for c in found]

    def walk(pid: int) -> Any:
        for child in children(pid):
            yield child
            yield from walk(child)

    for pid in walk(root):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(b"tansu" in a for a in argv[:1]) and \
                any(f":{port}".encode() in a for a in argv):
            return pid
    raise AssertionError(f"no tansu on port {port} under {root}")
