"""What every catalog gives a model: schemas by subject and version, or by registry id.

A catalog answers with `Deferred`s because one kind (the schema registry) asks a server; the
local kinds (`inline`, `filesystem`) answer at once. `peek` is the synchronous view of what a
catalog already holds, for the AsyncAPI document served by a running daemon, which must not wait
on the network; `fetch_blocking` is for the `ssekd asyncapi` command, which may.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from twisted.internet.defer import Deferred

#: The version that means "the newest one" (what a model asks for when it names none).
LATEST = "latest"


@dataclass(frozen=True)
class Schema:
    """One version of one subject: its text and what the catalog calls it.

    `kind` is the registry's `schemaType` (`AVRO`, `JSON`, `PROTOBUF`); local catalogs say
    None and the model decides how to read the text. `id` is the registry's global id (None for
    local catalogs, whose schemas have none).
    """

    subject: str | None
    version: int | None
    id: int | None
    text: str
    kind: str | None = None
    #: Where a local schema was read from (a filesystem catalog's file), for messages.
    source: str | None = None


class SchemaNotFound(Exception):
    """The catalog answered and it has no such subject, version or id (a permanent answer)."""


class CatalogUnavailable(Exception):
    """The catalog could not answer now (registry down, a 5xx, a body that is not its API's):
    ask again later."""


class Catalog(Protocol):
    """Role of a runtime catalog (one per `catalogs.<name>` entry)."""

    name: str
    #: Whether its schemas have registry ids (Confluent wire-format records name them).
    has_ids: bool

    def resolve(self, subject: str, version: str | int) -> Deferred[Schema]:
        """The schema of `subject` at `version` (`latest` or a number). Fails with
        `SchemaNotFound` or `CatalogUnavailable`."""

    def by_id(self, schema_id: int) -> Deferred[Schema]:
        """The schema with a registry id (Confluent wire-format records carry one)."""

    def known_id(self, schema_id: int) -> Schema | None:
        """The schema with this id when the catalog already holds it (no waiting)."""

    def peek(self, subject: str, version: str | int) -> Schema | None:
        """What the catalog holds for `subject`/`version` without asking anyone."""

    def fetch_blocking(self, subject: str, version: str | int) -> Schema:
        """`resolve`, waiting for the answer on this thread (never on the reactor's)."""

    def stale(self, subject: str, version: str | int) -> bool:
        """Whether what is held for `subject`/`version` is older than the catalog keeps it
        (`cache-ttl`): the model asks again in the background and keeps using it meanwhile."""
