"""The one place that knows the binding graph: it builds runtime bindings from a `Config`, opens
the listeners, and swaps graphs on reload without dropping live connections.

Each binding's module knows only its own config and the *role* of its exits (see
`ssekd.bindings.api`); the engine walks the graph, builds every binding once (exits first), starts
the ones that are services, and owns the listening sockets.

Reload keeps what it can. A binding whose config, vault and whole exit subtree are unchanged
keeps its runtime object (so the Kafka consumers and caches survive a reload), and a port that
stays in the config keeps its socket: only the factory behind it is swapped, so connections
accepted before the reload go on with the graph they started with.
"""

from __future__ import annotations

import errno
import os
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from twisted.application.service import IService, MultiService, Service
from twisted.internet import defer, threads
from twisted.internet.error import CannotListenError
from twisted.internet.interfaces import IAddress, IListeningPort, IProtocol, IReactorTCP
from twisted.internet.protocol import ServerFactory
from twisted.internet.task import LoopingCall
from twisted.logger import Logger, LogLevel
from twisted.python.failure import Failure

from ssekd import __version__, sd_notify
from ssekd.bindings.api import (
    ROLE_PROTOCOLS,
    ConnectionFactory,
    Guard,
    ListenerBinding,
    ListenSpec,
    R,
    Reactor,
    ReadinessSource,
    Siblings,
)
from ssekd.bindings.registry import Registry, discover
from ssekd.catalogs import Catalog, build_catalogs, catalogs_stamp
from ssekd.catalogs.catalog import Schema
from ssekd.config.compose import RemoteTexts
from ssekd.config.errors import ConfigError, ConfigIssue
from ssekd.config.load import load_config
from ssekd.config.model import Binding, Config
from ssekd.guards import GuardTypes
from ssekd.guards import discover as discover_guards
from ssekd.health import Check, Health
from ssekd.telemetry import otlp, prometheus
from ssekd.telemetry.events import EventLog, stdout_stream
from ssekd.telemetry.memory_limit import MemoryLimit
from ssekd.telemetry.metrics import Metrics, Reading, known_names, label_name, matches
from ssekd.vaults import open_vault
from ssekd.workers.sockets import family_of, listening_socket

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
    """What any ssekd process reports of itself: `ssekd.build.info` and, under a control group
    with a memory limit, `ssekd.memory.limit`."""
    yield "ssekd.build.info", {"version": __version__}, 1.0
    limit = _memory_limit()
    if limit is not None:
        yield "ssekd.memory.limit", {}, float(limit)


class GraphBuilder:
    """Builds one config's graph; it is the `BuildContext` each binding's `build` receives.

    Exits are built on demand, once, before the binding that names them (reuse after a reload
    depends on theirs).
    """

    def __init__(self, engine: Engine, config: Config, previous: Graph | None) -> None:
        self.engine = engine
        self.config = config
        self.reactor: Reactor = engine.reactor
        self.events: EventLog = engine.events
        self.metrics: Metrics = engine.metrics
        self.registry = engine.registry
        self.guard_types = engine.guard_types
        self.health: Health = engine.health
        self.siblings: Siblings | None = engine.siblings
        self._previous = previous
        self._built: dict[str, object] = {}
        self._reused: set[str] = set()
        self._guards: dict[str, Guard] = {}
        #: Guards whose runtime (and keys) was carried over from before a reload.
        self.reused_guards: set[str] = set()
        self._building: list[str] = []
        self._failed: set[str] = set()
        #: Stat of each vault's store files, taken once per build (compared on reload).
        self.store_stamps = store_stamps(config)
        #: The config's schema catalogs (local schema files are read here).
        self.catalogs: dict[str, Catalog] = build_catalogs(config, self.reactor)
        if previous is not None:  # a registry's answers (and what it fetches) carry over
            for name, entry in config.catalogs.items():
                if entry.get("type") == "schema-registry" and name in previous.catalogs and \
                        previous.config.catalogs.get(name) == entry:
                    self.catalogs[name] = previous.catalogs[name]
        self.catalogs_stamp = catalogs_stamp(config, self.catalogs)

    def issue(self, path: tuple[str | int, ...], message: str) -> ConfigIssue:
        return self.config.issue(path, message)

    def exit(self, name: str, role: type[R]) -> R:
        """The runtime of binding `name`, checked to provide `role` (see `api.BuildContext`)."""
        runtime = self.build(name)
        if role is not object and not isinstance(runtime, role):
            b = self.config.bindings[name]
            path: tuple[str | int, ...] = ("bindings", name)
            who = ""
            if self._building:  # the binding being built asks for its exit: point at its `exit`
                requester = self.config.bindings[self._building[-1]]
                path, who = exit_path(requester, name), f" of binding {requester.name!r}"
            raise ConfigError([self.issue(path, f"exit {name!r}{who} is a {b.type} {b.kind}; "
                                                f"expected a binding that provides "
                                                f"{role.__name__}")])
        return runtime  # type: ignore[return-value]  # checked just above

    def guard(self, name: str) -> Guard:
        """The runtime of guard `name`, built once (or kept from before a reload when its
        config did not change, so a guard keeps the keys it fetched)."""
        if name in self._guards:
            return self._guards[name]
        config = self.config.guards[name]
        prev = self._previous
        if prev is not None and name in prev.guards and prev.config.guards.get(name) == config:
            self._guards[name] = prev.guards[name]
            self.reused_guards.add(name)
            return self._guards[name]
        guard_type = self.guard_types.types.get(config.type)
        if guard_type is None:
            reason = self.guard_types.broken.get(config.type, "it is not installed")
            raise ConfigError([self.issue(("guards", name, "type"),
                                          f"cannot build guard type {config.type}: {reason}")])
        try:
            runtime = guard_type.build(self, config)
        except ConfigError:
            raise
        except Exception as e:
            log.failure("building guard {name}", name=name, level=LogLevel.debug)
            raise ConfigError([self.issue(("guards", name), f"cannot build guard {config.type}: "
                                          f"{type(e).__name__}: {e}")]) from e
        self._guards[name] = runtime
        return runtime

    @property
    def guards(self) -> Mapping[str, Guard]:
        return self._guards

    def build(self, name: str) -> object:
        """The runtime object of binding `name`, built (or reused from before a reload) once."""
        if name in self._built:
            return self._built[name]
        if name in self._failed:
            raise ConfigError([])  # already reported once; dependents just stop building
        if name in self._building:
            cycle = " -> ".join(self._building[self._building.index(name):] + [name])
            raise ConfigError([self.issue(("bindings", name), f"exits form a cycle: {cycle}")])
        binding = self.config.bindings[name]
        self._building.append(name)
        try:
            for e in binding.exits:  # exits first: reuse depends on theirs
                self.build(e)
            runtime = self._reusable(binding)
            if runtime is None:
                kind = self.registry.kind(binding)
                try:
                    runtime = kind.build(self, binding)
                    self._check_role(binding, runtime)
                except ConfigError:
                    self._failed.add(name)
                    raise
                except Exception as e:
                    self._failed.add(name)
                    # A bug or an environment problem while building: still a clear message
                    # about which binding, never a bare traceback on the terminal.
                    log.failure("building binding {name}", name=name, level=LogLevel.debug)
                    raise ConfigError([self.issue(("bindings", name),
                                                  f"cannot build {binding.type} {binding.kind}: "
                                                  f"{type(e).__name__}: {e}")]) from e
            else:
                self._reused.add(name)
        finally:
            self._building.pop()
        self._built[name] = runtime
        return runtime

    def _check_role(self, binding: Binding, runtime: object) -> None:
        """A binding type must build what its role promises; a plugin that does not is a bug,
        reported where it is found rather than as an AttributeError at the first request."""
        role = self.registry.kind(binding).role
        protocol = ROLE_PROTOCOLS[role]
        if not isinstance(runtime, protocol):
            raise TypeError(f"{type(runtime).__name__} does not provide {protocol.__name__} "
                            f"(role {role})")

    def _reusable(self, binding: Binding) -> object | None:
        """The previous runtime of `binding` when nothing it depends on changed."""
        prev = self._previous
        if prev is None or binding.name not in prev.runtimes:
            return None
        old = prev.config.bindings.get(binding.name)
        if old != binding or not all(e in self._reused for e in binding.exits):
            return None
        if not guard_names(binding) <= self.reused_guards:
            return None  # a changed guard: the binding must check tokens with the new one
        used = reads_catalogs(binding)
        if used and _stamps_of(prev.catalogs_stamp, used) != \
                _stamps_of(self.catalogs_stamp, used):
            return None  # its models must check records with the new schemas
        if binding.options.get("asyncapi") and \
                (prev.config.bindings, prev.config.guards, origins(prev.config)) != \
                (self.config.bindings, self.config.guards, origins(self.config)):
            return None  # its AsyncAPI document describes the whole config (and its specs)
        if binding.vault and (prev.config.vaults.get(binding.vault) !=
                              self.config.vaults.get(binding.vault) or
                              prev.store_stamps.get(binding.vault) !=
                              self.store_stamps.get(binding.vault)):
            return None  # a renewed certificate on disk is a change, even with the same config
        return prev.runtimes[binding.name]

    @property
    def built(self) -> Mapping[str, object]:
        return self._built

    @property
    def reused(self) -> set[str]:
        """Bindings whose runtime object was carried over from before a reload."""
        return self._reused


#: Labels every metric carries or some carry: an attribute may not take their names.
RESERVED_LABELS = frozenset({"namespace", "binding", "topic", "partition", "route", "outcome",
                             "limit", "protocol", "le", "quantile"})


def telemetry_problems(config: Config) -> list[ConfigIssue]:
    """A `telemetry.metrics` entry (top level or a binding's) that matches no metric ssekd has
    is a mistake (a typo would otherwise silently export nothing); so is an attribute whose
    label name collides with one ssekd sets."""
    issues: list[ConfigIssue] = []
    names = known_names()
    lists: list[tuple[tuple[str | int, ...], tuple[str, ...]]] = []
    if config.telemetry.metrics is not None:
        lists.append((("telemetry", "metrics"), config.telemetry.metrics))
    for b in config.bindings.values():
        if b.metrics is not None:
            lists.append((("bindings", b.name, "telemetry", "metrics"), b.metrics))
    for base, patterns in lists:
        for i, pattern in enumerate(patterns):
            if not any(matches((pattern,), n) for n in names):
                issues.append(config.issue(base + (i,), f"{pattern!r} matches no metric of "
                                           f"ssekd; expected a name or glob of: "
                                           f"{', '.join(names)}"))
    for key in config.telemetry.attributes:
        if label_name(key) in RESERVED_LABELS:
            issues.append(config.issue(("telemetry", "attributes", key),
                                       f"attribute {key!r} would be the label "
                                       f"{label_name(key)!r}, which ssekd's metrics set "
                                       f"themselves; choose another name"))
    return issues


def unused_vault_problems(config: Config, found: list[ConfigIssue]) -> list[ConfigIssue]:
    """Open the vaults no binding uses: a wrong password or a missing store is reported when
    the config is checked, not on the day a binding starts using the vault."""
    used = {b.vault for b in config.bindings.values() if b.vault}
    issues: list[ConfigIssue] = []
    for name in config.vaults:
        if name not in used:
            try:
                open_vault(config, name)
            except ConfigError as e:
                issues.extend(i for i in e.issues if i not in found)
    return issues


def exit_path(binding: Binding, target: str) -> tuple[str | int, ...]:
    """Where `binding` names `target` as an exit: its `exit`, else the first route's."""
    base: tuple[str | int, ...] = ("bindings", binding.name)
    if binding.exit == target:
        return base + ("exit",)
    for i, route in enumerate(binding.routes):
        if route.exit == target:
            return base + ("routes", i, "exit")
    return base


#: `reads_catalogs` of a binding that reads every catalog (an AsyncAPI document describes all).
ALL_CATALOGS = frozenset({"*"})


def reads_catalogs(binding: Binding) -> frozenset[str]:
    """The catalogs whose schemas a binding's runtime holds: those the topic models of a kafka
    cache_server name, or all of them (`ALL_CATALOGS`) for an http server serving the AsyncAPI
    document; empty for any other binding."""
    if binding.options.get("asyncapi"):
        return ALL_CATALOGS
    names: set[str] = set()
    for topic in binding.options.get("topics") or ():
        for part in ("value", "key") if isinstance(topic, dict) else ():
            model = topic.get(part)
            if isinstance(model, dict) and isinstance(model.get("catalog"), dict):
                names.update(model["catalog"])
            elif model:
                return ALL_CATALOGS  # a model of a shape not read here: compare them all
    return frozenset(names)


def _stamps_of(stamp: tuple[object, ...], names: frozenset[str]) -> tuple[object, ...]:
    """The part of a `catalogs_stamp` for the catalogs `names` (all for `ALL_CATALOGS`)."""
    if names == ALL_CATALOGS:
        return stamp
    return tuple(pair for pair in stamp
                 if isinstance(pair, tuple) and pair and pair[0] in names)


def origins(config: Config) -> dict[str, object]:
    """What composite bindings say of the bindings they composed (the specs they came from):
    not part of a binding's equality, so that a spec's description changing rebuilds nothing
    but the AsyncAPI document."""
    return {n: b.origin for n, b in config.bindings.items() if b.origin is not None}


def guard_names(binding: Binding) -> set[str]:
    """The guards a binding names: in `options.authorization` and in its routes' `guarded`."""
    names = set(binding.options.get("authorization") or {})
    for route in binding.routes:
        names.update(route.guarded)
    return names


def store_stamps(config: Config) -> dict[str, tuple[tuple[str, int, int], ...]]:
    """Per vault, (path, mtime, size) of each store file it names, to notice rotated keys."""
    stamps: dict[str, tuple[tuple[str, int, int], ...]] = {}
    for name, vault in config.vaults.items():
        found = []
        for spec in vault.options.values():
            if isinstance(spec, dict) and isinstance(spec.get("store"), str):
                path = config.resolve_path(spec["store"])
                try:
                    st = path.stat()
                    found.append((str(path), st.st_mtime_ns, st.st_size))
                except OSError:
                    found.append((str(path), -1, -1))
        stamps[name] = tuple(found)
    return stamps


def watched_sources(graph: Graph) -> tuple[Path, ...]:
    """What `--watch` follows for `graph`: the files its config was read from (the config, its
    specs, its local schemas) and the key stores its vaults name, so a rotated certificate
    applies with a reload (`Graph.store_stamps` tells the tls bindings to rebuild)."""
    stores = [Path(path) for stamps in graph.store_stamps.values() for path, _, _ in stamps]
    return tuple(dict.fromkeys((*graph.config.sources, *stores)))


@dataclass
class Graph:
    """One built config: runtime object per binding, and the sockets its listeners want."""

    config: Config
    runtimes: dict[str, object]
    reused: set[str] = field(default_factory=set)
    store_stamps: dict[str, tuple[tuple[str, int, int], ...]] = field(default_factory=dict)
    guards: dict[str, Guard] = field(default_factory=dict)
    reused_guards: set[str] = field(default_factory=set)
    #: The prometheus exporters' sockets (not a binding's).
    exporter_specs: list[ListenSpec] = field(default_factory=list)
    #: The config's catalogs, and their `catalogs_stamp` (compared on reload).
    catalogs: dict[str, Catalog] = field(default_factory=dict)
    catalogs_stamp: tuple[object, ...] = ()
    #: The otlp exporters (services), by exporter name.
    exporters: dict[str, otlp.OtlpExporter] = field(default_factory=dict)
    #: Otlp exporters carried over from before a reload (their config did not change).
    reused_exporters: set[str] = field(default_factory=set)

    def listen_specs(self) -> list[ListenSpec]:
        specs: list[ListenSpec] = list(self.exporter_specs)
        for runtime in self.runtimes.values():
            if isinstance(runtime, ListenerBinding):
                specs.extend(runtime.listen_specs())
        return specs

    def services(self) -> dict[str, IService]:
        """Bindings and guards that run (timers, threads), by binding name or `guards.name`."""
        found = {n: r for n, r in self.runtimes.items() if IService.providedBy(r)}
        found.update({f"guards.{n}": g for n, g in self.guards.items()
                      if IService.providedBy(g)})
        found.update({f"exporters.{n}": e for n, e in self.exporters.items()})
        return found

    def readiness(self) -> list[Check]:
        """Every readiness check of the graph's runtimes (a Kafka cache's, for one)."""
        return [c for r in self.runtimes.values() if isinstance(r, ReadinessSource)
                for c in r.readiness()]

    def kept(self, service_name: str) -> bool:
        """Whether the service of that name was carried over from before a reload."""
        if service_name.startswith("guards."):
            return service_name.removeprefix("guards.") in self.reused_guards
        if service_name.startswith("exporters."):
            return service_name.removeprefix("exporters.") in self.reused_exporters
        return service_name in self.reused


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
                 worker: int | None = None, siblings: Siblings | None = None,
                 texts: RemoteTexts | None = None) -> None:
        """`inherited`, `worker` and `siblings` are for a worker process (see `ssekd.workers`):
        the sockets its parent opened, by configured (host, port), to adopt rather than open;
        its number; and the channel to the other workers (`ssekd.siblings`) that bindings and
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
        #: an IReactorTCP and `api.Reactor` (a MemoryReactorClock in tests)
        self.reactor = reactor
        self.config_path = config_path
        self.environ = environ
        self.registry = registry or discover()
        self.guard_types = guard_types or discover_guards()
        self.graph: Graph | None = None
        self._ports: dict[tuple[str, int], tuple[IListeningPort, SwitchFactory]] = {}
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
        ctx = GraphBuilder(self, config, previous)
        issues: list[ConfigIssue] = []
        for name in config.guards:
            try:
                ctx.guard(name)
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
                        ) -> tuple[dict[str, otlp.OtlpExporter], set[str]]:
        """The otlp exporters of `config`; one whose options and attributes are unchanged is
        kept from before a reload (its threads and its failure state go on)."""
        found: dict[str, otlp.OtlpExporter] = {}
        reused: set[str] = set()
        attributes = config.telemetry.attributes
        for s in otlp.specs([(x.name, x.type, x.options)
                             for x in config.telemetry.exporters.values()]):
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
            why = "is in use (another ssekd?)" \
                if getattr(e.socketError, "errno", None) == errno.EADDRINUSE else \
                f"cannot be opened ({getattr(e.socketError, 'strerror', None) or e.socketError})"
            print(f"ssekd: port {e.port} {why}: cannot listen on {e.interface or '*'}:{e.port}",
                  file=sys.stderr)
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
                self._ports[key] = (port, switch)
                opened.append(key)
                self.events.emit(ENGINE, "ENGINE_LISTENING", f"{spec.host}:{spec.port}")
        except Exception:
            for key in opened:  # all or nothing: a reload that cannot bind keeps the old sockets
                port, _ = self._ports.pop(key)
                port.stopListening()
            raise
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

