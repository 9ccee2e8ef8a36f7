"""What the http binding checks of requests (server) and responses (client): `options.requests`.

An entry names a request by its path template (`/items/{id}`: a `{param}` takes one or more
characters, `/` included, as Zilla's does) and method, and lists what such a request must be:
its headers, its path and query parameters and its content, each by a model (`string`, `int32`,
`int64`, or `json` and `avro` with a schema from a catalog). On the client, the entry's
`responses` say what the upstream's answers must be, by status and content type.

What is checked, as Zilla checks it: only what is there. A header or query parameter the request
leaves out, or a request without a body, has nothing to check; a query parameter given twice is
checked twice. Zilla picks the entry by path, method and content type, so a request whose
`Content-Type` no entry of its path and method lists is not checked at all there; ssekd refuses
it (`415`): otherwise any body gets past a model by naming another type. (Zilla's server also
ignores the method; ssekd does not.)

The answers: a request that fails is `400` before its route's exit sees anything, its body a line
saying which part failed and why, never the value itself (a header may be a credential, a body
anything). A catalog that cannot answer yet (a schema registry down or slow) is waited for at
most `WAIT_SECONDS`, then `503` with `Retry-After`. A response its entry selects is held until
its body is whole (at most `RESPONSE_BODY_BYTES`): one whose headers fail is a `503` with
`Retry-After: 0` instead (Zilla's answer); one whose content fails is cut after its head has
gone (Zilla's too): the client sees the response end early (curl exits 18 over HTTP/1.1).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import unquote, unquote_to_bytes

from twisted.internet.defer import Deferred
from twisted.web import http

from ssekd.bindings.http.response_check import Abort, UpstreamAnswer
from ssekd.catalogs.catalog import Catalog, Schema
from ssekd.catalogs.local import LocalCatalog
from ssekd.catalogs.models import (
    WIRE_HEADER,
    WIRE_MAGIC,
    Codec,
    FieldModel,
    Invalid,
    ModelConfig,
    Pending,
    compile_avro,
    json_problem,
    json_validator,
    local_problem,
    parse_json,
)

#: Seconds a request waits for a catalog that has not answered yet, before its `503`.
WAIT_SECONDS = 5.0
#: `Retry-After` of that `503` when the catalog says nothing better.
RETRY_AFTER = 1.0
#: Models that need no catalog, and those that read one.
SCALAR_MODELS = ("string", "int32", "int64")
SCHEMA_MODELS = ("json", "avro")
METHODS = ("GET", "PUT", "POST", "DELETE", "OPTIONS", "HEAD", "PATCH", "TRACE")
_INT_BOUNDS = {"int32": (-(1 << 31), (1 << 31) - 1), "int64": (-(1 << 63), (1 << 63) - 1)}
_RANGE = re.compile(r"^([(\[])(-?\d+)?,(-?\d+)?([)\]])$")


# -- models of one value ------------------------------------------------------------------------

class ValueModel(Protocol):
    """Checks one value (a header, a parameter, a body): returns, or raises `Invalid` (its
    message names no part of the value) or `Pending` (the schema is not held yet)."""

    def check(self, value: bytes) -> object: ...


@dataclass(frozen=True)
class StringModel:
    """`model: string`: text in its encoding, `minLength`/`maxLength` characters, a `pattern`
    the whole text must match."""

    encoding: str = "utf-8"
    min_length: int | None = None
    max_length: int | None = None
    pattern: re.Pattern[str] | None = None

    def check(self, value: bytes) -> None:
        try:
            text = value.decode(self.encoding)
        except UnicodeDecodeError:
            raise Invalid(f"not {self.encoding} text") from None
        if self.min_length is not None and len(text) < self.min_length:
            raise Invalid(f"shorter than {self.min_length} characters")
        if self.max_length is not None and len(text) > self.max_length:
            raise Invalid(f"longer than {self.max_length} characters")
        if self.pattern is not None and self.pattern.fullmatch(text) is None:
            raise Invalid(f"does not match the pattern {self.pattern.pattern}")


@dataclass(frozen=True)
class IntegerModel:
    """`model: int32|int64`: decimal text (`format: text`, the default) or big-endian bytes
    (`format: binary`), within the type, its `range` (`[1,10)`, `(,0]`) and a `multiple`."""

    kind: str
    binary: bool = False
    low: int | None = None
    high: int | None = None
    multiple: int | None = None

    def check(self, value: bytes) -> None:
        if self.binary:
            size = 4 if self.kind == "int32" else 8
            if len(value) != size:
                raise Invalid(f"not a {size}-byte {self.kind}")
            number = int.from_bytes(value, "big", signed=True)
        else:
            if re.fullmatch(rb"-?[0-9]+", value) is None:
                raise Invalid(f"not an {self.kind}")
            number = int(value)
            lowest, highest = _INT_BOUNDS[self.kind]
            if not lowest <= number <= highest:
                raise Invalid(f"not an {self.kind}")
        if self.low is not None and number < self.low:
            raise Invalid("below its range")
        if self.high is not None and number > self.high:
            raise Invalid("above its range")
        if self.multiple and number % self.multiple:
            raise Invalid(f"not a multiple of {self.multiple}")


class SchemaModel(FieldModel):
    """`model: json|avro` with a schema from a catalog: the kafka cache's `FieldModel` (one
    compiled schema per version, `latest` followed, registry ids fetched once), with messages
    that name where a value fails and never the value, and a registry that could not answer
    asked again by the next request rather than by a timer of its own (a binding replaced by a
    reload leaves nothing running)."""

    def __init__(self, config: ModelConfig, catalog: Catalog | None, clock: Any,
                 report: Callable[[str, str], None]) -> None:
        super().__init__(config, catalog, clock, report)
        #: `strategy: encoded`: every payload names its schema (the registry's wire format).
        self.encoded = config.subject is None and config.schema_id is None
        if self.encoded:
            self.wire_only = True
        self._failed_at: float | None = None

    def compile(self, schema: Schema) -> Codec:
        key = (schema.kind, schema.text)
        codec = self._compiled.get(key)
        if codec is None:
            if self.config.model == "avro":
                codec = _quiet(compile_avro(schema, False), "not Avro of its schema")
            else:
                codec = compile_json_quietly(schema)
            self._compiled[key] = codec
        return codec

    def _broken(self, why: str) -> None:
        self._problem = why
        self._failed_at = self.clock.seconds()
        self.report("CATALOG_SCHEMA_UNAVAILABLE", why)

    def prepare(self) -> None:
        """Ask the catalog for the schema now if it is not held (a response to check is on
        its way), unless it was asked less than `RETRY_AFTER` seconds ago."""
        if not self.wire_only and not self.ready and self._resolving is None:
            failed = self._failed_at
            if failed is None or self.clock.seconds() - failed >= RETRY_AFTER:
                self.resolve()

    def check(self, payload: bytes) -> bytes:
        if self.wire_only and (len(payload) < WIRE_HEADER or payload[0] != WIRE_MAGIC):
            raise Invalid("not in the schema registry's wire format (byte 0, then a 4-byte "
                          "schema id)")
        self.prepare()
        return super().check(payload)


def _quiet(codec: Codec, message: str) -> Codec:
    """`codec` raising `message` in place of its own (a decoder's words may quote the bytes)."""
    def check(payload: bytes) -> bytes:
        try:
            return codec(payload)
        except Invalid:
            raise Invalid(message) from None
    return check


def compile_json_quietly(schema: Schema) -> Codec:
    """A JSON Schema checker whose `Invalid` says where the document fails and which keyword
    of the schema it fails (with what the schema wants), never a value of the document."""
    validator = json_validator(schema)

    def check(payload: bytes) -> bytes:
        try:
            value = parse_json(payload)
        except Invalid:
            raise Invalid("not JSON") from None
        error = json_problem(validator, value)
        if error is not None:
            raise Invalid(_json_problem(error))
        return payload
    return check


def _json_problem(error: Any) -> str:
    where = "".join(f"[{p!r}]" if isinstance(p, int) else f".{p}"
                    for p in error.absolute_path) or "the document"
    keyword = str(error.validator)
    wanted = error.validator_value
    if keyword in ("additionalProperties", "unevaluatedProperties") and wanted is False:
        return f"{where}: has a property its schema does not allow"
    if keyword == "required":
        missing = [name for name in wanted if isinstance(error.instance, dict)
                   and name not in error.instance]
        return f"{where}: lacks required {', '.join(map(str, missing)) or 'properties'}"
    if isinstance(wanted, str | int | float | bool) or (
            isinstance(wanted, list) and all(isinstance(w, str | int | float) for w in wanted)):
        shown = str(wanted)
        if len(shown) <= 80:
            return f"{where}: fails {keyword} {shown}"
    return f"{where}: fails {keyword}"


# -- building models from the config -----------------------------------------------------------

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
        if model in _INT_BOUNDS:
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


# -- entries --------------------------------------------------------------------------------

@dataclass(frozen=True)
class ResponseType:
    """One entry of a request's `responses` (the http client checks them)."""

    statuses: frozenset[int] | None
    content_types: tuple[str, ...] | None
    headers: Mapping[str, ValueModel] = field(default_factory=dict)
    content: ValueModel | None = None

    def selects(self, status: int, content_type: str | None) -> bool:
        return (self.statuses is None or status in self.statuses) and \
            _type_listed(self.content_types, content_type)


@dataclass(frozen=True)
class RequestType:
    """One entry of `options.requests`."""

    path: str
    pattern: re.Pattern[str]
    method: str | None
    content_types: tuple[str, ...] | None
    headers: Mapping[str, ValueModel] = field(default_factory=dict)
    path_params: Mapping[str, ValueModel] = field(default_factory=dict)
    query_params: Mapping[str, ValueModel] = field(default_factory=dict)
    content: ValueModel | None = None
    responses: tuple[ResponseType, ...] = ()

    def matches(self, method: str, path: str) -> re.Match[str] | None:
        if self.method is not None and method != self.method:
            return None
        return self.pattern.match(path.partition("?")[0])

    def check_head(self, path: str, headers: Iterable[tuple[str, bytes]]) -> None:
        """Headers, path and query parameters: raises `Refused` for the first that fails, or
        `Pending`."""
        found = self.pattern.match(path.partition("?")[0])
        if found is not None:
            for name, model in self.path_params.items():
                value = found.groupdict().get(_group(name))
                if value is not None:
                    _check(model, unquote_to_bytes(value), f"path parameter {name}")
        query = path.partition("?")[2]
        if self.query_params and query:
            for pair in query.split("&"):
                name, _, value = pair.partition("=")
                wanted = self.query_params.get(unquote(name.replace("+", " ")))
                if wanted is not None:
                    _check(wanted, unquote_to_bytes(value.replace("+", " ")),
                           f"query parameter {unquote(name)}")
        if self.headers:
            for name, value in headers:
                checked = self.headers.get(name.lower())
                if checked is not None:
                    _check(checked, value, f"header {name.lower()}")

    def check_content(self, body: bytes) -> None:
        """The body (none: nothing to check): raises `Refused` or `Pending`."""
        if self.content is not None and body:
            _check(self.content, body, "content")

    def response(self, status: int, content_type: str | None) -> ResponseType | None:
        """The last entry of `responses` that selects this answer (Zilla takes the last)."""
        found = None
        for response in self.responses:
            if response.selects(status, content_type):
                found = response
        return found


class Refused(Exception):
    """A request (or response) its entry refuses: `status` and the reason (safe to show)."""

    def __init__(self, status: int, reason: str, retry_after: float | None = None) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.retry_after = retry_after


def _check(model: ValueModel, value: bytes, what: str) -> None:
    try:
        model.check(value)
    except Invalid as e:
        raise Refused(400, f"{what}: {e}") from None


def _media_type(content_type: str | None) -> str | None:
    if content_type is None:
        return None
    return content_type.partition(";")[0].strip().lower() or None


def _type_listed(listed: tuple[str, ...] | None, content_type: str | None) -> bool:
    """Zilla's rule: no list, or no `Content-Type`, selects; else the type must be listed
    (compared without its parameters, `; charset=utf-8`, and case)."""
    media = _media_type(content_type)
    return listed is None or media is None or media in listed


class Requests:
    """The entries of one binding's `options.requests`, in order."""

    def __init__(self, entries: Sequence[RequestType]) -> None:
        self.entries = tuple(entries)

    def select(self, method: str, path: str, content_type: str | None) -> RequestType | None:
        """The first entry for this request; None when no entry names its path and method.
        Raises `Refused` (`415`) when some do, and none lists its content type."""
        named = [e for e in self.entries if e.matches(method, path) is not None]
        for entry in named:
            if _type_listed(entry.content_types, content_type):
                return entry
        if named:
            listed = sorted({t for e in named for t in e.content_types or ()})
            raise Refused(415, f"content type not accepted here; expected one of "
                               f"{', '.join(listed)}")
        return None

    def reads_body(self, method: str, path: str, content_type: str | None) -> bool:
        """Whether a request with this head has a body its entry checks (so the body must be
        read before the request goes on, whatever its exit does with bodies)."""
        try:
            entry = self.select(method, path, content_type)
        except Refused:
            return False  # refused from its head: its body is not needed
        return entry is not None and entry.content is not None


def compile_path(template: str) -> re.Pattern[str]:
    """Zilla's path template: `{name}` takes one or more characters (lazily, `/` too), a
    trailing `/` is optional; the query string is matched apart."""
    parts = re.split(r"\{([A-Za-z0-9_-]+)\}", template)
    out = []
    for i, part in enumerate(parts):
        if i % 2:
            out.append(f"(?P<{_group(part)}>.+?)")
        else:
            out.append(re.escape(part))
    return re.compile("^" + "".join(out) + "/?$")


def _group(name: str) -> str:
    """A param name as a regex group name (which allows no `-`): its bytes in hex."""
    return "p" + name.encode().hex()


def build_requests(entries: Sequence[Mapping[str, Any]], builder: ModelBuilder,
                   base: tuple[str | int, ...], responses: bool) -> Requests:
    """The `Requests` of `options.requests` at `base` (the config path of the list);
    `responses` when the binding checks them (the client)."""
    built = []
    for i, spec in enumerate(entries):
        at = (*base, i)
        params = spec.get("params") or {}
        path_params = _models(builder, params.get("path"), (*at, "params", "path"))
        template = str(spec["path"])
        names = set(re.findall(r"\{([A-Za-z0-9_-]+)\}", template))
        for name in params.get("path") or {}:
            if name not in names:
                builder.issues.append(builder.issue(
                    (*at, "params", "path", name),
                    f"expected a parameter of the path {template}: it has "
                    f"{', '.join(sorted(names)) or 'none'}"))
        content: ValueModel | None = builder.build(spec["content"], (*at, "content")) \
            if spec.get("content") is not None else None
        answers: list[ResponseType] = []
        for j, answer in enumerate(spec.get("responses") or () if responses else ()):
            status = answer.get("status")
            statuses = frozenset([status] if isinstance(status, int) else status) \
                if status is not None else None
            answers.append(ResponseType(
                statuses, _types(answer.get("content-type")),
                _models(builder, answer.get("headers"), (*at, "responses", j, "headers"),
                        lower=True),
                builder.build(answer["content"], (*at, "responses", j, "content"))
                if answer.get("content") is not None else None))
        built.append(RequestType(
            template, compile_path(template),
            str(spec["method"]).upper() if spec.get("method") else None,
            _types(spec.get("content-type")),
            _models(builder, spec.get("headers"), (*at, "headers"), lower=True),
            path_params,
            _models(builder, params.get("query"), (*at, "params", "query")),
            content, tuple(answers)))
    return Requests(built)


def _types(listed: Sequence[str] | None) -> tuple[str, ...] | None:
    if listed is None:
        return None
    return tuple(t.partition(";")[0].strip().lower() for t in listed)


def _models(builder: ModelBuilder, specs: Mapping[str, Any] | None,
            at: tuple[str | int, ...], lower: bool = False) -> dict[str, ValueModel]:
    built = {}
    for name, spec in (specs or {}).items():
        model = builder.build(spec, (*at, name))
        if model is not None:
            built[str(name).lower() if lower else str(name)] = model
    return built


# -- responses (the http client) ---------------------------------------------------------------

#: The most body bytes of one response held to be checked whole; a bigger one is cut.
RESPONSE_BODY_BYTES = 4 << 20


class ResponseValidation:
    """The http client's check of upstream responses (`options.requests[].responses`): a
    response its entry selects is held until its body is whole, then checked; one that fails is
    cut after its head. The relay asks `wants` when a response head arrives and `check` once its
    body has (both on the reactor, neither waiting: a schema the catalog has not given yet is
    asked for at `wants` and, still missing at `check`, refuses the response)."""

    def __init__(self, requests: Requests, max_body: int = RESPONSE_BODY_BYTES) -> None:
        self.requests = requests
        self._max_body = max_body

    @property
    def max_body(self) -> int:
        return self._max_body

    def _response(self, method: str, path: str, status: int,
                  headers: Iterable[tuple[str, str]]) -> ResponseType | None:
        content_type = next((v for n, v in headers if n.lower() == "content-type"), None)
        for entry in self.requests.entries:
            if entry.responses and entry.matches(method, path) is not None:
                return entry.response(status, content_type)
        return None

    def wants(self, method: str, path: str, status: int,
              headers: tuple[tuple[str, str], ...]) -> bool:
        response = self._response(method, path, status, headers)
        if response is None:
            return False
        for model in (response.content, *response.headers.values()):
            if isinstance(model, SchemaModel):
                model.prepare()
        return True

    def check(self, answer: UpstreamAnswer) -> Abort | None:
        response = self._response(answer.method, answer.path, answer.status, answer.headers)
        if response is None:
            return None
        try:
            for name, value in answer.headers:
                model = response.headers.get(name.lower())
                if model is not None:
                    _check(model, value.encode("latin-1"), f"header {name.lower()}")
        except Refused as refused:
            return Abort(refused.reason, instead=http.SERVICE_UNAVAILABLE)
        except Pending as pending:
            return Abort(f"the schema is not available yet ({pending})",
                         instead=http.SERVICE_UNAVAILABLE)
        try:
            if response.content is not None and answer.body:
                _check(response.content, answer.body, "content")
        except Refused as refused:
            return Abort(refused.reason)
        except Pending as pending:
            return Abort(f"the schema is not available yet ({pending})")
        return None


# -- waiting for a catalog ----------------------------------------------------------------------

def settle(check: Callable[[], None], clock: Any,
           wait: float = WAIT_SECONDS) -> Refused | None | Deferred[Refused | None]:
    """Run `check`: None when it passes, the `Refused` it raises, or - when a schema is not
    held yet (`Pending`) - a Deferred firing with either once the catalog answered (tried
    again each time it does), or with a `503` after `wait` seconds."""
    try:
        check()
        return None
    except Refused as refused:
        return refused
    except Pending as pending:
        first = pending
    deadline = clock.seconds() + wait
    result: Deferred[Refused | None] = Deferred()

    def unavailable(why: str) -> Refused:
        return Refused(503, f"the schema is not available yet ({why})", RETRY_AFTER)

    def attempt(pending: Pending) -> None:
        left = deadline - clock.seconds()
        if left <= 0:
            result.callback(unavailable(str(pending)))
            return
        woken: Deferred[None] = Deferred()

        def wake(_: object = None) -> None:
            if not woken.called:
                woken.callback(None)
        timer = clock.callLater(left, wake)
        pending.ready.addBoth(wake)

        def again(_: object) -> None:
            if timer.active():
                timer.cancel()
            try:
                check()
            except Refused as refused:
                result.callback(refused)
                return
            except Pending as later:
                if clock.seconds() >= deadline:
                    result.callback(unavailable(str(later)))
                else:
                    attempt(later)
                return
            result.callback(None)
        woken.addCallback(again)

    attempt(first)
    if result.called:  # the catalog answered at once (a registry id fetched before, say)
        now: list[Refused | None] = []
        result.addCallback(now.append)
        return now[0]
    return result


def refusal_body(refused: Refused) -> bytes:
    """The text of a refusal's body: what failed and why (never a value of the request)."""
    return f"{refused.reason}\n".encode()


def retry_after(refused: Refused) -> bytes:
    return str(math.ceil(refused.retry_after or RETRY_AFTER)).encode()



# -- config schema ------------------------------------------------------------------------------

_NAME = "^[a-zA-Z]+[a-zA-Z0-9._-]*$"

MODEL_SCHEMA: Mapping[str, Any] = {
    "type": ["string", "object"],
    "x-expected": "a model: string, int32 or int64, or {model, catalog, ...}",
    "if": {"type": "string"},
    "then": {"enum": list(SCALAR_MODELS)},
    "else": {"type": "object", "additionalProperties": False, "required": ["model"],
         "properties": {
             "model": {"enum": [*SCALAR_MODELS, *SCHEMA_MODELS],
                       "description": "`string` (text), `int32`/`int64` (integers), `json` (a "
                                      "JSON document valid against a JSON Schema) or `avro` "
                                      "(Avro binary: the registry's wire format with a "
                                      "`schema-registry` catalog, plain with a local one)."},
             "catalog": {
                 "type": "object", "minProperties": 1, "maxProperties": 1,
                 "description": "For `json` and `avro`: the catalog and the one schema in it: "
                                "`{catalog: [{subject: S, version: latest}]}`, `id: N` (a "
                                "registry id), or `strategy: encoded` (each payload names its "
                                "schema: the registry's wire format).",
                 "additionalProperties": {
                     "type": "array", "minItems": 1, "maxItems": 1,
                     "x-expected": "a list of exactly one schema (ssekd uses one per model)",
                     "items": {
                         "type": "object", "additionalProperties": False, "minProperties": 1,
                         "properties": {
                             "subject": {"type": "string", "minLength": 1},
                             "id": {"type": "integer", "minimum": 0},
                             "strategy": {"const": "encoded"},
                             "version": {"anyOf": [{"const": "latest"},
                                                   {"type": "integer", "minimum": 1}],
                                         "x-expected": "latest or a version number"}}}}},
             "encoding": {"enum": ["utf_8", "utf_16"],
                          "description": "For `string`: the text's encoding (`utf_8`)."},
             "minLength": {"type": "integer", "minimum": 1,
                           "description": "For `string`: fewest characters."},
             "maxLength": {"type": "integer", "minimum": 1,
                           "description": "For `string`: most characters."},
             "pattern": {"type": "string",
                         "description": "For `string`: a regular expression the whole text "
                                        "must match."},
             "format": {"enum": ["text", "binary"],
                        "description": "For `int32`/`int64`: decimal `text` (the default) or "
                                       "big-endian `binary`."},
             "range": {"type": "string", "pattern": r"^[(\[]\s*(-?\d+)?\s*,\s*(-?\d+)?\s*[)\]]$",
                       "x-expected": "a range such as [1,10) or (,0]",
                       "description": "For `int32`/`int64`: the interval the value is in."},
             "multiple": {"type": "integer", "minimum": 1,
                          "description": "For `int32`/`int64`: what the value is a multiple "
                                         "of."}}},
}

_MODELS: Mapping[str, Any] = {"type": "object", "propertyNames": {"pattern": _NAME},
                              "additionalProperties": MODEL_SCHEMA}
_TYPES: Mapping[str, Any] = {"type": "array", "minItems": 1, "items": {"type": "string"}}


def _entry(responses: bool) -> dict[str, Any]:
    checked = "responses" if responses else "content"
    properties: dict[str, Any] = {
        "path": {"type": "string", "pattern": "^/", "x-expected": "a path starting with /",
                 "description": "The request's path; `{name}` is a parameter (one or more "
                                "characters). The query string is left out."},
        "method": {"enum": list(METHODS), "x-ssekd-default": "any",
                   "description": "The request's method."},
        "content-type": {**_TYPES, "x-ssekd-default": "any",
                         "description": "The content types such requests may have (compared "
                                        "without parameters). A request of the path and method "
                                        "with another is `415`; one without any is checked."},
        "headers": {**_MODELS, "description": "Header name to the model of its value."},
        "params": {"type": "object", "additionalProperties": False,
                   "description": "The models of the request's parameters.", "properties": {
            "path": {**_MODELS, "description": "Path parameter to model (URL-decoded)."},
            "query": {**_MODELS, "description": "Query parameter to model (URL-decoded; "
                                                "each occurrence)."}}},
        "content": {**MODEL_SCHEMA, "description": "The model of the body (a request "
                                                   "without a body has none to check)."},
        "responses": {"type": "array", "items": {
            "type": "object", "additionalProperties": False,
            "anyOf": [{"required": ["content"]}, {"required": ["headers"]}],
            "properties": {
                "status": {"anyOf": [{"type": "integer"},
                                     {"type": "array", "items": {"type": "integer"}}],
                           "x-expected": "a status or a list of them",
                           "description": "The statuses this entry checks (any when left "
                                          "out)."},
                "content-type": {**_TYPES, "description": "The content types it checks."},
                "headers": {**_MODELS, "description": "Header name to model."},
                "content": {**MODEL_SCHEMA, "description": "The model of the body."}}},
            "description": "What the upstream's answers must be (the last entry that "
                           "selects an answer by status and content type checks it); "
                           "checked by the http client, not by the server."
                           if responses else "Checked by an http client; not by the server."},
    }
    return {"type": "object", "additionalProperties": False, "required": ["path"],
            "minProperties": 2, "properties": properties,
            "x-expected": f"a path and what to check (headers, params, {checked})"}


_MODEL_WORDS = ("A model is `string`, `int32` or `int64` (bare, or `{model: string, "
                "minLength, maxLength, pattern, encoding}`, `{model: int32|int64, range: "
                "'[1,10)', multiple, format: text|binary}`), or `{model: json|avro, catalog: "
                "{name: [{subject: S, version: latest} | {id: N} | {strategy: encoded}]}}`.")

REQUESTS_SCHEMA: Mapping[str, Any] = {
    "type": "array", "items": _entry(False),
    "description": "Requests to check before the route's exit sees them: the first entry "
                   "whose path, method and content type a request has checks its headers, "
                   "path and query parameters and body (read whole first, within "
                   "`limits.body-bytes`). A failure is `400` saying which part failed, a "
                   "content type the path and method do not list `415`, a schema its "
                   "catalog cannot give yet `503` with `Retry-After` (after up to "
                   f"{WAIT_SECONDS:g} s). {_MODEL_WORDS}",
}

CLIENT_REQUESTS_SCHEMA: Mapping[str, Any] = {
    "type": "array", "items": _entry(True),
    "description": "Responses to check: for a request its entry names (path, method), the "
                   "`responses` entry selected by the answer's status and content type. "
                   "Headers that fail: `503` with `Retry-After: 0` in place of the answer; "
                   "content that fails: the answer is cut after its head (the client sees it "
                   "end early), as Zilla does. " + _MODEL_WORDS,
}


def catalogs_named(requests: Sequence[Any] | None) -> dict[str, tuple[str | int, ...]]:
    """catalog name -> where (below `options`) `requests` first names it, for the loader's
    check that it exists and for reloads."""
    found: dict[str, tuple[str | int, ...]] = {}

    def walk(value: Any, at: tuple[str | int, ...]) -> None:
        if isinstance(value, Mapping):
            catalog = value.get("catalog")
            if "model" in value and isinstance(catalog, Mapping):
                for name in catalog:
                    found.setdefault(str(name), (*at, "catalog", str(name)))
                return
            for key, item in value.items():
                walk(item, (*at, str(key)))
        elif isinstance(value, list):
            for i, item in enumerate(value):
                walk(item, (*at, i))

    walk(list(requests or ()), ("requests",))
    return found


def build_for(ctx: Any, binding: Any, responses: bool) -> Requests | None:
    """The binding's `options.requests` (None without); config errors raised together."""
    from ssekd.config import ConfigError
    entries = binding.options.get("requests")
    if not entries:
        return None

    def report(event: str, detail: str) -> None:
        ctx.events.emit(binding.name, event, detail)

    builder = ModelBuilder(ctx.catalogs, ctx.reactor, report, ctx.issue)
    built = build_requests(entries, builder,
                           ("bindings", binding.name, "options", "requests"), responses)
    if builder.issues:
        raise ConfigError(builder.issues)
    return built
