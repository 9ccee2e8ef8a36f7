"""`tap.makeService` in this process on a memory reactor: what twistd gets, when the sockets
open, the config watcher driven by the clock instead of by waiting, and SIGTERM's drain: readiness
turns 503 at once, the reactor stops when the drain time is up (a second SIGTERM stops it at
once), and without a drain time at once."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest
from twisted.application.service import IServiceCollection
from twisted.internet.testing import MemoryReactorClock

from ssekd.config.model import EngineOptions
from ssekd.engine import Engine
from ssekd.health import Health
from ssekd.tap import DrainOnTerm, WatchConfig, WatchParent, makeService
from ssekd.telemetry.events import EventLog

CONFIG = """\
name: t
bindings:
  tcp0:
    type: tcp
    kind: server
    options: {{host: 127.0.0.1, port: {port}}}
    exit: http0
  http0: {{type: http, kind: server, exit: map0}}
  map0: {{type: http-filesystem, kind: proxy, exit: fs0}}
  fs0: {{type: filesystem, kind: server, options: {{location: {location}}}}}
"""


def write(config: Path, port: int, location: str = "www", text: str | None = None) -> None:
    """Write the config (or `text`) and move its mtime on, as an editor saving it a second later
    would."""
    before = config.stat().st_mtime_ns if config.exists() else 0
    config.write_text(CONFIG.format(port=port, location=location) if text is None else text)
    st = config.stat()
    os.utime(config, ns=(st.st_atime_ns, max(st.st_mtime_ns, before + 10**9)))


def build(tmp_path: Path, **options: object) -> tuple[Path, MemoryReactorClock, Engine,
                                                      list[object]]:
    (tmp_path / "www").mkdir(exist_ok=True)
    config = tmp_path / "zilla.yaml"
    write(config, 7001)
    reactor = MemoryReactorClock()
    top = makeService({"config": str(config), **options}, reactor=reactor, whole_process=False)
    children = list(IServiceCollection(top))
    (engine,) = [c for c in children if isinstance(c, Engine)]
    return config, reactor, engine, children


def started(tmp_path: Path) -> tuple[Path, MemoryReactorClock, Engine]:
    """The tree with a watcher every second, started as twistd starts it."""
    config, reactor, engine, _ = build(tmp_path, watch=True, **{"watch-interval": 1.0})
    top = engine.parent
    assert top is not None
    top.privilegedStartService()  # twistd: before it drops privileges
    top.startService()
    return config, reactor, engine


def test_the_tree_for_twistd(tmp_path: Path) -> None:
    _, _, _, children = build(tmp_path)
    assert [type(c).__name__ for c in children] == ["Engine"], \
        "no signal handlers or watcher unless asked: this is not the daemon's own process"
    _, _, _, children = build(tmp_path, watch=True, **{"watch-interval": 2.0})
    assert [type(c).__name__ for c in children] == ["Engine", "WatchConfig"]
    watch = children[1]
    assert isinstance(watch, WatchConfig) and watch.step == 2.0


def test_sockets_open_in_privileged_start(tmp_path: Path) -> None:
    """twistd binds in privilegedStartService, before `--uid` drops root: ports under 1024."""
    _, reactor, engine, _ = build(tmp_path)
    engine.privilegedStartService()
    assert [p[0] for p in reactor.tcpServers] == [7001]
    assert not engine.running, "bindings start later, in startService"
    engine.startService()
    assert [p[0] for p in reactor.tcpServers] == [7001], "no second socket for the same port"
    assert engine.listening_ports() == {("127.0.0.1", 7001): 7001}


def test_watch_reloads_on_the_clock(tmp_path: Path) -> None:
    config, reactor, engine = started(tmp_path)
    reactor.advance(1.0)
    assert not any("CONFIG_RELOADED" in line for line in engine.events.recent), \
        "an unchanged file is not reloaded"
    write(config, 7002)
    reactor.advance(0.5)
    assert [p[0] for p in reactor.tcpServers] == [7001], "not before the next check"
    reactor.advance(0.5)
    assert [p[0] for p in reactor.tcpServers] == [7001, 7002]
    assert sum("CONFIG_RELOADED" in line for line in engine.events.recent) == 1
    assert engine.listening_ports() == {("127.0.0.1", 7002): 7002}
    reactor.advance(5.0)
    assert sum("CONFIG_RELOADED" in line for line in engine.events.recent) == 1, \
        "one change, one reload"


def test_a_reload_keeps_the_socket_of_a_port_that_stays(tmp_path: Path) -> None:
    config, reactor, engine = started(tmp_path)
    ((_, switch, _, _),) = reactor.tcpServers
    before = engine.graph
    assert before is not None and switch.target.server is before.runtimes["tcp0"]
    (tmp_path / "www2").mkdir()
    write(config, 7001, location="www2")
    reactor.advance(1.0)
    after = engine.graph
    assert after is not before and after is not None
    assert len(reactor.tcpServers) == 1, "no new socket for the same port"
    assert switch.target.server is after.runtimes["tcp0"], \
        "the socket's new connections go to the new graph"


def test_a_bad_new_file_keeps_the_old_config(tmp_path: Path) -> None:
    config, reactor, engine = started(tmp_path)
    before = engine.graph
    write(config, 7002, text="name: t\nbindings:\n  tcp0: {type: tcp, kind: server}\n")
    reactor.advance(1.0)
    assert engine.graph is before
    assert engine.listening_ports() == {("127.0.0.1", 7001): 7001}
    failed = [line for line in engine.events.recent if "CONFIG_RELOAD_FAILED" in line]
    assert len(failed) == 1 and "expected an exit or routes with exits" in failed[0], failed
    reactor.advance(3.0)
    assert sum("CONFIG_RELOAD_FAILED" in line for line in engine.events.recent) == 1, \
        "the same bad file is reported once, not at every check"
    write(config, 7002)  # fixed: the next check takes it
    reactor.advance(1.0)
    assert engine.listening_ports() == {("127.0.0.1", 7002): 7002}
    assert sum("CONFIG_RELOADED" in line for line in engine.events.recent) == 1


def test_a_bad_config_exits_1_and_says_where(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    # The CONFIG_INVALID event goes to the real stdout from a writer thread, which would print
    # it between tests, outside pytest's capture: here it goes to the captured stdout.
    monkeypatch.setattr("ssekd.tap.stdout_stream", lambda: sys.stdout)
    config = tmp_path / "zilla.yaml"
    config.write_text("name: t\nbindings:\n  tcp0: {type: tcp, kind: server}\n")
    with pytest.raises(SystemExit) as exited:
        makeService({"config": str(config)}, reactor=MemoryReactorClock(), whole_process=False)
    assert exited.value.code == 1
    err = capsys.readouterr().err
    assert f"{config}:3: bindings.tcp0: expected an exit or routes with exits" in err, err


def drainer(drain: float) -> tuple[DrainOnTerm, MemoryReactorClock, Health]:
    clock = MemoryReactorClock()
    health = Health(clock)
    config = SimpleNamespace(engine=EngineOptions(drain=drain))
    engine = SimpleNamespace(reactor=clock, health=health, events=EventLog("test"),
                             graph=SimpleNamespace(config=config))
    return DrainOnTerm(engine), clock, health  # type: ignore[arg-type]  # the parts it reads


def test_readiness_first_then_the_streams_end_after_the_drain_time() -> None:
    drain, clock, health = drainer(5.0)
    drain.terminate()
    assert health.draining and not clock.hasStopped
    clock.advance(4.9)
    assert not clock.hasStopped
    clock.advance(0.1)
    assert clock.hasStopped


def test_a_repeated_sigterm_never_shortens_the_drain() -> None:
    """systemd's KillMode=control-group signals every process of the unit, and a worker gets
    its parent's forwarded SIGTERM too: a second SIGTERM is part of a planned stop. (It cut the
    drain short: `engine.drain: 6` ended after 2.5 s.)"""
    drain, clock, health = drainer(5.0)
    drain.terminate(signal.SIGTERM)
    clock.advance(1.0)
    drain.terminate(signal.SIGTERM)
    drain.terminate(signal.SIGTERM)
    assert health.draining and not clock.hasStopped
    assert "SIGTERM again: the drain goes on, streams end in 4 s" in drain.engine.events.recent[-1]
    clock.advance(3.9)
    assert not clock.hasStopped
    clock.advance(0.1)
    assert clock.hasStopped
    drain.terminate(signal.SIGTERM)  # once stopping, nothing more happens


def test_a_second_sigint_or_no_drain_time_stops_at_once() -> None:
    drain, clock, health = drainer(5.0)
    drain.terminate(signal.SIGINT)  # Ctrl-C drains like SIGTERM...
    assert health.draining and not clock.hasStopped
    drain.terminate(signal.SIGINT)  # ...and Ctrl-C again ends it now
    assert clock.hasStopped and not clock.getDelayedCalls()
    drain, clock, health = drainer(5.0)
    drain.terminate(signal.SIGTERM)
    drain.terminate(signal.SIGINT)
    assert clock.hasStopped
    drain, clock, health = drainer(0.0)
    drain.terminate()
    assert clock.hasStopped and not health.draining


def test_a_sigterm_before_the_reactor_runs_is_queued_not_fatal() -> None:
    """twistd opens the ports before `reactor.run` installs Twisted's handlers: a SIGTERM in
    that gap killed the daemon with -15 (no ENGINE_STOPPED). The handler is in place from
    privilegedStartService on, and it only queues the stop for the reactor's first turn."""
    drain, clock, _ = drainer(0.0)
    queued: list[Callable[[], None]] = []
    clock.callFromThread = lambda f, *args: queued.append(f)  # type: ignore[method-assign]
    unhandled: list[int] = []  # stands for the default action (death), which would end pytest
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: unhandled.append(signum))
    previous_int = signal.getsignal(signal.SIGINT)
    try:
        drain.privilegedStartService()
        os.kill(os.getpid(), signal.SIGTERM)  # the handler runs in this thread, before the next line
        assert queued == [drain.terminate] and not unhandled
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, previous_int)
    assert not clock.hasStopped
    queued[0]()
    assert clock.hasStopped


def test_a_worker_whose_parent_is_gone_stops() -> None:
    """A parent killed outright cannot tell its workers; a worker handed to init stops rather
    than serve on unsupervised, holding the ports."""
    clock = MemoryReactorClock()
    events = EventLog("test")
    engine = SimpleNamespace(reactor=clock, events=events)
    pids = [4242]
    watch = WatchParent(engine, parent_pid=lambda: pids[-1])  # type: ignore[arg-type]
    watch.startService()
    clock.advance(1.0)
    assert not clock.hasStopped
    pids.append(1)  # reparented to init
    clock.advance(1.0)
    assert clock.hasStopped and not watch.running
    (line,) = [e for e in events.recent if "ENGINE_PARENT_GONE" in e]
    assert "parent pid 4242 is gone (now 1)" in line


def test_watch_follows_every_file_the_config_reads(tmp_path: Path) -> None:
    """`--watch` reloads when a file the config reads changes (an AsyncAPI spec, a local
    schema), not only the config itself; a reload that makes the config read other files
    watches those from then on."""
    config, reactor, engine = started(tmp_path)
    catalog = ("catalogs:\n  local:\n    type: filesystem\n    options:\n      subjects:\n"
               "        items: {{path: {path}}}\n")
    (tmp_path / "a.json").write_text('{"type": "object"}')
    (tmp_path / "b.json").write_text('{"type": "object"}')
    base = CONFIG.format(port=7001, location="www")

    def reloads() -> int:
        return sum("CONFIG_RELOADED" in line for line in engine.events.recent)

    write(config, 7001, text=base + catalog.format(path="a.json"))
    reactor.advance(1.0)
    assert reloads() == 1
    write(tmp_path / "a.json", 0, text='{"type": "string"}')
    reactor.advance(1.0)
    assert reloads() == 2, "an edited schema file is a reload"
    write(config, 7001, text=base + catalog.format(path="b.json"))
    reactor.advance(1.0)
    assert reloads() == 3
    write(tmp_path / "a.json", 0, text='{"type": "integer"}')
    reactor.advance(2.0)
    assert reloads() == 3, "a file the config no longer reads is not watched"
    write(tmp_path / "b.json", 0, text='{"type": "integer"}')
    reactor.advance(1.0)
    assert reloads() == 4, "the file it reads now is"
    (tmp_path / "b.json").unlink()
    reactor.advance(1.0)
    failed = [line for line in engine.events.recent if "CONFIG_RELOAD_FAILED" in line]
    assert len(failed) == 1 and "b.json" in failed[0], failed
