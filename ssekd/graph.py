"""The binding graph of one config: `GraphBuilder` builds every binding once (exits first), as
the `BuildContext` each binding's `build` receives, and `Graph` holds what it built, for the
engine (`ssekd.engine`) to serve.

Reload keeps what it can. A binding whose config, vault and whole exit subtree are unchanged,
and whose guards, catalogs and vaults (its kind's `depends`) did not change either, keeps its
runtime object (so the Kafka consumers and caches survive a reload).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from twisted.application.service import IService
from twisted.logger import Logger, LogLevel

from ssekd.catalogs import Catalog, build_catalogs, catalogs_stamp
from ssekd.config.errors import ConfigError, ConfigIssue
from ssekd.config.model import Binding, Config
from ssekd.health import Check, Health
from ssekd.spi.binding import Dependencies, R, Reactor, ReadinessSource, role_name
from ssekd.spi.connection import (
    DatagramListenerBinding,
    DatagramSpec,
    ListenerBinding,
    ListenSpec,
)
from ssekd.spi.guard import CredentialSource, Guard, GuardRuntime
from ssekd.spi.plugins import GuardTypes, Registry
from ssekd.spi.workers import Siblings
from ssekd.telemetry.events import EventLog
from ssekd.telemetry.metrics import Metrics

if TYPE_CHECKING:  # the SDK is imported where an otlp exporter is made
    from ssekd.telemetry.otlp import OtlpExporter

log = Logger()


class GraphBuilder:
    """Builds one config's graph; it is the `BuildContext` each binding's `build` receives.

    Exits are built on demand, once, before the binding that names them (reuse after a reload
    depends on theirs).
    """

    def __init__(self, config: Config, previous: Graph | None, *, reactor: Reactor,
                 events: EventLog, metrics: Metrics, health: Health, registry: Registry,
                 guard_types: GuardTypes, siblings: Siblings | None = None) -> None:
        """`previous` is the graph being served when this one is built for a reload: what
        did not change is taken from it."""
        self.config = config
        self.reactor = reactor
        self.events = events
        self.metrics = metrics
        self.registry = registry
        self.guard_types = guard_types
        self.health = health
        self.siblings = siblings
        self._previous = previous
        self._built: dict[str, object] = {}
        self._reused: set[str] = set()
        self._guards: dict[str, GuardRuntime] = {}
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
        """The runtime of binding `name`, checked to provide `role` (see `BuildContext`)."""
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
        """The runtime of guard `name`, to check requests' credentials (see `BuildContext`)."""
        runtime = self.guard_runtime(name)
        if not isinstance(runtime, Guard):
            raise ConfigError([self._guard_issue(name, "checks no credentials (it holds "
                                                       "credentials for a client binding to "
                                                       "present)",
                                                 "a guard that checks them, such as jwt")])
        return runtime

    def credentials(self, name: str) -> CredentialSource:
        """The runtime of guard `name`, as credentials to present (see `BuildContext`)."""
        runtime = self.guard_runtime(name)
        if not isinstance(runtime, CredentialSource):
            raise ConfigError([self._guard_issue(name, "holds no credentials to present (it "
                                                       "checks requests' credentials)",
                                                 "an inline guard")])
        return runtime

    def _guard_issue(self, name: str, what: str, expected: str) -> ConfigIssue:
        """A guard of the wrong role for the binding being built, at the line that names it."""
        kind = self.config.guards[name].type
        if not self._building:
            return self.issue(("guards", name), f"guard {name!r} (type {kind}) {what}; "
                                                f"expected {expected}")
        binding = self.config.bindings[self._building[-1]]
        path: tuple[str | int, ...] = ("bindings", binding.name)
        found = [i for i, r in enumerate(binding.routes) if name in r.guarded]
        where = self.registry.kind(binding).depends(binding.options).guards.get(name)
        if where is not None:
            path += ("options", *where)
        elif found:
            path += ("routes", found[0], "guarded", name)
        return self.issue(path, f"guard {name!r} (type {kind}) used by binding "
                                f"{binding.name!r} {what}; expected {expected}")

    def guard_runtime(self, name: str) -> GuardRuntime:
        """The runtime of guard `name` whatever its role, built once (or kept from before a
        reload when its config did not change, so a guard keeps the keys it fetched)."""
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
    def guards(self) -> Mapping[str, GuardRuntime]:
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
        if not isinstance(runtime, role):
            raise TypeError(f"{type(runtime).__name__} does not provide {role.__name__} "
                            f"(role {role_name(role)})")

    def _reusable(self, binding: Binding) -> object | None:
        """The previous runtime of `binding` when nothing it depends on changed."""
        prev = self._previous
        if prev is None or binding.name not in prev.runtimes:
            return None
        old = prev.config.bindings.get(binding.name)
        if old != binding or not all(e in self._reused for e in binding.exits):
            return None
        depends = self.registry.kind(binding).depends(binding.options)
        if not guard_names(binding, depends) <= self.reused_guards:
            return None  # a changed guard: the binding must check tokens with the new one
        used = reads_catalogs(depends)
        if used and _stamps_of(prev.catalogs_stamp, used) != \
                _stamps_of(self.catalogs_stamp, used):
            return None  # its models must check records with the new schemas
        if depends.inbound and not self._inbound_unchanged(binding.name):
            return None  # what it takes from the bindings that exit to it changed
        if depends.whole_config and \
                (prev.config.bindings, prev.config.guards, origins(prev.config)) != \
                (self.config.bindings, self.config.guards, origins(self.config)):
            return None  # e.g. an AsyncAPI document, which describes the whole config
        for vault in vault_names(binding, depends):
            if prev.config.vaults.get(vault) != self.config.vaults.get(vault) or \
                    prev.store_stamps.get(vault) != self.store_stamps.get(vault):
                return None  # a renewed certificate on disk is a change, even with the same config
        return prev.runtimes[binding.name]

    def _inbound_unchanged(self, name: str) -> bool:
        """The bindings that exit to `name` are the same as before the reload, and so are the
        catalogs they hold."""
        prev = self._previous
        assert prev is not None

        def inbound(config: Config) -> dict[str, Binding]:
            return {b.name: b for b in config.bindings.values() if name in b.exits}

        now = inbound(self.config)
        if now != inbound(prev.config):
            return False
        for b in now.values():
            used = reads_catalogs(self.registry.kind(b).depends(b.options))
            if used and _stamps_of(prev.catalogs_stamp, used) != \
                    _stamps_of(self.catalogs_stamp, used):
                return False
        return True

    @property
    def built(self) -> Mapping[str, object]:
        return self._built

    @property
    def reused(self) -> set[str]:
        """Bindings whose runtime object was carried over from before a reload."""
        return self._reused


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


def reads_catalogs(depends: Dependencies) -> frozenset[str]:
    """The catalogs whose schemas a binding's runtime holds, as its kind says (`depends`):
    `ALL_CATALOGS` when it holds every one."""
    if depends.every_catalog or depends.whole_config:
        return ALL_CATALOGS
    return frozenset(depends.catalogs)


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


def guard_names(binding: Binding, depends: Dependencies) -> set[str]:
    """The guards a binding names: in its options (as its kind says) and its routes' `guarded`."""
    names = set(depends.guards)
    for route in binding.routes:
        names.update(route.guarded)
    return names


def vault_names(binding: Binding, depends: Dependencies) -> set[str]:
    """The vaults a binding reads: its `vault`, and those its options name (as its kind says)."""
    return {binding.vault, *depends.vaults} if binding.vault else set(depends.vaults)


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
    guards: dict[str, GuardRuntime] = field(default_factory=dict)
    reused_guards: set[str] = field(default_factory=set)
    #: The prometheus exporters' sockets (not a binding's).
    exporter_specs: list[ListenSpec] = field(default_factory=list)
    #: The config's catalogs, and their `catalogs_stamp` (compared on reload).
    catalogs: dict[str, Catalog] = field(default_factory=dict)
    catalogs_stamp: tuple[object, ...] = ()
    #: The otlp exporters (services), by exporter name.
    exporters: dict[str, OtlpExporter] = field(default_factory=dict)
    #: Otlp exporters carried over from before a reload (their config did not change).
    reused_exporters: set[str] = field(default_factory=set)

    def listen_specs(self) -> list[ListenSpec]:
        specs: list[ListenSpec] = list(self.exporter_specs)
        for runtime in self.runtimes.values():
            if isinstance(runtime, ListenerBinding):
                specs.extend(runtime.listen_specs())
        return specs

    def datagram_specs(self) -> list[DatagramSpec]:
        return [spec for runtime in self.runtimes.values()
                if isinstance(runtime, DatagramListenerBinding)
                for spec in runtime.datagram_specs()]

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

