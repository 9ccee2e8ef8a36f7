"""The worker supervisor without processes: how many workers `auto` means, how inherited
sockets are passed on the command line, how an exit is described, and (on a clock) when a dead
worker is started again and how stopping waits for every worker."""

from __future__ import annotations

import os
import signal
import socket
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from twisted.internet import protocol, tcp
from twisted.internet.error import ProcessDone, ProcessTerminated
from twisted.internet.testing import MemoryReactor, MemoryReactorClock
from twisted.python.failure import Failure

from ssekd.config.model import EngineOptions, Telemetry
from ssekd.telemetry.events import EventLog
from ssekd.workers.sockets import ACCEPTS_PER_TURN, bound_accepts, family_of, listening_socket
from ssekd.workers.supervisor import (
    Supervisor,
    describe_exit,
    format_inherited,
    parse_inherited,
    resolve_count,
)


def test_the_command_line_overrides_the_config_and_auto_is_the_cores() -> None:
    cores = len(os.sched_getaffinity(0))
    assert resolve_count(None, 1) == 1
    assert resolve_count(None, 3) == 3
    assert resolve_count(None, 0) == cores  # `engine.workers: auto`
    assert resolve_count("2", 3) == 2
    assert resolve_count("auto", 1) == cores


def test_inherited_sockets_round_trip_with_ipv6_hosts() -> None:
    fds = {("127.0.0.1", 7114): 5, ("::1", 7143): 6, ("0.0.0.0", 0): 7}
    assert parse_inherited(format_inherited(fds)) == fds
    assert parse_inherited("") == {}


def test_exits_are_described_by_code_or_signal() -> None:
    assert describe_exit(0) == "exited 0"
    assert describe_exit(3 << 8) == "exited 3"
    assert describe_exit(signal.SIGKILL) == "killed by SIGKILL"
    assert describe_exit(None) == "ended"


def test_sockets_on_one_port_share_it_with_reuse_port() -> None:
    first = listening_socket("127.0.0.1", 0, reuse_port=True)
    second = listening_socket("127.0.0.1", first.getsockname()[1], reuse_port=True)
    try:
        assert family_of(second.fileno()) == socket.AF_INET
        client = socket.create_connection(first.getsockname(), timeout=5)
        client.close()
    finally:
        first.close()
        second.close()


class Counting(protocol.ServerFactory):
    def __init__(self) -> None:
        self.built = 0

    def buildProtocol(self, addr: Any) -> protocol.Protocol:  # noqa: N802 - Twisted's name
        self.built += 1
        return protocol.Protocol()


def test_a_storm_of_connections_is_accepted_a_bounded_number_per_turn() -> None:
    """Twisted's port accepts 20 more per turn each time it could, without bound; a port of
    the daemon accepts at most ACCEPTS_PER_TURN per turn however many wait, and takes them
    all over the turns."""
    factory = Counting()
    port = tcp.Port(0, factory, backlog=1024, interface="127.0.0.1", reactor=MemoryReactor())
    port.startListening()
    bound_accepts(port)
    clients = [socket.create_connection(("127.0.0.1", port.getHost().port), timeout=5)
               for _ in range(4 * ACCEPTS_PER_TURN + 10)]
    try:
        turns = []
        while factory.built < len(clients) and len(turns) < 100:
            before = factory.built
            port.doRead()
            turns.append(factory.built - before)
        assert max(turns) == ACCEPTS_PER_TURN
        assert factory.built == len(clients)
    finally:
        for c in clients:
            c.close()
        port.connectionLost(None)


class FakeProcess:
    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.signals: list[str] = []

    def signalProcess(self, name: str) -> None:  # noqa: N802 - Twisted's name
        self.signals.append(name)


class SpawningClock(MemoryReactorClock):
    """A memory reactor that records the processes it is asked to start."""

    def __init__(self) -> None:
        super().__init__()
        self.spawned: list[tuple[Any, list[str], FakeProcess]] = []

    def spawnProcess(self, protocol: Any, executable: str, args: list[str],  # noqa: N802
                     env: Any = None, childFDs: Any = None) -> FakeProcess:  # noqa: N803
        process = FakeProcess(1000 + len(self.spawned))
        self.spawned.append((protocol, args, process))
        return process


def supervisor(count: int) -> tuple[Supervisor, SpawningClock, EventLog]:
    clock = SpawningClock()
    events = EventLog("test")
    config = SimpleNamespace(namespace="test", telemetry=Telemetry(), engine=EngineOptions(),
                             sources=(Path("zilla.yaml"),))
    engine = SimpleNamespace(reactor=clock, events=events, config_path=Path("zilla.yaml"),
                             built=SimpleNamespace(config=config, store_stamps={}))
    sup = Supervisor(engine, count, ["--config", "zilla.yaml"])  # type: ignore[arg-type]
    sup.rundir = "/nonexistent"
    return sup, clock, events


def died(protocol: Any, signum: int) -> None:
    protocol.processEnded(Failure(ProcessTerminated(signal=signum, status=signum)))


def test_a_worker_that_keeps_dying_young_waits_longer_each_time() -> None:
    sup, clock, events = supervisor(2)
    sup.spawn(1)
    sup.spawn(2)
    assert [args[args.index("--worker") + 1] for _, args, _ in clock.spawned] == ["1", "2"]
    delays = []
    for _ in range(6):
        protocol = clock.spawned[-2 if len(clock.spawned) == 2 else -1][0]
        died(protocol, signal.SIGKILL)
        (call,) = [c for c in clock.getDelayedCalls() if c.active()]
        delays.append(round(call.getTime() - clock.seconds(), 2))
        clock.advance(call.getTime() - clock.seconds())
    assert delays == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0]
    # one that ran long enough was healthy: started again at once
    clock.advance(60)
    died(clock.spawned[-1][0], signal.SIGSEGV)
    (call,) = [c for c in clock.getDelayedCalls() if c.active()]
    assert call.getTime() == clock.seconds()
    events.flush()


def test_stopping_forwards_sigterm_and_waits_for_every_worker() -> None:
    sup, clock, _ = supervisor(2)
    sup.startService = lambda: None  # type: ignore[method-assign]  # no temporary folder here
    sup.spawn(1)
    sup.spawn(2)
    done = sup.stopService()
    assert [p.signals for _, _, p in clock.spawned] == [["TERM"], ["TERM"]]
    fired: list[object] = []
    done.addCallback(fired.append)
    clock.spawned[0][0].processEnded(Failure(ProcessDone(0)))
    assert not fired
    clock.spawned[1][0].processEnded(Failure(ProcessDone(0)))
    assert fired == [None]
    assert len(clock.spawned) == 2  # nothing started again while stopping
    assert not [c for c in clock.getDelayedCalls() if c.active()]  # the kill timer is gone


def test_a_worker_still_running_after_the_grace_is_killed() -> None:
    sup, clock, _ = supervisor(1)
    sup.spawn(1)
    sup.drain = 5.0
    sup.stopService()
    clock.advance(5.0 + 29.9)
    assert clock.spawned[0][2].signals == ["TERM"]
    clock.advance(0.1)
    assert clock.spawned[0][2].signals == ["TERM", "KILL"]
