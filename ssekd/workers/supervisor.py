"""`twistd ssekd --workers N`: one parent process and N workers serving the same sockets.

One ssekd process uses one core (one reactor, one GIL). With workers, the parent opens the
listening sockets of the config (before twistd drops privileges, like a single daemon), then
starts N copies of `twistd -n ssekd` that inherit them and adopt them.

Each worker gets its own socket per port, all bound with SO_REUSEPORT, so the kernel spreads
new connections evenly over the workers by a hash of their addresses. One socket shared by all
would not: every worker's reactor wakes for it and the first one accepts up to a hundred
connections in a row, so a burst of clients lands on whichever worker woke first. The parent
keeps every worker's sockets; while a worker is dead its sockets are shut down (they leave the
group, keeping their port), so new connections go to the living workers, and its replacement
adopts the same sockets listening again (no rebinding, so ports under 1024 work after `--uid`).

Each worker has its own Kafka
consumers and cache: event ids are Kafka positions, so a client whose worker dies reconnects
to any other worker (or any other daemon) and resumes exactly where it was.

The parent does no streaming. It supervises (a worker that dies is started again, with an
event), forwards SIGHUP (each worker reloads; the parent closes the sockets the new config
dropped, and a port the new config adds is opened by each worker with SO_REUSEPORT), and on
SIGTERM forwards it and exits once every worker has stopped. It serves the configured
prometheus exporters itself, with the sum of the workers' metrics (`ssekd.workers.summed_metrics`).

Workers are new processes (`spawnProcess` of the same twistd), not forks: a fork of a process
that already runs threads and a reactor would inherit their state half-way.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from prometheus_client.openmetrics.exposition import generate_latest
from twisted.application.service import Service
from twisted.internet import defer, protocol
from twisted.internet.error import ProcessExitedAlready
from twisted.internet.interfaces import IListeningPort
from twisted.python.failure import Failure

from ssekd import sd_notify
from ssekd.daemon_secret import daemon_secret
from ssekd.engine import ENGINE, Engine, build_figures
from ssekd.graph import watched_sources
from ssekd.heartbeats import Heartbeats, main_thread_cpu
from ssekd.telemetry import prometheus
from ssekd.telemetry.metrics import Metrics
from ssekd.telemetry.prometheus import ExporterSite
from ssekd.workers.sockets import (
    BACKLOG,
    datagram_socket,
    listening_socket,
    steer_by_connection_id,
)
from ssekd.workers.summed_metrics import SummedPage

#: Seconds before a worker that died is started again; doubled while it keeps dying young.
RESTART_DELAY = 0.5
MAX_RESTART_DELAY = 10.0
#: A worker that ran this long before dying was healthy: its restart is not delayed.
HEALTHY_RUN = 10.0
#: Seconds a worker has past `engine.drain` to stop after SIGTERM before it is killed.
STOP_GRACE = 30.0

#: How the parent runs twistd again for a worker, with the same interpreter and plugins.
TWISTD = "from twisted.scripts.twistd import run; run()"


def resolve_count(value: str | int | None, configured: int) -> int:
    """The number of workers: `--workers` (a number or `auto`) over `engine.workers` (0 means
    auto); auto is the number of cores this process may run on."""
    if value is None:
        n = configured
    elif str(value) == "auto":
        n = 0
    else:
        n = int(value)
    if n == 0:
        return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") \
            else (os.cpu_count() or 1)
    return n


def format_inherited(fds: Mapping[tuple[str, int], int]) -> str:
    """`host:port=fd,...`, the `--inherit` argument of a worker."""
    return ",".join(f"{h}:{p}={fd}" for (h, p), fd in fds.items())


def parse_inherited(text: str) -> dict[tuple[str, int], int]:
    found: dict[tuple[str, int], int] = {}
    for item in filter(None, text.split(",")):
        address, _, fd = item.rpartition("=")
        host, _, port = address.rpartition(":")
        found[(host, int(port))] = int(fd)
    return found


def format_inherited_udp(fds: Mapping[tuple[str, int], tuple[int, tuple[int, int]]]) -> str:
    """`host:port=fd/index/count,...`, the `--inherit-udp` argument of a worker."""
    return ",".join(f"{h}:{p}={fd}/{i}/{n}" for (h, p), (fd, (i, n)) in fds.items())


def parse_inherited_udp(text: str) -> dict[tuple[str, int], tuple[int, tuple[int, int]]]:
    found: dict[tuple[str, int], tuple[int, tuple[int, int]]] = {}
    for item in filter(None, text.split(",")):
        address, _, value = item.rpartition("=")
        host, _, port = address.rpartition(":")
        fd, index, count = (int(v) for v in value.split("/"))
        found[(host, int(port))] = (fd, (index, count))
    return found


class WorkerProcess(protocol.ProcessProtocol):
    """One worker as the parent sees it: it reports when the process has ended."""

    def __init__(self, supervisor: Supervisor, index: int) -> None:
        self.supervisor = supervisor
        self.index = index
        self.started = supervisor.reactor.seconds()
        #: The process id, kept: Twisted forgets it once the process has ended.
        self.pid: int | None = None
        #: Killed for missing its heartbeats (`Supervisor._stuck`).
        self.stuck = False

    def processEnded(self, reason: Failure) -> None:  # noqa: N802 - Twisted's name
        self.supervisor.ended(self, reason)


class Supervisor(Service):
    """The parent of the workers (see the module's docstring)."""

    def __init__(self, engine: Engine, count: int, worker_args: list[str]) -> None:
        self.engine = engine
        self.reactor: Any = engine.reactor
        self.events = engine.events
        self.count = count
        #: Arguments after `ssekd` every worker gets (`--config`, `--watch`...).
        self.worker_args = worker_args
        #: Per configured (host, port), one socket per worker (index 1 at 0).
        self.sockets: dict[tuple[str, int], list[socket.socket]] = {}
        #: The same for the UDP ports of quic servers: one socket per worker in one
        #: SO_REUSEPORT group, the kernel steering each datagram to the worker that holds its
        #: connection (`steer_by_connection_id`). Kept for a dead worker: its replacement
        #: adopts the same socket, so the group's numbering (the steering's) never changes.
        self.udp: dict[tuple[str, int], list[socket.socket]] = {}
        self.exporters: dict[tuple[str, int], IListeningPort] = {}
        self.workers: dict[int, WorkerProcess] = {}
        self.processes: dict[int, Any] = {}
        self.delays: dict[int, float] = {}
        self.stopping = False
        #: A SIGTERM or SIGINT came: the next ones only do what a repeat does.
        self.terminating = False
        self.all_stopped: defer.Deferred[None] | None = None
        self.rundir = ""
        self.drain = 0.0
        graph = engine.built
        assert graph is not None
        config = graph.config
        #: The files the config was read from and its key stores: `--watch` in the parent
        #: follows them.
        self.sources: tuple[Path, ...] = watched_sources(graph)
        #: The parent's own figures (worker restarts, its process), added to the workers' sum.
        self.metrics = Metrics()
        self.metrics.configure(config.namespace, config.telemetry.metrics,
                               config.telemetry.attributes, {}, [ENGINE])
        self.restarts = self.metrics.counter("ssekd.worker.restarts", ENGINE)
        self.metrics.reader(ENGINE, "build", build_figures)
        self.heartbeats = Heartbeats(self.reactor, self._metrics_path,
                                     config.engine.heartbeat_timeout, self._stuck, self._answered,
                                     reactor_cpu=self._reactor_cpu)
        #: READY=1 was sent to systemd (once every worker answered a heartbeat).
        self.announced = False

    # -- sockets --------------------------------------------------------------------------

    def privilegedStartService(self) -> None:
        super().privilegedStartService()
        graph = self.engine.built
        assert graph is not None
        self.drain = graph.config.engine.drain
        for spec in graph.listen_specs():
            if spec in graph.exporter_specs:
                continue
            key = (spec.host, spec.port)
            if key not in self.sockets:
                probe = listening_socket(spec.host, spec.port, reuse_port=True)
                # every socket bound to an explicit port (configured 0: the one the probe got),
                # so that one shut down for a dead worker keeps its port to listen again
                bound = probe.getsockname()[1]
                self.sockets[key] = [listening_socket(spec.host, bound, reuse_port=True)
                                     for _ in range(self.count)]
                probe.close()
                self.events.emit(ENGINE, "ENGINE_LISTENING", f"{spec.host}:{spec.port}")
        for udp_spec in graph.datagram_specs():
            key = (udp_spec.host, udp_spec.port)
            if key not in self.udp:
                # the first worker's socket picks the port (configured 0) and the others join
                # it: the kernel numbers a SO_REUSEPORT group's sockets in the order they
                # joined, and a socket that left would renumber the rest under the steering
                first = datagram_socket(udp_spec.host, udp_spec.port, reuse_port=True)
                bound = first.getsockname()[1]
                socks = [first, *(datagram_socket(udp_spec.host, bound, reuse_port=True)
                                  for _ in range(self.count - 1))]
                if self.count > 1:
                    steer_by_connection_id(socks[0], self.count)
                self.udp[key] = socks
                self.events.emit(ENGINE, "ENGINE_LISTENING",
                                 f"udp {udp_spec.host}:{udp_spec.port}")
        self._serve_exporters(graph.config)
        # Twisted installs its SIGTERM handler only once the reactor runs; a SIGTERM before
        # that would kill the parent at once and leave its workers running
        self._install_stop_signals()
        self._install_sighup()

    def _serve_exporters(self, config: Any) -> None:
        wanted = {(e.host, e.port): e for e in prometheus.endpoints(
            (x.type, x.options) for x in config.telemetry.exporters.values())}
        for key in [k for k in self.exporters if k not in wanted]:
            self.exporters.pop(key).stopListening()
        for key, endpoint in wanted.items():
            if key in self.exporters:
                continue
            site = ExporterSite(SummedPage(self.reactor, self.metric_sockets, endpoint.path,
                                           own=self.own_page),
                                reactor=self.reactor)
            site.displayTracebacks = False
            site.noisy = False
            self.exporters[key] = self.reactor.listenTCP(endpoint.port, site,
                                                         interface=endpoint.host)

    @property
    def config_path(self) -> Path:
        return self.engine.config_path

    def own_page(self) -> str:
        """The parent's own figures as OpenMetrics text, added to the workers' pages."""
        page: bytes = generate_latest(self.metrics.registry)
        return page.decode("utf-8")

    def metric_sockets(self) -> list[str]:
        """The Unix sockets of the workers' own metrics pages, one per running worker."""
        return [self._metrics_path(i) for i in sorted(self.workers)]

    def _metrics_path(self, index: int) -> str:
        return os.path.join(self.rundir, f"worker-{index}.sock")

    # -- workers --------------------------------------------------------------------------

    def startService(self) -> None:
        super().startService()
        # the configs of reloads are loaded here on the reactor thread: specs held by schema
        # registries come from the texts held, fetched again in the background (a new one is
        # a reload, as in a worker)
        self.engine.texts.blocking = False
        self.engine.texts.changed = lambda: sd_notify.reload_announced(self.reload)
        # again once the reactor runs, over the handlers Twisted installs then
        self.reactor.callWhenRunning(self._install_stop_signals)
        self.rundir = tempfile.mkdtemp(prefix="ssekd-workers-")
        self.events.emit(ENGINE, "ENGINE_STARTED",
                         f"{self.engine.config_path} pid {os.getpid()} with {self.count} workers")
        daemon_secret()  # made before the first worker starts: they all inherit it
        for i in range(1, self.count + 1):
            self.spawn(i)
        self.heartbeats.start()

    def spawn(self, index: int) -> None:
        if self.stopping:
            return
        fds = {key: socks[index - 1].fileno() for key, socks in self.sockets.items()}
        for socks in self.sockets.values():  # shut down while its previous worker was dead
            socks[index - 1].listen(BACKLOG)
        udp = {key: (socks[index - 1].fileno(), (index - 1, self.count))
               for key, socks in self.udp.items()}
        path = self._metrics_path(index)
        if os.path.exists(path):
            os.unlink(path)
        args = [sys.executable, "-c", TWISTD, "-n", "--pidfile=", "ssekd", *self.worker_args,
                "--worker", str(index), "--inherit", format_inherited(fds),
                "--inherit-udp", format_inherited_udp(udp), "--metrics-socket", path]
        child_fds: dict[int, int | str] = {0: 0, 1: 1, 2: 2}
        child_fds.update({fd: fd for fd in fds.values()})
        child_fds.update({fd: fd for fd, _ in udp.values()})
        worker = WorkerProcess(self, index)
        self.workers[index] = worker
        # The worker starts with SIGHUP ignored (an ignored signal stays ignored across exec)
        # until it installs its reload handler: a reload forwarded while it is still starting
        # must not kill it (it reads the config on disk as it starts anyway).
        handler = signal.signal(signal.SIGHUP, signal.SIG_IGN)
        try:
            # the parent alone speaks for the daemon to systemd (`NotifyAccess=main`)
            self.processes[index] = self.reactor.spawnProcess(
                worker, sys.executable, args, env=sd_notify.without_notify_socket(os.environ),
                childFDs=child_fds)
        finally:
            signal.signal(signal.SIGHUP, handler)
        worker.pid = self.processes[index].pid
        self.heartbeats.watch(index)
        self.events.emit(ENGINE, "ENGINE_WORKER_STARTED", f"worker {index} pid {worker.pid}")

    def _answered(self, index: int) -> None:
        """A worker answered its heartbeat: once every one has, the daemon serves."""
        if not self.announced and not self.stopping and \
                all(self.heartbeats.last.get(i) is not None for i in range(1, self.count + 1)):
            self.announced = True
            sd_notify.ready()

    def _reactor_cpu(self, index: int) -> float | None:
        """CPU seconds worker `index`'s reactor thread has used (a busy worker from a stuck
        one: `ssekd.heartbeats`)."""
        worker = self.workers.get(index)
        return None if worker is None or worker.pid is None else main_thread_cpu(worker.pid)

    def _stuck(self, index: int, silent: float) -> None:
        """A worker missed its heartbeats for the timeout: kill it; `ended` starts another."""
        worker = self.workers.get(index)
        process = self.processes.get(index)
        if worker is None or process is None or self.stopping:
            return
        worker.stuck = True
        self.events.emit(ENGINE, "ENGINE_WORKER_STUCK",
                         f"worker {index} pid {worker.pid}: no heartbeat for {silent:.1f} s "
                         f"(engine.heartbeat-timeout {self.heartbeats.timeout:g} s); killing it")
        try:
            process.signalProcess("KILL")
        except ProcessExitedAlready:
            pass

    def ended(self, worker: WorkerProcess, reason: Failure) -> None:
        index = worker.index
        if self.workers.get(index) is not worker:
            return
        del self.workers[index]
        self.processes.pop(index)
        self.heartbeats.forget(index)
        status = getattr(reason.value, "status", None)
        how = describe_exit(status)
        if self.stopping:
            # nobody will accept on its sockets again: close them, so the kernel stops
            # queueing connections there while the other workers finish
            for socks in self.sockets.values():
                socks[index - 1].close()
            self.events.emit(ENGINE, "ENGINE_WORKER_STOPPED", f"worker {index} pid {worker.pid} "
                                                              f"{how}")
            if not self.workers and self.all_stopped is not None:
                d, self.all_stopped = self.all_stopped, None
                d.callback(None)
            return
        # until its replacement runs, no connection may wait on its sockets: shut down, they
        # leave the kernel's SO_REUSEPORT group (keeping their port), and the other workers
        # get every new connection
        for socks in self.sockets.values():
            try:
                socks[index - 1].shutdown(socket.SHUT_RD)
            except OSError:
                pass  # not listening
        ran = self.reactor.seconds() - worker.started
        delay = 0.0 if ran >= HEALTHY_RUN else \
            min(MAX_RESTART_DELAY, max(RESTART_DELAY, self.delays.get(index, 0.0) * 2))
        self.delays[index] = delay
        self.restarts.value += 1
        stuck = " after missing its heartbeats" if worker.stuck else ""
        self.events.emit(ENGINE, "ENGINE_WORKER_DIED",
                         f"worker {index} pid {worker.pid} {how}{stuck}; starting it again in "
                         f"{delay:g} s")
        self.reactor.callLater(delay, self.spawn, index)

    # -- signals --------------------------------------------------------------------------

    def _install_stop_signals(self) -> None:
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum,
                          lambda s, frame: self.reactor.callFromThread(self.terminate, s))

    def terminate(self, signum: int = signal.SIGTERM) -> None:
        """The first SIGTERM or SIGINT stops the daemon: each worker gets SIGTERM and drains
        (`engine.drain`). Another SIGTERM changes nothing (systemd's `KillMode=control-group`
        sends one to every process of the unit); a second SIGINT ends the workers' drain now."""
        if not self.terminating:
            self.terminating = True
            sd_notify.stopping()
            self.reactor.stop()  # stopService forwards SIGTERM to every worker
            return
        name = signal.Signals(signum).name
        if signum == signal.SIGINT:
            self.events.emit(ENGINE, "ENGINE_DRAINING", f"{name} again: workers stop now")
            for process in self.processes.values():
                try:
                    process.signalProcess("INT")
                except ProcessExitedAlready:
                    pass
        else:
            self.events.emit(ENGINE, "ENGINE_DRAINING",
                             f"{name} again: the workers' drain goes on (a second SIGINT ends "
                             f"it now)")

    def _install_sighup(self) -> None:
        signal.signal(signal.SIGHUP, lambda signum, frame: self.reactor.callFromThread(
            sd_notify.reload_announced, self.reload))

    def reload(self) -> bool:
        """Close the sockets the new config dropped, serve its exporters, and let every
        worker reload. A config that does not load changes nothing here: the workers say why.
        True when the config loaded."""
        try:
            # built as a worker would (without the exporters) only to read its sockets; its
            # services never start
            fresh = Engine(self.engine.config_path, self.reactor, print_events=False,
                           worker=0, texts=self.engine.texts)
        except Exception:  # a ConfigError, an unreadable vault...: the workers report it
            fresh = None
        if fresh is not None and fresh.built is not None:
            graph = fresh.built
            self.sources = watched_sources(graph)
            self.drain = graph.config.engine.drain
            wanted = {(s.host, s.port) for s in graph.listen_specs()}
            for key in [k for k in self.sockets if k not in wanted]:
                for s in self.sockets.pop(key):
                    s.close()
                self.events.emit(ENGINE, "ENGINE_CLOSED", f"{key[0]}:{key[1]}")
            wanted_udp = {(s.host, s.port) for s in graph.datagram_specs()}
            for key in [k for k in self.udp if k not in wanted_udp]:
                for s in self.udp.pop(key):
                    s.close()
                self.events.emit(ENGINE, "ENGINE_CLOSED", f"udp {key[0]}:{key[1]}")
            try:
                self._serve_exporters(graph.config)
            except Exception as e:
                self.events.emit(ENGINE, "CONFIG_RELOAD_FAILED", f"{type(e).__name__}: {e}")
        for process in self.processes.values():
            process.signalProcess("HUP")
        return fresh is not None and fresh.built is not None

    def stopService(self) -> defer.Deferred[None]:
        super().stopService()
        self.stopping = True
        self.heartbeats.stop()
        for port in self.exporters.values():
            port.stopListening()
        self.exporters.clear()
        d: defer.Deferred[None] = defer.Deferred()
        if self.workers:
            self.all_stopped = d
            for process in self.processes.values():
                process.signalProcess("TERM")
            grace = self.drain + STOP_GRACE
            killer = self.reactor.callLater(grace, self._kill_all)
            d.addBoth(lambda r: (killer.active() and killer.cancel(), r)[1])
        else:
            d.callback(None)
        d.addCallback(lambda _: self._cleanup())
        d.addCallback(lambda _: self.events.emit(ENGINE, "ENGINE_STOPPED", "-"))
        d.addCallback(lambda _: self.events.flush(timeout=5.0))
        return d.addCallback(lambda _: None)

    def _kill_all(self) -> None:
        for index, process in self.processes.items():
            self.events.emit(ENGINE, "ENGINE_WORKER_KILLED",
                             f"worker {index} pid {process.pid}: still running after SIGTERM")
            process.signalProcess("KILL")

    def _cleanup(self) -> None:
        for socks in (*self.sockets.values(), *self.udp.values()):
            for s in socks:
                s.close()
        self.sockets.clear()
        self.udp.clear()
        shutil.rmtree(self.rundir, ignore_errors=True)


def describe_exit(status: int | None) -> str:
    """`exited 0`, `killed by SIGKILL`... from a wait status."""
    if status is None:
        return "ended"
    if os.WIFSIGNALED(status):
        return f"killed by {signal.Signals(os.WTERMSIG(status)).name}"
    return f"exited {os.WEXITSTATUS(status)}"
