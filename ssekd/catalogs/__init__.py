"""Schema catalogs (`inline`, `filesystem`, `schema-registry`) and the models that use them.

`build_catalogs` turns a config's `catalogs` into runtime catalogs once per config build; a
kafka cache_server then makes one `TopicModel` per topic that has a `value` or `key` model and
checks each record once, as it enters the cache (`ssekd.bindings.kafka.gate`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from ssekd.catalogs.catalog import LATEST, Catalog, Schema
from ssekd.catalogs.local import LocalCatalog
from ssekd.catalogs.registry import DEFAULT_CACHE_TTL, RegistryCatalog
from ssekd.config.errors import ConfigError, ConfigIssue
from ssekd.config.model import Config

__all__ = ["LATEST", "Catalog", "Schema", "build_catalogs", "catalogs_stamp"]


def catalogs_stamp(config: Config, catalogs: Mapping[str, Catalog]) -> tuple[object, ...]:
    """What a reload compares to tell whether the catalogs changed: per catalog (a pair of its
    name and stamp, in name order), its config and the text of every local schema (a schema
    file edited in place is a change). A binding that uses some catalogs compares theirs."""
    return tuple((name, (json.dumps(config.catalogs[name], sort_keys=True, default=str),
                         tuple(sorted(c.subjects.items())) if isinstance(c, LocalCatalog)
                         else ()))
                 for name, c in sorted(catalogs.items()))


def build_catalogs(config: Config, clock: Any,
                   run: Callable[[Callable[[], Any]], Any] | None = None) -> dict[str, Catalog]:
    """One runtime catalog per `catalogs.<name>`. Local schema files are read now: one that
    cannot be read is a config error naming the file's line in the config."""
    built: dict[str, Catalog] = {}
    issues: list[ConfigIssue] = []
    for name, entry in config.catalogs.items():
        options = entry.get("options") or {}
        kind = entry["type"]
        if kind == "schema-registry":
            built[name] = RegistryCatalog(name, str(options["url"]), clock,
                                          context=options.get("context"),
                                          cache_ttl=float(options.get(
                                              "cache-ttl", options.get("max-age",
                                                                       DEFAULT_CACHE_TTL))),
                                          run=run)
            continue
        subjects: dict[str, Schema] = {}
        for subject, spec in (options.get("subjects") or {}).items():
            version = spec.get("version")
            version = int(version) if isinstance(version, int) else None
            if kind == "inline":
                subjects[subject] = Schema(subject, version, None, str(spec["schema"]))
                continue
            path = config.resolve_path(str(spec["path"]))
            try:
                text = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as e:
                issues.append(config.issue(("catalogs", name, "options", "subjects", subject,
                                            "path"), f"cannot read {path}: "
                                                     f"{getattr(e, 'strerror', None) or e}"))
                continue
            subjects[subject] = Schema(subject, version, None, text, source=str(path))
        built[name] = LocalCatalog(name, subjects)
    if issues:
        raise ConfigError(issues)
    return built
