"""Composite bindings (the `asyncapi` kinds): replaced, before anything is built, by the ordinary
bindings they stand for.

A composite kind's `compose` (see `ssekd.spi.binding.KindSpec`) reads what it needs through the
config's catalogs (an AsyncAPI spec) and answers with bindings written as a zilla.yaml would
write them. They take the composite's place in the config, are checked against the same schemas
as bindings written by hand, and from then on nothing tells them apart: the engine builds them,
keeps them across a reload when they did not change, counts and reports them under their names.
A problem found in a composed binding, now or when it is built, is reported where it came from
(a spec's file and line), which `Composition.where` records.

This module knows no composite kind by name: the registry says which kinds compose.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ssekd.catalogs import build_catalogs
from ssekd.catalogs.catalog import Catalog, CatalogUnavailable, Schema, SchemaNotFound
from ssekd.config.document import Document
from ssekd.config.errors import ConfigError, ConfigIssue
from ssekd.config.model import Binding, Config, build_model
from ssekd.config.schema import validate
from ssekd.spi.compose import Composition, Source
from ssekd.spi.plugins import Registry

Path_ = tuple[str | int, ...]


class _WallClock:
    """What a registry catalog reads the time from, outside the reactor."""

    @staticmethod
    def seconds() -> float:
        return time.time()


@dataclass
class RemoteTexts:
    """Spec texts fetched from schema registries, kept between loads of one daemon's config.

    The first load (before the reactor runs, or `ssekd check`) waits for the registry. A load
    while the daemon serves (a reload, on the reactor thread) must not: it uses the text held
    from before, and asks the registry again in the background (`refresh`); when the answer
    differs, `changed` is called (the engine reloads). A text never held fails that reload with
    a message saying it is being fetched, and the reload is tried again once it has arrived.
    """

    #: Whether a load may wait for the network (False once the daemon serves).
    blocking: bool = True
    held: dict[tuple[str, str, str, str], Schema] = field(default_factory=dict)
    #: Runs a blocking call off the reactor thread (`twisted.internet.threads.deferToThread`)
    #: and hands its result or failure to the callbacks, on the reactor thread.
    run: Callable[[Callable[[], Schema], Callable[[Schema], None],
                   Callable[[Exception], None]], None] | None = None
    #: Called on the reactor thread when a text fetched in the background is new or changed.
    changed: Callable[[], object] | None = None
    _asked: set[tuple[str, str, str, str]] = field(default_factory=set)

    def fetch(self, catalog: Catalog, url: str, subject: str, version: str | int) -> Schema:
        key = (catalog.name, url, subject, str(version))
        if self.blocking or self.run is None:
            schema = catalog.fetch_blocking(subject, version)
            self.held[key] = schema
            return schema
        held = self.held.get(key)
        self._refresh(catalog, key, subject, version)
        if held is None:
            raise CatalogUnavailable(f"catalog {catalog.name!r}: subject {subject!r} version "
                                     f"{version} is being fetched (a reload must not wait for "
                                     f"the registry); the reload is tried again once it arrives")
        return held

    def _refresh(self, catalog: Catalog, key: tuple[str, str, str, str], subject: str,
                 version: str | int) -> None:
        if key in self._asked or self.run is None:
            return  # one question at a time per text
        self._asked.add(key)

        def answered(schema: Schema) -> None:
            self._asked.discard(key)
            old = self.held.get(key)
            self.held[key] = schema
            if (old is None or old.text != schema.text) and self.changed is not None:
                self.changed()

        def failed(_: Exception) -> None:
            self._asked.discard(key)  # the next reload asks again; until then the held text

        self.run(lambda: catalog.fetch_blocking(subject, version), answered, failed)


class _Context:
    """The `ComposeContext` of one load: the config as written, and its catalogs."""

    def __init__(self, config: Config, document: Document, texts: RemoteTexts) -> None:
        self._config = config
        self._document = document
        self._texts = texts
        self._catalogs: dict[str, Catalog] | None = None

    @property
    def config(self) -> Config:
        return self._config

    def issue(self, path: Path_, message: str) -> ConfigIssue:
        return self._document.issue(path, message)

    def _catalog(self, name: str, path: Path_) -> Catalog:
        if self._catalogs is None:
            self._catalogs = build_catalogs(self._config, _WallClock())
        catalog = self._catalogs.get(name)
        if catalog is None:
            known = ", ".join(sorted(self._catalogs)) or "none is defined"
            raise ConfigError([self.issue(path, f"catalog {name!r} is not defined under "
                                                f"catalogs (expected one of: {known})")])
        return catalog

    def read(self, catalog: str, subject: str, version: str | int, path: Path_) -> Source:
        found = self._catalog(catalog, path)
        entry = self._config.catalogs[catalog]
        kind = entry.get("type")
        options = entry.get("options") or {}
        try:
            if kind == "schema-registry":
                schema = self._texts.fetch(found, str(options.get("url")), subject, version)
            else:
                schema = found.fetch_blocking(subject, version)
        except SchemaNotFound as e:
            raise ConfigError([self.issue(path + ("subject",), f"{e}")]) from None
        except CatalogUnavailable as e:
            raise ConfigError([self.issue(path, f"cannot read the spec now: {e}")]) from None
        if kind == "filesystem":
            # `specs/../x.yaml` said as `x.yaml`: the file an error names is one to open
            file = Path(os.path.normpath(self._config.resolve_path(
                str(options["subjects"][subject]["path"]))))
            return Source(schema.text, file, 1, watch=file)
        if kind == "inline":
            key: Path_ = ("catalogs", catalog, "options", "subjects", subject, "schema")
            return Source(schema.text, self._config.file, _first_line(self._document, key))
        return Source(schema.text, Path(f"{catalog}:{subject}@{version}"), 1)


def _first_line(document: Document, key: Path_) -> int:
    """The line of the config where the text of the scalar at `key` starts: the line after
    its key for a block scalar (`schema: |`), else the key's own line."""
    line = document.lines.get(key) or 1
    try:
        text = document.file.read_text(encoding="utf-8").splitlines()[line - 1]
    except (OSError, UnicodeDecodeError, IndexError):
        return line + 1
    after = text.split(":", 1)[1].strip() if ":" in text else ""
    return line + 1 if after[:1] in ("|", ">") else line


def compose(file: Path, document: Document, registry: Registry,
            texts: RemoteTexts | None = None) -> Config:
    """The config of `document` with every composite binding replaced by what it composes
    (the config as written when there is none). Raises ConfigError listing every problem."""
    written = build_model(file, document.data, document)
    composites = {n: b for n, b in written.bindings.items()
                  if registry.kind(b).compose is not None}
    if not composites:
        return written
    ctx = _Context(written, document, texts or RemoteTexts())
    issues: list[ConfigIssue] = []
    made: dict[str, Composition] = {}
    for name, binding in composites.items():
        compose_kind = registry.kind(binding).compose
        assert compose_kind is not None
        try:
            made[name] = compose_kind(ctx, binding)
        except ConfigError as e:
            issues.extend(e.issues)
    issues += _clashes(written, document, made)
    if issues:  # a spec problem two bindings of the same spec find is said once
        raise ConfigError(list(dict.fromkeys(issues)))
    data, composed = _merge(document, made, composites)
    issues = validate(composed, registry)
    if issues:
        raise ConfigError(issues)
    origins: dict[str, Any] = {}
    sources: list[Path] = []
    for composition in made.values():
        origins.update(composition.origins)
        sources += composition.sources
    return build_model(file, data, composed, origins=origins, sources=tuple(sources),
                       composites={n: c.summary for n, c in made.items()})


def _clashes(written: Config, document: Document,
             made: Mapping[str, Composition]) -> list[ConfigIssue]:
    """A composed binding or catalog whose name another binding or catalog already has."""
    issues: list[ConfigIssue] = []
    taken: dict[str, str] = {}
    catalogs: dict[str, str] = {}
    for name, composition in made.items():
        for composed in composition.bindings:
            other = taken.get(composed) or (composed if composed in written.bindings and
                                            composed != name else None)
            if other is not None:
                issues.append(document.issue(("bindings", name),
                                             f"binding {name!r} composes a binding named "
                                             f"{composed!r}, which binding {other!r} already "
                                             f"is or composes: rename one of them"))
            taken[composed] = name
        for catalog in composition.catalogs:
            if catalog in written.catalogs or catalog in catalogs:
                issues.append(document.issue(("bindings", name),
                                             f"binding {name!r} composes a catalog named "
                                             f"{catalog!r}, which is already a catalog: rename "
                                             f"that catalog"))
            catalogs[catalog] = name
    return issues


def _merge(document: Document, made: Mapping[str, Composition],
           composites: Mapping[str, Binding]) -> tuple[dict[str, Any], Document]:
    """The data with each composite's bindings in its place (its own name first), and the
    document that says where every composed part came from."""
    data = dict(document.data)
    bindings: dict[str, Any] = {}
    for name, binding in document.data.get("bindings", {}).items():
        composition = made.get(name)
        if composition is None:
            bindings[name] = binding
            continue
        bindings[name] = composition.bindings[name]
        bindings.update((n, b) for n, b in composition.bindings.items() if n != name)
    data["bindings"] = bindings
    if any(c.catalogs for c in made.values()):
        data["catalogs"] = {**document.data.get("catalogs", {}),
                            **{k: v for c in made.values() for k, v in c.catalogs.items()}}
    # what was written under a composite binding is gone: its lines must not answer for the
    # composed bindings that took its place (only the binding's own line stays)
    lines = {p: line for p, line in document.lines.items()
             if not (len(p) > 2 and p[0] == "bindings" and p[1] in composites)}
    origins: dict[Path_, tuple[Path, int | None]] = {}
    for name, composition in made.items():
        own = (document.file, document.lines.get(("bindings", name)))
        for composed in composition.bindings:
            origins[("bindings", composed)] = own
        for catalog in composition.catalogs:
            origins[("catalogs", catalog)] = own
        origins.update(composition.where)
    return data, Document(document.file, data, lines, origins)
