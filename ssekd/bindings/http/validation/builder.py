"""Building the `ValueModel` of each model an `options.requests` entry names, from the config.

Everything wrong with a model (a catalog that does not exist, a local schema that is missing or
does not compile, a pattern that is no regular expression) is collected as a config issue, so
the daemon stops before it listens, naming every one of them at once.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from ssekd.bindings.http.validation.values import (
    INT_BOUNDS,
    IntegerModel,
    SchemaModel,
    StringModel,
    ValueModel,
)
from ssekd.catalogs.catalog import Catalog
from ssekd.catalogs.local import LocalCatalog
from ssekd.catalogs.models import ModelConfig, local_problem

#: `range` of an integer model: `[1,10)`, `(,0]` (spaces taken out first).
_RANGE = re.compile(r"^([(\[])(-?\d+)?,(-?\d+)?([)\]])$")


class ModelBuilder:
    """Makes the `ValueModel` of a model config, collecting what is wrong with it (a catalog
    that does not exist, a local schema that is missing or does not compile) as config issues."""

    def __init__(self, catalogs: Mapping[str, Catalog], clock: Any,
                 report: Callable[[str, str], None],
                 issue: Callable[[tuple[str | int, ...], str], Any]) -> None:
        self.catalogs = catalogs
        self.clock = clock
        self.report = report
        self.issue = issue
        self.issues: list[Any] = []
        #: Every schema model built, to start (local catalogs resolve at once).
        self.schema_models: list[SchemaModel] = []

    def build(self, spec: Any, path: tuple[str | int, ...]) -> ValueModel | None:
        if isinstance(spec, str):
            spec = {"model": spec}
        model = str(spec["model"])
        if model == "string":
            pattern = spec.get("pattern")
            try:
                compiled = re.compile(str(pattern)) if pattern is not None else None
            except re.error as e:
                self.issues.append(self.issue((*path, "pattern"),
                                              f"expected a regular expression: {e}"))
                return None
            encoding = "utf-16" if spec.get("encoding") == "utf_16" else "utf-8"
            return StringModel(encoding, spec.get("minLength"), spec.get("maxLength"), compiled)
        if model in INT_BOUNDS:
            low = high = None
            text = spec.get("range")
            if text is not None:
                m = _RANGE.match(str(text).replace(" ", ""))
                assert m is not None  # the config schema's pattern
                if m.group(2) is not None:
                    low = int(m.group(2)) + (1 if m.group(1) == "(" else 0)
                if m.group(3) is not None:
                    high = int(m.group(3)) - (1 if m.group(4) == ")" else 0)
            return IntegerModel(model, spec.get("format") == "binary", low, high,
                                spec.get("multiple"))
        config = ModelConfig.parse("", "value", spec)
        catalog = self.catalogs.get(config.catalog) if config.catalog else None
        if config.catalog is None:
            self.issues.append(self.issue(path, f"a {model} model needs a `catalog` with its "
                                                f"schema"))
            return None
        if catalog is None:
            self.issues.append(self.issue((*path, "catalog", config.catalog),
                                          f"no catalog {config.catalog!r} under `catalogs`"))
            return None
        encoded = config.subject is None and config.schema_id is None
        if encoded and isinstance(catalog, LocalCatalog):
            self.issues.append(self.issue((*path, "catalog", config.catalog),
                                          f"`strategy: encoded` reads the schema id each "
                                          f"payload carries; catalog {config.catalog!r} is "
                                          f"local and has no ids: name a `subject`"))
            return None
        schema_model = SchemaModel(config, catalog, self.clock, self.report)
        problem = None if encoded else local_problem(schema_model)
        if problem is not None:
            self.issues.append(self.issue((*path, "catalog", config.catalog), problem))
            return None
        if isinstance(catalog, LocalCatalog):
            schema_model.resolve()  # a local catalog answers at once: no waiting, no timer
        self.schema_models.append(schema_model)
        return schema_model
