"""The typed config: frozen dataclasses built from a validated document.

Options stay plain mappings here: each binding module reads its own options (their shape is
already guaranteed by its schema). What every binding shares (type, kind, exit, routes, vault)
is typed, because the engine walks it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ssekd.config.errors import ConfigIssue, format_path

DEFAULT_NAMESPACE = "default"


@dataclass(frozen=True)
class Route:
    """One route: any of `when` matches (each item's fields all must), then go to `exit`."""

    when: tuple[Mapping[str, Any], ...]
    exit: str | None
    with_: Mapping[str, Any] | None = None
    guarded: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    line: int | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Binding:
    name: str
    type: str
    kind: str
    options: Mapping[str, Any]
    routes: tuple[Route, ...] = ()
    exit: str | None = None
    vault: str | None = None
    line: int | None = field(default=None, compare=False)
    #: The binding's own `telemetry.metrics` (names or globs), None when it names none.
    metrics: tuple[str, ...] | None = None
    #: The binding's own `telemetry.attributes`: label name -> value or expression.
    attributes: Mapping[str, str] = field(default_factory=dict)
    #: For a binding composed from a spec (an asyncapi binding stands for it): what the
    #: composite says of it, e.g. the spec operation each route stands for (read by the
    #: AsyncAPI document). None for a binding written in the config. Not compared: a spec
    #: whose descriptions alone changed leaves the binding as it was (the engine compares
    #: origins only for the bindings that serve the document).
    origin: Any = field(default=None, compare=False)

    @property
    def exits(self) -> tuple[str, ...]:
        """Every binding this one may hand work to: the default exit and each route's."""
        names = [r.exit for r in self.routes if r.exit] + ([self.exit] if self.exit else [])
        return tuple(dict.fromkeys(names))


@dataclass(frozen=True)
class Vault:
    name: str
    type: str
    options: Mapping[str, Any]
    line: int | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Guard:
    name: str
    type: str
    options: Mapping[str, Any]
    line: int | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Exporter:
    name: str
    type: str
    options: Mapping[str, Any]


@dataclass(frozen=True)
class Telemetry:
    attributes: Mapping[str, str] = field(default_factory=dict)
    #: `telemetry.metrics`; None (absent) keeps every metric.
    metrics: tuple[str, ...] | None = None
    exporters: Mapping[str, Exporter] = field(default_factory=dict)


@dataclass(frozen=True)
class EngineOptions:
    """`engine` (an ssekd addition): how the process runs, not what it serves."""

    #: Worker processes sharing the listening sockets; 0 stands for `auto` (one per core).
    workers: int = 1
    #: Seconds between SIGTERM (readiness turns 503) and the end of the streams.
    drain: float = 0.0
    #: Seconds a worker may go without answering its parent's heartbeat (`ssekd.heartbeats`).
    heartbeat_timeout: float = 10.0


@dataclass(frozen=True)
class Config:
    """A whole zilla.yaml. `file` is where it was read; relative paths resolve from its folder."""

    file: Path
    namespace: str
    bindings: Mapping[str, Binding]
    vaults: Mapping[str, Vault] = field(default_factory=dict)
    guards: Mapping[str, Guard] = field(default_factory=dict)
    catalogs: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    telemetry: Telemetry = field(default_factory=Telemetry)
    engine: EngineOptions = field(default_factory=EngineOptions)
    #: The parsed file, for the line numbers of errors found after loading (not compared).
    document: Any = field(default=None, compare=False, repr=False)
    #: Every file the config was read from: the config itself, then the files its composite
    #: bindings read (AsyncAPI specs) and its local catalogs' schema files (`--watch`).
    sources: tuple[Path, ...] = field(default=(), compare=False)
    #: Composite binding name -> a line saying what it was composed into, from what.
    composites: Mapping[str, str] = field(default_factory=dict, compare=False)

    def issue(self, path: tuple[str | int, ...], message: str,
              environment: bool = False) -> ConfigIssue:
        """A ConfigIssue at `path` with its file and line, for errors found while building
        the graph (a part composed from a spec points into the spec)."""
        file, line = self.document.where(path) if self.document is not None \
            else (self.file, None)
        return ConfigIssue(file, line, format_path(path), message, environment)

    @property
    def folder(self) -> Path:
        return self.file.parent

    def resolve_path(self, path: str) -> Path:
        """A path from the config, relative to the config's folder unless absolute."""
        p = Path(path)
        return p if p.is_absolute() else (self.folder / p)


def build_model(file: Path, data: Mapping[str, Any], document: Any = None,
                origins: Mapping[str, Any] | None = None,
                sources: tuple[Path, ...] = (),
                composites: Mapping[str, str] | None = None) -> Config:
    """Build the model from validated data (the schema guarantees the shapes used here).
    `origins`, `sources` and `composites` describe what composite bindings made of the data
    (`ssekd.config.compose`)."""
    line_of = document.line_of if document is not None else (lambda path: None)
    bindings = {}
    for name, b in data.get("bindings", {}).items():
        routes = tuple(
            Route(
                when=tuple(r.get("when", ())),
                exit=r.get("exit"),
                with_=r.get("with"),
                guarded={g: tuple(roles) for g, roles in r.get("guarded", {}).items()},
                line=line_of(("bindings", name, "routes", i)),
            )
            for i, r in enumerate(b.get("routes", ()))
        )
        bindings[name] = Binding(
            name=name, type=b["type"], kind=b["kind"], options=b.get("options", {}),
            routes=routes, exit=b.get("exit"), vault=b.get("vault"),
            line=line_of(("bindings", name)),
            metrics=(tuple(b["telemetry"]["metrics"])
                     if "metrics" in b.get("telemetry", {}) else None),
            attributes={str(k): str(v)
                        for k, v in (b.get("telemetry", {}).get("attributes") or {}).items()},
            origin=(origins or {}).get(name),
        )
    vaults = {n: Vault(n, v["type"], v.get("options", {}), line_of(("vaults", n)))
              for n, v in data.get("vaults", {}).items()}
    guards = {n: Guard(n, g["type"], g.get("options", {}), line_of(("guards", n)))
              for n, g in data.get("guards", {}).items()}
    tel = data.get("telemetry", {})
    telemetry = Telemetry(
        attributes={k: str(v) for k, v in tel.get("attributes", {}).items()},
        metrics=tuple(tel["metrics"]) if "metrics" in tel else None,
        exporters={n: Exporter(n, e["type"], e.get("options", {}))
                   for n, e in tel.get("exporters", {}).items()},
    )
    eng = data.get("engine", {})
    workers = eng.get("workers", 1)
    engine = EngineOptions(workers=0 if workers == "auto" else int(workers),
                           drain=float(eng.get("drain", 0.0)),
                           heartbeat_timeout=float(eng.get("heartbeat-timeout", 10.0)))
    catalogs = data.get("catalogs", {})
    files = [file, *sources]
    for entry in catalogs.values():
        if entry.get("type") == "filesystem":  # schema files: a change is a reload (--watch)
            for subject in (entry.get("options") or {}).get("subjects", {}).values():
                local = Path(str(subject["path"]))
                files.append(local if local.is_absolute() else file.parent / local)
    return Config(file=file, namespace=data.get("name", DEFAULT_NAMESPACE), bindings=bindings,
                  vaults=vaults, guards=guards, catalogs=catalogs,
                  telemetry=telemetry, engine=engine, document=document,
                  sources=tuple(dict.fromkeys(files)), composites=dict(composites or {}))
