"""The `schema-registry` catalog: the Confluent Schema Registry REST API.

Two calls are used: `GET /subjects/{subject}/versions/{version}` (answers `subject`, `id`,
`version`, `schema` and, for non-Avro schemas, `schemaType`) and `GET /schemas/ids/{id}`
(answers `schema` and maybe `schemaType`). Errors come as a 4xx/5xx with `error_code` and
`message`; a 404 (`40401` subject, `40402` version, `40403` schema) is a permanent "no such
schema", anything else (refused connection, 5xx, a body that is not that JSON) means "ask again
later".

Requests run on the reactor's thread pool, never on the reactor thread. A schema found by id
never changes, so it is kept for good; an answer for a subject and version is kept `cache-ttl`
seconds (Zilla calls this `max-age`), after which the model asks again in the background while it
goes on using what it has - that is how `latest` follows a new version without a restart.
Concurrent asks for the same thing share one request.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Callable
from typing import Any

from twisted.internet import threads
from twisted.internet.defer import Deferred, succeed

from ssekd import url_fetch
from ssekd.catalogs.catalog import CatalogUnavailable, Schema, SchemaNotFound

#: Seconds an answer for a subject and version is kept, unless `cache-ttl` says otherwise.
DEFAULT_CACHE_TTL = 300.0
#: Seconds one request may take in all (connect, redirects, headers, body).
FETCH_DEADLINE = url_fetch.DEFAULT_DEADLINE
#: Bytes of a registry answer read at most (a schema is text; this is plenty).
MAX_ANSWER_BYTES = 4 * 1024 * 1024

#: (status or None, body) of a GET: what `get_url` returns.
Answer = tuple[int | None, bytes]


def get_url(url: str) -> Answer:
    """GET `url` (blocking: run it in a thread), within `FETCH_DEADLINE` seconds in all,
    following redirects only while they stay https (`ssekd.url_fetch`). A refused connection, a
    refused redirect or the deadline raise (`OSError`)."""
    return url_fetch.fetch(url, "application/vnd.schemaregistry.v1+json, application/json",
                           FETCH_DEADLINE, MAX_ANSWER_BYTES)


class RegistryCatalog:
    """One `catalogs.<name>` of type `schema-registry`."""

    has_ids = True

    def __init__(self, name: str, url: str, clock: Any, context: str | None = None,
                 cache_ttl: float = DEFAULT_CACHE_TTL,
                 run: Callable[[Callable[[], Any]], Deferred[Any]] | None = None) -> None:
        self.name = name
        self.url = url.rstrip("/")
        self.clock = clock
        self.context = context if context not in (None, "", "default") else None
        self.cache_ttl = cache_ttl
        self._run = run or (lambda f: threads.deferToThread(f))
        self._by_id: dict[int, Schema] = {}
        self._by_version: dict[tuple[str, str], tuple[Schema, float]] = {}
        self._waiting: dict[str, list[Deferred[Any]]] = {}

    # -- the REST calls (any thread) ------------------------------------------------------------

    def _subject_path(self, subject: str) -> str:
        # a context other than the default is a prefix of the subject name (`:.ctx:subject`)
        qualified = f":.{self.context}:{subject}" if self.context else subject
        return urllib.parse.quote(qualified, safe="")

    def version_url(self, subject: str, version: str | int) -> str:
        return f"{self.url}/subjects/{self._subject_path(subject)}/versions/{version}"

    def id_url(self, schema_id: int) -> str:
        return f"{self.url}/schemas/ids/{schema_id}"

    def _answer(self, what: str, answer: Answer) -> dict[str, Any]:
        status, body = answer
        try:
            data = json.loads(body)
        except ValueError:
            data = None
        if status == 404:
            message = data.get("message") if isinstance(data, dict) else None
            raise SchemaNotFound(f"catalog {self.name!r}: {what} not found"
                                 + (f" ({message})" if message else ""))
        if status != 200 or not isinstance(data, dict) or not isinstance(data.get("schema"), str):
            got = f"HTTP {status}" if status != 200 else "an answer that is not the registry's"
            raise CatalogUnavailable(f"catalog {self.name!r}: {what}: {got}")
        if len(body) > MAX_ANSWER_BYTES:
            raise CatalogUnavailable(f"catalog {self.name!r}: {what}: answer too large")
        return data

    def _schema(self, data: dict[str, Any], schema_id: int | None = None) -> Schema:
        kind = data.get("schemaType")
        version = data.get("version")
        sid = data.get("id", schema_id)
        return Schema(subject=data.get("subject"),
                      version=version if isinstance(version, int) else None,
                      id=sid if isinstance(sid, int) else None, text=data["schema"],
                      kind=kind.upper() if isinstance(kind, str) else "AVRO")

    def _fetch_version(self, subject: str, version: str | int) -> Schema:
        try:
            answer = get_url(self.version_url(subject, version))
        except OSError as e:
            raise CatalogUnavailable(f"catalog {self.name!r}: {self.url}: {e}") from None
        return self._schema(self._answer(f"subject {subject!r} version {version}", answer))

    def _fetch_id(self, schema_id: int) -> Schema:
        try:
            answer = get_url(self.id_url(schema_id))
        except OSError as e:
            raise CatalogUnavailable(f"catalog {self.name!r}: {self.url}: {e}") from None
        return self._schema(self._answer(f"schema id {schema_id}", answer), schema_id)

    # -- the Catalog role (reactor thread) ------------------------------------------------------

    def _shared(self, key: str, fetch: Callable[[], Schema],
                keep: Callable[[Schema], None]) -> Deferred[Schema]:
        """One request for `key` however many ask while it runs."""
        mine: Deferred[Schema] = Deferred()
        waiting = self._waiting.get(key)
        if waiting is not None:
            waiting.append(mine)
            return mine
        self._waiting[key] = [mine]

        def done(result: Any) -> None:
            for d in self._waiting.pop(key, []):
                if isinstance(result, Schema):
                    d.callback(result)
                else:
                    d.errback(result)

        def kept(schema: Schema) -> Schema:
            keep(schema)
            return schema

        self._run(fetch).addCallback(kept).addBoth(done)
        return mine

    def resolve(self, subject: str, version: str | int) -> Deferred[Schema]:
        held = self._by_version.get((subject, str(version)))
        if held is not None and not self.stale(subject, version):
            return succeed(held[0])

        def keep(schema: Schema) -> None:
            self._by_version[(subject, str(version))] = (schema, self.clock.seconds())
            if schema.id is not None:
                self._by_id[schema.id] = schema

        return self._shared(f"v:{subject}:{version}",
                            lambda: self._fetch_version(subject, version), keep)

    def by_id(self, schema_id: int) -> Deferred[Schema]:
        held = self._by_id.get(schema_id)
        if held is not None:
            return succeed(held)
        return self._shared(f"id:{schema_id}", lambda: self._fetch_id(schema_id),
                            lambda s: self._by_id.__setitem__(schema_id, s))

    def known_id(self, schema_id: int) -> Schema | None:
        """The schema with this id when already fetched (the synchronous fast path)."""
        return self._by_id.get(schema_id)

    def peek(self, subject: str, version: str | int) -> Schema | None:
        held = self._by_version.get((subject, str(version)))
        return held[0] if held is not None else None

    def stale(self, subject: str, version: str | int) -> bool:
        held = self._by_version.get((subject, str(version)))
        return held is None or self.clock.seconds() - held[1] >= self.cache_ttl

    def fetch_blocking(self, subject: str, version: str | int) -> Schema:
        return self._fetch_version(subject, version)

