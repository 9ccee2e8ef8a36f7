"""The `inline` and `filesystem` catalogs: schemas that come with the config.

Both hold one schema per subject, read when the config is built (a file that cannot be read is a
config error then, not a failed record later). They know no registry ids, so a Confluent
wire-format record checked against them fails with "unknown schema id".
"""

from __future__ import annotations

from collections.abc import Mapping

from twisted.internet.defer import Deferred, fail, succeed

from ssekd.catalogs.catalog import LATEST, Schema, SchemaNotFound


class LocalCatalog:
    """Subjects known from the config; `version` is the subject's own when it states one."""

    has_ids = False

    def __init__(self, name: str, subjects: Mapping[str, Schema]) -> None:
        self.name = name
        self.subjects = dict(subjects)

    def _find(self, subject: str, version: str | int) -> Schema:
        schema = self.subjects.get(subject)
        if schema is None:
            raise SchemaNotFound(f"catalog {self.name!r} has no subject {subject!r}")
        if version != LATEST and schema.version is not None and int(version) != schema.version:
            raise SchemaNotFound(f"catalog {self.name!r} holds {subject!r} at version "
                                 f"{schema.version}, not {version}")
        return schema

    def resolve(self, subject: str, version: str | int) -> Deferred[Schema]:
        try:
            return succeed(self._find(subject, version))
        except SchemaNotFound:
            return fail()

    def by_id(self, schema_id: int) -> Deferred[Schema]:
        return fail(SchemaNotFound(f"unknown schema id {schema_id} (catalog {self.name!r} is "
                                   f"local and has no registry ids)"))

    def known_id(self, schema_id: int) -> Schema | None:
        return None

    def peek(self, subject: str, version: str | int) -> Schema | None:
        try:
            return self._find(subject, version)
        except SchemaNotFound:
            return None

    def fetch_blocking(self, subject: str, version: str | int) -> Schema:
        return self._find(subject, version)

    def stale(self, subject: str, version: str | int) -> bool:
        return False
