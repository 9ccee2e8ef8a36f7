"""The models a zilla.yaml gives a topic, checked by the snapshot job on the executors.

The daemon checks each record of a topic with a `value` (or `key`) model once, as it enters its
cache, and never streams one that fails (`ssekd.catalogs.models`, `ssekd.bindings.kafka.gate`).
A snapshot topic built without the same check could hold a value the daemon will refuse: the
page would then miss that key's current state. So `ssekd-spark snapshot --config zilla.yaml`
reads the daemon's own config, finds the models every kafka `cache_server` gives the change
topic or the snapshot topic (both apply to a record when both have one), and checks each record
with the daemon's code: the same catalogs (`inline`, `filesystem`, `schema-registry`) and the
same `FieldModel`, so "valid" means what it means to the daemon, the Confluent wire format and
registry ids included.

The driver resolves every configured schema first (a missing subject, a schema that does not
compile or a registry that does not answer stops the job before it reads anything) and pins a
registry's `latest` to the version it got, so that all executors check one run against one
schema. Executors rebuild the catalogs from a picklable description and ask a registry
themselves, once per task and synchronously (an executor has no reactor), for that version and
for the ids that wire-format records carry.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from twisted.internet.defer import Deferred, maybeDeferred
from twisted.internet.task import Clock

from ssekd.catalogs.catalog import Catalog, Schema
from ssekd.catalogs.local import LocalCatalog
from ssekd.catalogs.models import FieldModel, Invalid, ModelConfig, Pending
from ssekd.catalogs.registry import RegistryCatalog
from ssekd.config.errors import ConfigError, ConfigIssue

#: The report's kinds for records a model refuses.
INVALID_KEY = "invalid_key"
INVALID_VALUE = "invalid_value"


class ModelUnavailable(RuntimeError):
    """A model's schema cannot be had now (registry down, unknown subject, broken schema)."""


def _now(call: Callable[[], Any]) -> Deferred[Any]:
    """A catalog's `run`: do the blocking fetch at once, on this thread (no reactor here)."""
    return maybeDeferred(call)


@dataclass(frozen=True)
class CatalogSource:
    """What an executor needs to rebuild a catalog: the local subjects as the driver read them,
    or a registry's address."""

    name: str
    subjects: dict[str, Schema] = field(default_factory=dict)
    url: str | None = None
    context: str | None = None

    @staticmethod
    def of(catalog: Catalog) -> CatalogSource:
        if isinstance(catalog, RegistryCatalog):
            return CatalogSource(catalog.name, url=catalog.url, context=catalog.context)
        assert isinstance(catalog, LocalCatalog)
        return CatalogSource(catalog.name, subjects=dict(catalog.subjects))

    def build(self, clock: Clock) -> Catalog:
        if self.url is None:
            return LocalCatalog(self.name, self.subjects)
        return RegistryCatalog(self.name, self.url, clock, context=self.context, run=_now)


@dataclass(frozen=True)
class FieldCheck:
    """One model: the value or key model of one topic in one cache_server binding."""

    binding: str
    topic: str
    part: str
    config: ModelConfig
    catalog: CatalogSource | None

    def describe(self) -> str:
        where = f" ({self.config.describe()})" if self.config.catalog else ""
        return f"{self.topic} {self.part}: {self.config.model}{where}"


class _Checker:
    """A `FieldModel` on a clock that never moves: `latest` is not asked for again within a
    run, and a catalog's answer is there as soon as the call returns."""

    def __init__(self, check: FieldCheck) -> None:
        self.check = check
        self.clock = Clock()
        self.events: list[str] = []
        catalog = check.catalog.build(self.clock) if check.catalog is not None else None
        self.model = FieldModel(check.config, catalog, self.clock,
                                lambda _event, detail: self.events.append(detail),
                                convert=False)
        self.model.resolve()
        if not self.model.ready:
            raise ModelUnavailable(f"{check.describe()}: "
                                   f"{self.model.problem or 'the schema was not resolved'}")
        self.model.stop()  # no retry timers: a failure later is an error of this run

    def problem(self, payload: bytes) -> str | None:
        """Why the payload fails its model, or None when it passes."""
        why = ""
        for _ in range(2):  # a Pending from a synchronous catalog has its answer by now
            try:
                self.model.check(payload)
                return None
            except Invalid as e:
                return str(e)
            except Pending as e:
                why = str(e)
        raise ModelUnavailable(f"{self.check.describe()}: {why}"
                               + (f" ({self.events[-1]})" if self.events else ""))


@dataclass(frozen=True)
class TopicModels:
    """Every model that applies to the records of one snapshot job."""

    fields: tuple[FieldCheck, ...] = ()

    def describe(self) -> list[str]:
        return [f.describe() for f in self.fields]

    def checker(self) -> RecordChecker:
        return RecordChecker(self)

    def prepare(self) -> TopicModels:
        """Resolve every schema now (raises `ModelUnavailable`), and pin a registry subject's
        `latest` to the version resolved, so every executor checks against the same one."""
        pinned = []
        for check in self.fields:
            current = _Checker(check).model.current
            config = check.config
            if (check.catalog is not None and check.catalog.url is not None
                    and config.schema_id is None and current is not None
                    and current.version is not None):
                config = dataclasses.replace(config, version=str(current.version))
            pinned.append(dataclasses.replace(check, config=config))
        return TopicModels(tuple(pinned))


class RecordChecker:
    """The function Spark runs per record on the executors: (key, value) -> None when the record
    passes every model, else (kind, detail). Its models are built once per task."""

    def __init__(self, models: TopicModels) -> None:
        self.models = models
        self._checkers: list[_Checker] | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"models": self.models, "_checkers": None}

    def __call__(self, key: bytes | None, value: bytes | None) -> tuple[str, str] | None:
        if self._checkers is None:
            # Keys first, as the daemon checks them.
            self._checkers = [_Checker(f) for f in sorted(self.models.fields,
                                                          key=lambda f: f.part != "key")]
        # A tombstone or a keyless record has nothing to check in that part.
        for checker in self._checkers:
            payload = key if checker.check.part == "key" else value
            if payload is None:
                continue
            why = checker.problem(bytes(payload))
            if why is not None:
                kind = INVALID_KEY if checker.check.part == "key" else INVALID_VALUE
                return kind, f"{checker.check.describe()}: {why}"
        return None


def models_for(config_path: Path | str, topics: Iterable[str],
               environ: Any = None) -> TopicModels:
    """The models the daemon's config gives any of `topics`, resolved (see `prepare`).

    The config is read exactly as the daemon reads it (a bad one raises `ConfigError` with file
    and line), environment variables included.
    """
    from ssekd.catalogs import build_catalogs
    from ssekd.config.load import load_config
    from ssekd.spi.plugins import discover

    config = load_config(config_path, discover(), environ)
    catalogs = build_catalogs(config, Clock(), run=_now)
    wanted = set(topics)
    found: list[FieldCheck] = []
    issues: list[ConfigIssue] = []
    for binding in config.bindings.values():
        if (binding.type, binding.kind) != ("kafka", "cache_server"):
            continue
        for i, topic in enumerate(binding.options.get("topics", ())):
            name = str(topic["name"])
            if name not in wanted:
                continue
            for part in ("value", "key"):
                spec = topic.get(part)
                if spec is None:
                    continue
                model = ModelConfig.parse(name, part, spec)
                catalog = catalogs.get(model.catalog) if model.catalog else None
                # What the daemon refuses when it builds the binding, refused the same way.
                path = ("bindings", binding.name, "options", "topics", i, part)
                if model.model != "string" and model.catalog is None:
                    issues.append(config.issue(path, f"a {model.model} model needs a "
                                                     f"`catalog` with its schema"))
                elif model.catalog is not None and catalog is None:
                    issues.append(config.issue((*path, "catalog", model.catalog),
                                               f"no catalog {model.catalog!r} under `catalogs`"))
                else:
                    found.append(FieldCheck(binding.name, name, part, model,
                                            CatalogSource.of(catalog) if catalog else None))
    if issues:
        raise ConfigError(issues)
    return TopicModels(tuple(found)).prepare()


def described(models: TopicModels, topics: Sequence[str]) -> str:
    """The report's line about models."""
    if not models.fields:
        return f"models: none in the config for {' or '.join(topics)}"
    return "models: " + "; ".join(models.describe())
