"""A cache_client topic's write models: its record's value and key encoded before a produce.

See `ssekd.catalogs.writing` for what each model makes of a body. A tombstone (no value) and a
record without a key have nothing to encode there.
"""

from __future__ import annotations

import dataclasses

from twisted.internet.defer import Deferred

from ssekd.bindings.kafka.producer import Record
from ssekd.catalogs.models import Invalid, Pending
from ssekd.catalogs.writing import WriteModel

#: Seconds a writer is told to wait when the catalog's next try is not known.
DEFAULT_RETRY_AFTER = 1.0


class RecordRefused(Exception):
    """The record does not satisfy its topic's model (http-kafka answers `400` with this)."""


class SchemaPending(Exception):
    """The model's schema is not resolved yet (http-kafka answers `503` with `Retry-After`).
    `resolving`, when the catalog is being asked right now: fires once it answered, and the
    write is worth trying once more then (the first writes after a start need not fail)."""

    def __init__(self, reason: str, retry_after: float,
                 resolving: Deferred[None] | None = None) -> None:
        super().__init__(reason)
        self.retry_after = retry_after
        self.resolving = resolving


class WriteModels:
    """The write models of one topic's values and keys (either may be absent)."""

    def __init__(self, topic: str, value: WriteModel | None, key: WriteModel | None) -> None:
        self.topic = topic
        self.value = value
        self.key = key
        self.fields = tuple(f for f in (value, key) if f is not None)

    def resolve(self) -> None:
        for f in self.fields:
            f.resolve()

    def stop(self) -> None:
        for f in self.fields:
            f.stop()

    def encode(self, record: Record) -> Record:
        """`record` with its key and value as the models write them; raises `RecordRefused`
        or `SchemaPending`."""
        key, value = record.key, record.value
        try:
            if self.key is not None and key is not None:
                try:
                    key = self.key.encode(key)
                except Invalid as e:
                    raise Invalid(f"key: {e}") from None
            if self.value is not None and value is not None:
                value = self.value.encode(value)
        except Invalid as e:
            raise RecordRefused(str(e)) from None
        except Pending as e:
            waits = [t for f in self.fields if (t := f.next_try_in) is not None]
            resolving = any(f.resolving for f in self.fields)
            raise SchemaPending(f"the schema of topic {self.topic} is not resolved yet: {e}",
                                max(waits, default=DEFAULT_RETRY_AFTER),
                                e.ready if resolving else None) from None
        return dataclasses.replace(record, key=key, value=value)
