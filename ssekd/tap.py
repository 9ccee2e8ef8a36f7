"""`twistd ssekd --config etc/zilla.yaml`: options and the service tree.

`makeService` builds the whole binding graph before returning, so a bad config stops twistd
before it daemonizes or opens a port; the error names file, line, path and what was expected.
"""

from __future__ import annotations

import gc
import os
import re
import signal
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Protocol

from twisted.application.internet import TimerService, UNIXServer
from twisted.application.service import IService, MultiService, Service
from twisted.logger import ILogObserver
from twisted.python import usage
from twisted.python.components import Componentized

from ssekd import __version__, sd_notify
from ssekd.config import ConfigError
from ssekd.config.model import DEFAULT_NAMESPACE
from ssekd.engine import ENGINE, Engine
from ssekd.spi.connection import DatagramSpec, ListenSpec
from ssekd.telemetry.events import EventLog, stdout_stream
from ssekd.telemetry.twistd_log import observer_for
from ssekd.workers import siblings
from ssekd.workers.sockets import port_in_use, port_taken
from ssekd.workers.supervisor import (
    Supervisor,
    parse_inherited,
    parse_inherited_udp,
    resolve_count,
)

DEFAULT_CONFIG = "etc/zilla.yaml"

#: Allocations between CPython's young-generation collections (its default is 700). The kafka
#: cache keeps up to hundreds of thousands of records alive, each a GC-tracked object made on
#: the consumer thread; at the default, a collection every 700 of them made loading a topic
#: about half garbage-collector time (measured with confluent-kafka on the dev broker: 250k ->
#: 430k records/s kept). Only cycles wait longer to be freed; everything else goes by refcount.
GC_YOUNG_THRESHOLD = 20_000


def namespace_of(config_path: Path) -> str:
    """The config's `name` for events about a config that did not load: read from its top-level
    `name:` line when there is a plain one, else Zilla's default namespace."""
    try:
        text = config_path.read_text(encoding="utf-8", errors="replace")[:65536]
    except OSError:
        return DEFAULT_NAMESPACE
    m = re.search(r"^name:[ \t]*['\"]?([a-zA-Z]+[a-zA-Z0-9._-]*)['\"]?[ \t]*(#.*)?$", text,
                  re.MULTILINE)
    return m.group(1) if m else DEFAULT_NAMESPACE


class Options(usage.Options):
    synopsis = "[options]"
    longdesc = "Serve Kafka topics as Server-Sent Events, configured by a Zilla zilla.yaml."
    optParameters = [
        ["config", "c", DEFAULT_CONFIG, "the zilla.yaml to run"],
        ["watch-interval", None, "1.0", "seconds between checks of the config file (with --watch)"],
        ["workers", None, None, "processes serving the same sockets: a number or auto "
                                "(default: the config's engine.workers, else 1)"],
        # Set by the parent on the workers it starts (ssekd.workers.supervisor), not by users.
        ["worker", None, None, "(internal) this process is worker number N"],
        ["inherit", None, "", "(internal) host:port=fd,... sockets opened by the parent"],
        ["inherit-udp", None, "", "(internal) host:port=fd/index/count,... UDP sockets opened "
                                  "by the parent, with this worker's shard of their ids"],
        ["metrics-socket", None, None, "(internal) Unix socket of this worker's metrics page"],
    ]
    optFlags = [
        ["watch", "w", "reload when the config file, or a file it reads (AsyncAPI specs, "
                    "schema files, key stores), changes (SIGHUP always reloads)"],
    ]

    def opt_version(self) -> None:
        """`twistd ssekd --version`: ssekd's version (`twistd --version` says Twisted's)."""
        print(f"ssekd {__version__}")
        raise SystemExit(0)

    def postOptions(self) -> None:
        try:
            self["watch-interval"] = float(self["watch-interval"])
        except ValueError as e:
            raise usage.UsageError("--watch-interval must be a number of seconds") from e
        workers = self["workers"]
        if workers is not None and workers != "auto" and \
                not (workers.isdigit() and 1 <= int(workers) <= 256):
            raise usage.UsageError("--workers must be a number from 1 to 256, or auto")


class ReloadOnSignal(Service):
    """SIGHUP reloads the config. The handler only schedules; the reload runs in the reactor."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._previous: Any = None

    def startService(self) -> None:
        super().startService()
        reactor = self.engine.reactor
        self._previous = signal.signal(
            signal.SIGHUP,
            lambda signum, frame: reactor.callFromThread(sd_notify.reload_announced,
                                                         self.engine.reload))

    def stopService(self) -> None:
        super().stopService()
        if self._previous is not None:
            signal.signal(signal.SIGHUP, self._previous)


class Reloadable(Protocol):
    """What reloads on a config change: an engine, or the parent of workers."""

    @property
    def config_path(self) -> Path: ...

    @property
    def sources(self) -> tuple[Path, ...]:
        """The files the running config was read from (the config, its specs, its local
        schemas) and the key stores it names."""

    @property
    def reactor(self) -> Any: ...

    def reload(self) -> object: ...


Stamp = tuple[tuple[str, int, int] | None, ...]


class WatchConfig(TimerService):
    """Polls the mtime and size of the config file and of every file the config was read from
    (AsyncAPI specs, schema files) or names as a key store; a change triggers the same reload as
    SIGHUP. Paths are followed through symlinks, so a Kubernetes ConfigMap or Secret mounted as
    a folder (whose files the kubelet swaps by a symlink) counts as changed when its contents
    are."""

    def __init__(self, engine: Reloadable, interval: float) -> None:
        self.engine = engine
        self._seen = self._stamp()
        super().__init__(interval, self._check)
        self.clock = engine.reactor

    def _stamp(self) -> Stamp | None:
        files = dict.fromkeys((self.engine.config_path, *self.engine.sources))
        stamps: list[tuple[str, int, int] | None] = []
        for i, file in enumerate(files):
            try:
                st = file.stat()
            except OSError:
                if i == 0:
                    return None  # the config itself half-written or moved: wait for it
                stamps.append(None)  # a spec that went away is a change (the reload says why)
                continue
            stamps.append((str(file), st.st_mtime_ns, st.st_size))
        return tuple(stamps)

    def _check(self) -> None:
        stamp = self._stamp()
        if stamp is not None and stamp != self._seen:
            self._seen = stamp
            sd_notify.reload_announced(self.engine.reload)
            after = self._stamp()
            if after is not None and _files(after) != _files(stamp):
                self._seen = after  # the config now reads other files: watch those


def _files(stamp: Stamp) -> set[str]:
    return {s[0] for s in stamp if s is not None}


class ExitCleanlyOnTerm(Service):
    """SIGTERM is how service managers ask a daemon to stop: after an orderly shutdown, exit 0.

    twistd re-raises the signal that stopped the reactor so the exit status shows it (-15); for
    SIGTERM that makes every planned stop look like a crash to scripts and tests. The reactor
    keeps that signal in `_exitSignal` (private, but the only hook twistd reads), which we clear.
    """

    def __init__(self, reactor: Any) -> None:
        self.reactor = reactor

    def stopService(self) -> None:
        super().stopService()
        if getattr(self.reactor, "_exitSignal", None) == signal.SIGTERM:
            self.reactor._exitSignal = None


class DrainOnTerm(Service):
    """SIGTERM starts the stop: with `engine.drain` above 0, readiness turns 503 at once, so load
    balancers stop sending new clients here, and the streams end (the reactor stops) `drain`
    seconds later, when the balancers have moved on. Without drain it stops at once.

    A repeated SIGTERM does not shorten the drain: systemd's `KillMode=control-group` signals
    every process of the unit, and a worker then gets its parent's forwarded SIGTERM too, so a
    second SIGTERM is what a planned stop looks like. What ends a drain at once is a second
    SIGINT (Ctrl-C twice; a first SIGINT drains like SIGTERM) or SIGKILL.

    Installed before the engine opens its ports (a SIGTERM between listening and `reactor.run`
    would otherwise kill the process with -15, leaving no ENGINE_STOPPED), and again once the
    reactor runs: Twisted installs its own SIGTERM and SIGINT handlers as it starts.
    `callFromThread` queues the stop until the reactor turns."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.stopping: Any = None
        #: The reactor was told to stop: nothing more to do for any signal.
        self.stopped = False

    def privilegedStartService(self) -> None:
        super().privilegedStartService()
        self._install()

    def startService(self) -> None:
        super().startService()
        self.engine.reactor.callWhenRunning(self._install)

    def _install(self) -> None:
        reactor = self.engine.reactor
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda s, frame: reactor.callFromThread(self.terminate, s))

    def terminate(self, signum: int = signal.SIGTERM) -> None:
        if self.stopped:
            return
        events = self.engine.events
        if self.engine.health.draining:
            if signum == signal.SIGINT:
                events.emit(ENGINE, "ENGINE_DRAINING", "SIGINT again: streams end now")
                self._stop_now()
            else:
                left = self.stopping.getTime() - self.engine.reactor.seconds() \
                    if self.stopping is not None and self.stopping.active() else 0.0
                events.emit(ENGINE, "ENGINE_DRAINING",
                            f"{signal.Signals(signum).name} again: the drain goes on, streams "
                            f"end in {max(0.0, left):.3g} s (a second SIGINT ends it now)")
            return
        graph = self.engine.graph
        drain = graph.config.engine.drain if graph is not None else 0.0
        sd_notify.stopping()
        if drain <= 0:
            self._stop_now()
            return
        self.engine.health.draining = True
        events.emit(ENGINE, "ENGINE_DRAINING", f"readiness 503; streams end in {drain:g} s")
        self.stopping = self.engine.reactor.callLater(drain, self._stop_now)

    def _stop_now(self) -> None:
        if self.stopping is not None and self.stopping.active():
            self.stopping.cancel()
        self.stopped = True
        self.engine.reactor.stop()

    def stopService(self) -> None:
        super().stopService()
        self.stopped = True  # stopped otherwise (the parent gone, a test)
        if self.stopping is not None and self.stopping.active():
            self.stopping.cancel()


class NotifyReady(Service):
    """`READY=1` to systemd once the reactor runs (the engine listens by then) - see
    `ssekd.sd_notify`; a daemon with workers says it from the parent, once they all answer."""

    def __init__(self, reactor: Any) -> None:
        self.reactor = reactor

    def startService(self) -> None:
        super().startService()
        self.reactor.callWhenRunning(sd_notify.ready)


class Daemon(MultiService):
    """The top of the service tree. Under twistd it gives the application twistd's log
    observer (`ssekd.telemetry.twistd_log`), so twistd's own lines come in the events' format:
    twistd asks the application for one after `makeService`, before it starts logging."""

    def __init__(self, events: EventLog, twistd_options: Any = None) -> None:
        super().__init__()
        self.events = events
        self.twistd_options = twistd_options

    def setServiceParent(self, parent: Any) -> None:  # noqa: N802 - Twisted's name
        if isinstance(parent, Componentized) and \
                parent.getComponent(ILogObserver, None) is None:
            observer = observer_for(self.events, self.twistd_options)
            if observer is not None:
                parent.setComponent(ILogObserver, observer)
        super().setServiceParent(parent)


class WatchParent(TimerService):
    """A worker stops when the parent that started it is gone.

    The parent forwards signals, restarts workers and owns their sockets; a parent killed
    outright (SIGKILL, the OOM killer) cannot tell its workers, which would go on serving with no
    supervisor and hold the ports a new daemon needs. Once a second the worker compares its
    parent's pid with the one it started under: a change means it was handed to init (or a
    subreaper), and it stops at once, without `engine.drain`, after `ENGINE_PARENT_GONE`."""

    def __init__(self, engine: Engine, interval: float = 1.0,
                 parent_pid: Callable[[], int] = os.getppid) -> None:
        self.engine = engine
        self.parent_pid = parent_pid
        self.started_under = parent_pid()
        super().__init__(interval, self._check)
        self.clock = engine.reactor

    def _check(self) -> None:
        now = self.parent_pid()
        if now != self.started_under:
            self.engine.events.emit(ENGINE, "ENGINE_PARENT_GONE",
                                    f"parent pid {self.started_under} is gone (now {now}): "
                                    f"stopping")
            if self.running:
                self.stopService()
            self.engine.reactor.stop()


def makeService(options: Options | dict[str, Any], reactor: Any = None,
                whole_process: bool = True) -> IService:
    """The service tree: the engine, SIGHUP handling, and the optional file watcher.

    `reactor` defaults to Twisted's global one. `whole_process` says the daemon owns this
    process (as under twistd): it then handles SIGHUP, exits 0 on SIGTERM and tunes the garbage
    collector. Tests that build the tree in their own process pass False (and a clock).
    """
    if reactor is None:
        from twisted.internet import reactor as global_reactor
        reactor = global_reactor
    config_path = Path(options["config"])
    worker = options.get("worker")
    own_socket = options.get("metrics-socket")
    try:
        engine = Engine(config_path, reactor=reactor,
                        inherited=parse_inherited(str(options.get("inherit") or "")),
                        inherited_udp=parse_inherited_udp(
                            str(options.get("inherit-udp") or "")),
                        worker=int(worker) if worker is not None else None,
                        siblings=siblings.UnixSiblings(reactor, str(own_socket))
                        if worker is not None and own_socket else None)
    except ConfigError as e:
        print(f"ssekd: the config cannot be used ({len(e.issues)} problem(s)):", file=sys.stderr)
        for issue in e.issues:
            print(f"  {issue}", file=sys.stderr)
        # ...and as events on stdout, in the format a log pipeline already parses: whether the
        # config has a stdout exporter cannot be known when the config is what is broken.
        events = EventLog(namespace_of(config_path), stdout=stdout_stream())
        for issue in e.issues:
            events.emit(ENGINE, "CONFIG_INVALID", str(issue))
        raise SystemExit(1) from None
    # twistd's own options (`--logfile`, `--nodaemon`) when run by twistd
    twistd_options = getattr(options, "parent", None) if whole_process else None
    top = Daemon(engine.events, twistd_options)
    built = engine.built
    assert built is not None
    if worker is None and whole_process:
        refuse_taken_ports(built.listen_specs(), engine.config_path, built.datagram_specs())
    count = resolve_count(options.get("workers"), built.config.engine.workers)
    if worker is None and count > 1 and whole_process:
        supervisor = Supervisor(engine, count, worker_arguments(options))
        supervisor.setServiceParent(top)
        ExitCleanlyOnTerm(engine.reactor).setServiceParent(top)
        if options.get("watch"):  # the parent watches: it has sockets to close on a change too
            WatchConfig(supervisor, float(options.get("watch-interval", 1.0))
                        ).setServiceParent(top)
        return top
    if whole_process:
        DrainOnTerm(engine).setServiceParent(top)  # first: its handler is in place before ports
    engine.setServiceParent(top)
    if whole_process and worker is None:
        NotifyReady(engine.reactor).setServiceParent(top)
    if own_socket:  # the parent scrapes its /metrics, the other workers ask it (ssekd.workers.siblings)
        UNIXServer(str(own_socket), siblings.site(engine.metrics, engine, reactor)
                   ).setServiceParent(top)
    if worker is not None and whole_process:
        WatchParent(engine).setServiceParent(top)
        engine.health.supervisor_timeout = built.config.engine.heartbeat_timeout
    if whole_process:
        gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])
        # What start-up made (modules, classes, the config's objects: ~60,000) lives as long as
        # the process: out of every full collection from now on, whose pause stops all streams
        # (measured: ~30 ms of each full collection's pause on this project's machine)
        gc.freeze()
        ReloadOnSignal(engine).setServiceParent(top)
        ExitCleanlyOnTerm(engine.reactor).setServiceParent(top)
    if options.get("watch"):
        WatchConfig(engine, float(options.get("watch-interval", 1.0))).setServiceParent(top)
    return top


def refuse_taken_ports(specs: Iterable[ListenSpec], config: object,
                       udp: Iterable[DatagramSpec] = ()) -> None:
    """A port another process holds (a second `make run`, a daemon already running) stops the
    daemon here, with one line, before twistd starts logging or daemonizes: the user sees why
    in the terminal, and no traceback. A quic binding's UDP ports too."""
    for spec in specs:
        if spec.port and port_in_use(spec.host, spec.port):
            print(f"ssekd: {port_taken(spec.port, config)}", file=sys.stderr)
            raise SystemExit(1)
    for udp_spec in udp:
        if udp_spec.port and port_in_use(udp_spec.host, udp_spec.port, udp=True):
            print(f"ssekd: {port_taken(udp_spec.port, config, udp=True)}", file=sys.stderr)
            raise SystemExit(1)


def worker_arguments(options: Options | dict[str, Any]) -> list[str]:
    """What each worker is run with after `ssekd`: the same config (the parent watches it, when
    asked to, and passes changes on as SIGHUP)."""
    return ["--config", str(Path(options["config"]).resolve())]
