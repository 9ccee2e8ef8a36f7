"""The daemon as a Twisted service: it loads the config, has its graph built
(`ssekd.graph`), opens the listeners, and swaps graphs on reload without dropping live
connections.

Each binding's module knows only its own config and the *role* of its exits (see
`ssekd.spi.binding`). A port that stays in the config keeps its socket across a reload: only the
factory behind it is swapped, so connections accepted before the reload go on with the graph
they started with.
"""

from __future__ import annotations

import errno
import os
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from twisted.application.service import MultiService, Service
from twisted.internet import defer, threads
from twisted.internet.error import CannotListenError
from twisted.internet.interfaces import IAddress, IListeningPort, IProtocol, IReactorTCP
from twisted.internet.protocol import ServerFactory
from twisted.internet.task import LoopingCall
from twisted.logger import Logger
from twisted.python.failure import Failure

from ssekd import __version__, hotpath, sd_notify
from ssekd.catalogs.catalog import Schema
from ssekd.config.checks import telemetry_problems, unused_vault_problems
from ssekd.config.compose import RemoteTexts
from ssekd.config.errors import ConfigError, ConfigIssue
from ssekd.config.load import load_config
from ssekd.config.model import Config
from ssekd.datagrams import DatagramPorts
from ssekd.graph import Graph, GraphBuilder, watched_sources
from ssekd.health import Health
from ssekd.spi.connection import ConnectionFactory, ListenSpec
from ssekd.spi.plugins import GuardTypes, Registry, discover, discover_guards
from ssekd.spi.workers import Siblings
from ssekd.telemetry import otlp_spec, prometheus
from ssekd.telemetry.events import EventLog, stdout_stream
from ssekd.telemetry.memory_limit import MemoryLimit
from ssekd.telemetry.metrics import Metrics, Reading
from ssekd.workers.sockets import bound_accepts, family_of, listening_socket, port_taken

if TYPE_CHECKING:  # the SDK is imported where an otlp exporter is made
    from ssekd.telemetry.otlp import OtlpExporter

log = Logger()

#: Where engine-level events are reported (they belong to no binding).
ENGINE = "ssekd"
#: Connections the kernel queues for `accept` per listening socket (capped by net.core.somaxconn).
#: Twisted's default of 50 drops the SYNs of a thousand browsers reconnecting at once (after a
#: deploy or a network blip), and each waits for its SYN to be retried: 1, 3, 7 s... (measured:
#: 1,000 streams resuming at once took 9-12 s instead of half a second).
LISTEN_BACKLOG = 4096


_memory_limit = MemoryLimit()


def build_figures() -> Iterable[Reading]:
    """What any ssekd process reports of itself: `ssekd.build.info` (with whether the hot path's
    compiled twin runs: a build without a compiler is slower, not broken, so it is said where
    an operator looks) and, under a control group with a memory limit, `ssekd.memory.limit`."""
    yield "ssekd.build.info", {"version": __version__,
                               "hotpath": "compiled" if hotpath.COMPILED else "python"}, 1.0
    limit = _memory_limit()
    if limit is not None:
        yield "ssekd.memory.limit", {}, float(limit)



class SwitchFactory(ServerFactory):
    """The factory behind one listening socket; reload points it at the new graph's factory."""

    noisy = False

    def __init__(self, target: ConnectionFactory) -> None:
        self.target = target

    def buildProtocol(self, addr: IAddress) -> IProtocol | None:  # type: ignore[override]
        return self.target.buildProtocol(addr)


class Engine(MultiService):
    """The daemon: config file in, listening sockets and running bindings out."""

    def __init__(self, config_path: Path, reactor: Any,
                 registry: Registry | None = None,
                 environ: Mapping[str, str] | None = None,
                 guard_types: GuardTypes | None = None,
                 events: EventLog | None = None, print_events: bool = True,
                 inherited: Mapping[tuple[str, int], int] | None = None,
                 inherited_udp: Mapping[tuple[str, int], tuple[int, tuple[int, int]]]
                 | None = None,
                 worker: int | None = None, siblings: Siblings | None = None,
                 texts: RemoteTexts | None = None) -> None:
        """`inherited`, `worker` and `siblings` are for a worker process (see `ssekd.workers.supervisor`):
        the sockets its parent opened, by configured (host, port), to adopt rather than open;
        its number; and the channel to the other workers (`ssekd.workers.siblings`) that bindings and
        guards reach through `BuildContext.siblings`. A worker leaves the prometheus exporters
        to its parent, which sums the workers' pages, and opens a port that appears on reload
        with SO_REUSEPORT, so that every worker can hold one.

        `texts` holds the AsyncAPI specs read from schema registries (`ssekd.config.compose`):
        the first load waits for the registry, a load once the engine runs never does (it
        uses the text held and asks again in the background; a new text is a reload). A
        supervisor hands its own to the engines it loads a new config with."""
        super().__init__()
        self.texts = texts or RemoteTexts(run=self._off_reactor, changed=self._spec_changed)
        self.inherited = dict(inherited or {})
        self.worker = worker
        self.siblings = siblings
        #: an IReactorTCP and `ssekd.spi.binding.Reactor` (a MemoryReactorClock in tests)
        self.reactor = reactor
        self.config_path = config_path
        self.environ = environ
        self.registry = registry or discover()
        self.guard_types = guard_types or discover_guards()
        self.graph: Graph | None = None
        self._ports: dict[tuple[str, int], tuple[IListeningPort, SwitchFactory]] = {}
        #: The UDP sockets of datagram listeners (quic servers), by configured (host, port);
        #: a worker's come from its parent with its shard of the connection ids.
        self.datagrams = DatagramPorts(reactor, dict(inherited_udp or {}), worker is not None)
        self.events = events or EventLog("ssekd")
        self.print_events = print_events
        # Summaries of event floods are written when their second is over, not at the next
        # event of the same name, which may never come.
        self._ticker = LoopingCall(self.events.tick)
        self._ticker.clock = reactor
        self.metrics = Metrics()
        self.health = Health(reactor)
        self.health.checks = lambda: self.graph.readiness() if self.graph is not None else ()
        self.metrics.reader(ENGINE, "engine", self._figures)
        # Build the first graph now, so a bad config fails before twistd daemonizes or listens.
        config = load_config(config_path, self.registry, environ, self.texts)
        self._configure_events(config)
        self._pending: Graph | None = self._build(config, previous=None)
        self._configure_metrics(config)

    # -- building -------------------------------------------------------------------------

    def _configure_events(self, config: Config) -> None:
        self.events.namespace = config.namespace
        printers = [e for e in config.telemetry.exporters.values() if e.type == "stdout"]
        self.events.stdout = stdout_stream() if self.print_events and printers else None
        self.events.format = "json" if any(
            (e.options or {}).get("format") == "json" for e in printers) else "text"

    def _configure_metrics(self, config: Config) -> None:
        self.metrics.configure(
            config.namespace, config.telemetry.metrics, config.telemetry.attributes,
            {n: b.metrics for n, b in config.bindings.items() if b.metrics is not None},
            [*config.bindings, ENGINE])

    def _figures(self) -> Iterable[Reading]:
        """The daemon's own: its version, whether it is ready, its memory limit."""
        yield from build_figures()
        if self.graph is not None:  # started (the parent of workers never starts its graph)
            yield "ssekd.ready", {}, 1.0 if self.health.readiness()[0] else 0.0

    def _build(self, config: Config, previous: Graph | None) -> Graph:
        telemetry_issues = telemetry_problems(config)
        if telemetry_issues:
            raise ConfigError(telemetry_issues)
        ctx = GraphBuilder(config, previous, reactor=self.reactor, events=self.events,
                           metrics=self.metrics, health=self.health, registry=self.registry,
                           guard_types=self.guard_types, siblings=self.siblings)
        issues: list[ConfigIssue] = []
        for name in config.guards:
            try:
                ctx.guard_runtime(name)  # each binding asks for the role it needs
            except ConfigError as e:
                issues.extend(i for i in e.issues if i not in issues)
        if issues:
            raise ConfigError(issues)
        for name in config.bindings:
            try:
                ctx.build(name)
            except ConfigError as e:
                issues.extend(i for i in e.issues if i not in issues)
        issues.extend(unused_vault_problems(config, issues))
        if issues:
            raise ConfigError(issues)
        exporters = [ListenSpec(e.host, e.port, prometheus.site(self.metrics, e, self.reactor))
                     for e in prometheus.endpoints((x.type, x.options)
                                                   for x in config.telemetry.exporters.values())
                     if self.worker is None]
        pushers, reused = self._otlp_exporters(config, previous)
        return Graph(config, dict(ctx.built), set(ctx.reused), ctx.store_stamps,
                     dict(ctx.guards), set(ctx.reused_guards), exporters, ctx.catalogs,
                     ctx.catalogs_stamp, pushers, reused)

    def _otlp_exporters(self, config: Config, previous: Graph | None
                        ) -> tuple[dict[str, OtlpExporter], set[str]]:
        """The otlp exporters of `config`; one whose options and attributes are unchanged is
        kept from before a reload (its threads and its failure state go on). The exporter's
        module (the OpenTelemetry SDK) is imported only when there is one (`otlp_spec`)."""
        found: dict[str, OtlpExporter] = {}
        reused: set[str] = set()
        attributes = config.telemetry.attributes
        for s in otlp_spec.specs([(x.name, x.type, x.options)
                                  for x in config.telemetry.exporters.values()]):
            from ssekd.telemetry import otlp

            old = previous.exporters.get(s.name) if previous is not None else None
            if old is not None and old.spec == s and old.attributes == attributes:
                found[s.name] = old
                reused.add(s.name)
            else:
                found[s.name] = otlp.OtlpExporter(s, self.metrics, self.events, self.reactor,
                                                  attributes)
        return found, reused

    @property
    def sources(self) -> tuple[Path, ...]:
        """The files the config being served was read from and the key stores it names
        (`--watch` follows them: `watched_sources`)."""
        graph = self.graph or self._pending
        return watched_sources(graph) if graph is not None else (self.config_path,)

    @property
    def built(self) -> Graph | None:
        """The graph built from the config and not started yet: a supervisor of workers reads
        the sockets it wants, and never starts it."""
        return self._pending

    # -- service lifecycle ----------------------------------------------------------------

    def privilegedStartService(self) -> None:
        """Open the listening sockets. twistd calls this before it drops privileges (`--uid`),
        as Twisted's own endpoint services do, so a port under 1024 works for a daemon that
        then runs unprivileged; connections are not accepted before the reactor runs."""
        assert self._pending is not None, "Engine started twice"
        super().privilegedStartService()
        try:
            self._listen(self._pending)
        except CannotListenError as e:
            # one line, no traceback: a port taken since `makeService` looked, or one under
            # 1024 without the right to it
            if getattr(e.socketError, "errno", None) == errno.EADDRINUSE:
                said = port_taken(e.port, self.config_path)
            else:
                why = getattr(e.socketError, "strerror", None) or e.socketError
                said = (f"port {e.port} cannot be opened ({why}): cannot listen on "
                        f"{e.interface or '*'}:{e.port}")
            print(f"ssekd: {said}", file=sys.stderr)
            raise SystemExit(1) from None

    def startService(self) -> None:
        graph, self._pending = self._pending, None
        assert graph is not None, "Engine started twice"
        self.texts.blocking = False  # from now on a load runs on the reactor thread
        super().startService()  # when privilegedStartService was skipped, _activate listens
        self._activate(graph, previous=None)
        who = f" worker {self.worker}" if self.worker is not None else ""
        self.events.emit(ENGINE, "ENGINE_STARTED", f"{self.config_path} pid {os.getpid()}{who}")
        self.health.start()
        self._ticker.start(1.0, now=False).addErrback(self._log_failure, "event summaries")

    def _activate(self, graph: Graph, previous: Graph | None) -> None:
        """Move the sockets to the new graph, start its services, stop what it dropped.

        Sockets first: opening one can fail (a port in use, or under 1024 once `--uid` has
        dropped root), and then nothing of the new graph may be left running. No connection
        reaches the new graph before its services start: both happen in this reactor turn."""
        self._listen(graph)
        old_services = previous.services() if previous else {}
        for name, service in graph.services().items():
            if graph.kept(name) and old_services.get(name) is service:
                continue
            clash: Service | None = self.namedServices.get(service.name) \
                if service.name else None
            if clash is not None and clash is not service:
                # the rebuilt runtime of the same binding has the same service name: the old
                # one leaves first (in this reactor turn too), or adding the new one fails
                old_services = {n: s for n, s in old_services.items() if s is not clash}
                defer.maybeDeferred(clash.disownServiceParent).addErrback(
                    self._log_failure, f"stopping {name}")
            service.setServiceParent(self)
        self.graph = graph
        kept = {id(s) for s in graph.services().values()}
        for name, service in old_services.items():
            if id(service) not in kept:
                defer.maybeDeferred(service.disownServiceParent).addErrback(
                    self._log_failure, f"stopping {name}")

    def _listen(self, graph: Graph) -> None:
        wanted: dict[tuple[str, int], ListenSpec] = {}
        for spec in graph.listen_specs():
            wanted[(spec.host, spec.port)] = spec
        opened: list[tuple[str, int]] = []
        try:
            for key, spec in wanted.items():
                if key in self._ports:
                    self._ports[key][1].target = spec.factory
                    continue
                switch = SwitchFactory(spec.factory)
                port = self._open(key, switch)
                bound_accepts(port)
                self._ports[key] = (port, switch)
                opened.append(key)
                self.events.emit(ENGINE, "ENGINE_LISTENING", f"{spec.host}:{spec.port}")
        except Exception:
            for key in opened:  # all or nothing: a reload that cannot bind keeps the old sockets
                port, _ = self._ports.pop(key)
                port.stopListening()
            raise
        try:
            udp = self.datagrams.listen(graph.datagram_specs())
        except Exception:
            for key in opened:
                port, _ = self._ports.pop(key)
                port.stopListening()
            raise
        for host, port_number in udp:
            self.events.emit(ENGINE, "ENGINE_LISTENING", f"udp {host}:{port_number}")
        for key in [k for k in self._ports if k not in wanted]:
            port, _ = self._ports.pop(key)
            port.stopListening()
            self.events.emit(ENGINE, "ENGINE_CLOSED", f"{key[0]}:{key[1]}")

    def _open(self, key: tuple[str, int], factory: SwitchFactory) -> IListeningPort:
        """Listen on `key`: adopt the parent's socket in a worker, else open one."""
        fd = self.inherited.pop(key, None)
        if fd is not None:
            try:
                port: IListeningPort = self.reactor.adoptStreamPort(fd, family_of(fd), factory)
            finally:
                # the port holds its own copy: once it stops listening, no descriptor of this
                # process may keep the socket open, or the kernel would queue connections there
                os.close(fd)
            return port
        if self.worker is not None:
            sock = listening_socket(key[0], key[1], reuse_port=True)
            try:
                adopted: IListeningPort = self.reactor.adoptStreamPort(sock.fileno(),
                                                                       sock.family, factory)
            finally:
                sock.close()  # the port holds its own copy
            return adopted
        reactor: IReactorTCP = self.reactor
        return reactor.listenTCP(key[1], factory, interface=key[0], backlog=LISTEN_BACKLOG)

    def listening_ports(self) -> dict[tuple[str, int], int]:
        """Configured (host, port) -> the port actually bound (differs when configured 0)."""
        return {k: int(getattr(p.getHost(), "port", 0)) for k, (p, _) in self._ports.items()}

    def stopService(self) -> defer.Deferred[None]:
        if self._ticker.running:
            self._ticker.stop()
        self.health.stop()
        ports = [p for p, _ in self._ports.values()]
        self._ports.clear()
        stops = [defer.maybeDeferred(p.stopListening) for p in ports]
        # the QUIC connections' CONNECTION_CLOSE goes out as their sockets close
        stops += [d for d in self.datagrams.close_all() if isinstance(d, defer.Deferred)]
        d: defer.Deferred[Any] = defer.DeferredList(stops)
        d.addCallback(lambda _: super(Engine, self).stopService())
        d.addCallback(lambda _: self.events.emit(ENGINE, "ENGINE_STOPPED", "-"))
        # The process exits soon after: let the stdout writer take every line first (bounded,
        # in case nobody reads stdout any more).
        d.addCallback(lambda _: self.events.flush(timeout=5.0))
        return d.addCallback(lambda _: None)

    # -- reload ---------------------------------------------------------------------------

    def reload(self) -> bool:
        """Re-read the config. A bad one leaves everything as it was and says why."""
        try:
            config = load_config(self.config_path, self.registry, self.environ, self.texts)
            graph = self._build(config, previous=self.graph)
            self._activate(graph, previous=self.graph)
        except ConfigError as e:
            for issue in e.issues:
                self.events.emit(ENGINE, "CONFIG_RELOAD_FAILED", str(issue))
            return False
        except Exception as e:  # e.g. a new port already in use
            self.events.emit(ENGINE, "CONFIG_RELOAD_FAILED", f"{type(e).__name__}: {e}")
            log.failure("reload failed")
            return False
        self._configure_events(config)
        self._configure_metrics(config)
        self.events.emit(ENGINE, "CONFIG_RELOADED",
                         f"{self.config_path} ({len(graph.reused)} bindings kept)")
        return True

    def _off_reactor(self, fetch: Callable[[], Schema], answered: Callable[[Schema], None],
                     failed: Callable[[Exception], None]) -> None:
        """Run a registry request on the thread pool; its answer comes back on the reactor
        thread."""
        d = threads.deferToThread(fetch)
        d.addCallbacks(answered, lambda f: failed(Exception(f.getErrorMessage())))
        d.addErrback(self._log_failure, "a spec fetched from a registry")

    def _spec_changed(self) -> None:
        """A spec a schema registry holds is new or changed: a reload, as SIGHUP is (only a
        load once the engine runs asks in the background, so this comes only then)."""
        sd_notify.reload_announced(self.reload)

    def _log_failure(self, failure: Failure, what: str) -> None:
        log.failure("{what}", failure, what=what)


