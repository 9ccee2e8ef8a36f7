"""An OpenAPI 3 document read through a catalog: its servers and its operations (a path and a
method each) with their parameters, request body and responses, `$ref`s followed, and the file
and line of each part, so that a problem in a spec is reported in the spec.

The handling of the text (local `$ref`s, lines, messages at `file:line`) is the AsyncAPI
reader's (`ssekd.bindings.asyncapi.spec.Spec`): it knows nothing of AsyncAPI beyond its views,
so an OpenAPI spec is held in one and read here through views of its own. Only what composing
bindings needs is read; a spec may say more (info, examples, links) and that is left alone.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ssekd.bindings.asyncapi.spec import Spec
from ssekd.bindings.specs import reading
from ssekd.config.errors import ConfigError, ConfigIssue
from ssekd.spi.compose import ComposeContext

Path_ = tuple[str | int, ...]

#: The methods a path item may have operations for (OpenAPI 3.0 and 3.1).
METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
#: A `{name}` part of a path template.
TEMPLATE = re.compile(r"\{([^{}/]*)\}")
#: What a path parameter may be called to become a capture of the http binding (`{name}`).
CAPTURE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: The JSON Schema dialect of an OpenAPI 3.1 schema (3.0's is draft-04-like: see `json_schema`).
DRAFT_2020_12 = "https://json-schema.org/draft/2020-12/schema"
DRAFT_07 = "http://json-schema.org/draft-07/schema#"
_JSON = re.compile(r"^application/(?:[^;]+\+)?json(?:;.*)?$", re.IGNORECASE)


def is_json(content_type: str) -> bool:
    """Whether a media type is JSON (`application/json`, `application/<x>+json`), as Zilla
    decides which request and response contents it models as JSON."""
    return _JSON.match(content_type.strip()) is not None


def json_schema(schema: Any, openapi: str) -> Any:
    """An OpenAPI schema object as a JSON Schema a validator reads, with its `$schema`: 3.1's
    is JSON Schema 2020-12 as it is; 3.0's is a dialect of its own, whose `nullable: true`
    becomes a `null` alternative and whose boolean `exclusiveMinimum`/`exclusiveMaximum`
    become draft-07's numbers (draft-07 would refuse the schema otherwise)."""
    if openapi.startswith("3.1"):
        return {"$schema": DRAFT_2020_12, **schema} if isinstance(schema, dict) else schema
    converted = _from_3_0(schema)
    return {"$schema": DRAFT_07, **converted} if isinstance(converted, dict) else converted


def _from_3_0(schema: Any) -> Any:
    if isinstance(schema, list):
        return [_from_3_0(v) for v in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _from_3_0(v) for k, v in schema.items() if k != "nullable"}
    for bound, limit in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if isinstance(out.get(bound), bool):
            if out.pop(bound) and limit in out:
                out[bound] = out.pop(limit)
    if schema.get("nullable") is True:
        out = {"anyOf": [out, {"type": "null"}]}
    return out


@dataclass(frozen=True)
class Parameter:
    name: str
    where: str  # path, query, header, cookie
    required: bool
    schema: Any  # dereferenced, or None
    path: Path_


@dataclass(frozen=True)
class Content:
    """One media type of a request body or a response, with its schema (dereferenced)."""

    media_type: str
    schema: Any
    path: Path_


@dataclass(frozen=True)
class Response:
    status: str  # "200", "2XX" or "default"
    content: tuple[Content, ...]
    headers: Mapping[str, Any]
    path: Path_


@dataclass(frozen=True)
class Operation:
    """One operation: `method` of `path` (as the spec writes it, `{name}` templates kept)."""

    key: str  # the operationId, else "<METHOD> <path>"
    method: str  # upper case
    path: str
    spec_path: Path_  # where it is: ("paths", <path>, <method>)
    data: Mapping[str, Any]
    parameters: tuple[Parameter, ...]
    body: tuple[Content, ...]
    body_required: bool
    responses: tuple[Response, ...]
    tags: frozenset[str]
    #: Security requirements (`[{scheme: [scopes]}]`, alternatives), the operation's or the
    #: document's, and where they are.
    security: tuple[Mapping[str, Any], ...]
    security_path: Path_

    @property
    def templates(self) -> list[str]:
        return TEMPLATE.findall(self.path)


@dataclass(frozen=True)
class Server:
    """One entry of the spec's `servers`: a URL, maybe with `{variables}`."""

    url: str
    path: Path_
    defaults: Mapping[str, str]
    choices: Mapping[str, tuple[str, ...]]

    def resolved(self) -> str | None:
        """The URL with the variables' defaults put in; None when one has no default."""
        url = self.url
        for name in TEMPLATE.findall(self.url):
            if name not in self.defaults:
                return None
            url = url.replace(f"{{{name}}}", self.defaults[name])
        return url


class OpenapiSpec:
    """One OpenAPI spec of a binding's options, by its label."""

    def __init__(self, text: Spec) -> None:
        self.text = text

    @property
    def label(self) -> str:
        return self.text.label

    @property
    def data(self) -> Mapping[str, Any]:
        return self.text.data

    def issue(self, path: Path_, message: str) -> ConfigIssue:
        return self.text.issue(path, message)

    def servers(self) -> list[Server]:
        raw = self.data.get("servers") or []
        if not isinstance(raw, list):
            raise ConfigError([self.issue(("servers",), "expected servers (a list)")])
        found = []
        for i, value in enumerate(raw):
            server = self.text.mapping(value, ("servers", i), "a server")
            url = server.get("url")
            if not isinstance(url, str):
                raise ConfigError([self.issue(("servers", i), "a server needs a url")])
            defaults: dict[str, str] = {}
            choices: dict[str, tuple[str, ...]] = {}
            variables = server.get("variables") or {}
            for name, variable in (variables.items() if isinstance(variables, Mapping) else ()):
                var = self.text.mapping(variable, ("servers", i, "variables", name),
                                        f"server variable {name!r}")
                if "default" in var:
                    defaults[str(name)] = str(var["default"])
                if isinstance(var.get("enum"), list):
                    choices[str(name)] = tuple(str(v) for v in var["enum"])
            found.append(Server(url, ("servers", i), defaults, choices))
        return found

    def operations(self) -> dict[str, Operation]:
        """Every operation, by its key, in the spec's order; two with the same operationId are
        an error (routes and the Kafka side name operations by it)."""
        paths = self.data.get("paths") or {}
        if not isinstance(paths, Mapping):
            raise ConfigError([self.issue(("paths",), "expected paths (a mapping)")])
        issues: list[ConfigIssue] = []
        found: dict[str, Operation] = {}
        for template, item in paths.items():
            if not isinstance(template, str) or not template.startswith("/"):
                issues.append(self.issue(("paths", template), f"path {template!r}: expected a "
                                                              f"path starting with /"))
                continue
            try:
                item_data = self.text.mapping(item, ("paths", template), f"path {template!r}")
                shared = self._parameters(item_data.get("parameters"),
                                          ("paths", template, "parameters"))
                for method in METHODS:
                    if method not in item_data:
                        continue
                    op = self._operation(template, method, item_data[method], shared)
                    if op.key in found:
                        other = found[op.key]
                        issues.append(self.issue(op.spec_path + ("operationId",),
                                                 f"operationId {op.key!r} is also "
                                                 f"{other.method} {other.path} "
                                                 f"({self.text.at(other.spec_path)}); "
                                                 f"expected each operation to have its own"))
                        continue
                    found[op.key] = op
            except ConfigError as e:
                issues.extend(e.issues)
        if issues:
            raise ConfigError(issues)
        return found

    def _parameters(self, raw: Any, path: Path_) -> dict[tuple[str, str], Parameter]:
        out: dict[tuple[str, str], Parameter] = {}
        if raw is None:
            return out
        if not isinstance(raw, list):
            raise ConfigError([self.issue(path, "expected parameters (a list)")])
        for i, item in enumerate(raw):
            value, at = self.text.resolve(item, path + (i,))
            if not isinstance(value, Mapping) or not isinstance(value.get("name"), str) or \
                    value.get("in") not in ("path", "query", "header", "cookie"):
                raise ConfigError([self.issue(at, "expected a parameter with a name and in: "
                                                  "path, query, header or cookie")])
            schema = value.get("schema")
            schema = None if schema is None else self.text.deref(schema, at + ("schema",))
            where = str(value["in"])
            out[(where, str(value["name"]))] = Parameter(
                str(value["name"]), where, bool(value.get("required", where == "path")),
                schema, at)
        return out

    def _operation(self, template: str, method: str, value: Any,
                   shared: Mapping[tuple[str, str], Parameter]) -> Operation:
        at: Path_ = ("paths", template, method)
        op = self.text.mapping(value, at, f"operation {method.upper()} {template}")
        key = op.get("operationId")
        key = str(key) if isinstance(key, str) and key else f"{method.upper()} {template}"
        parameters = {**shared, **self._parameters(op.get("parameters"), at + ("parameters",))}
        for name in TEMPLATE.findall(template):
            if not CAPTURE.fullmatch(name):
                raise ConfigError([self.issue(("paths", template),
                                              f"parameter {{{name}}} of {template!r}: a path "
                                              f"part is captured by a name of letters, digits "
                                              f"and _")])
        body: tuple[Content, ...] = ()
        required = False
        if op.get("requestBody") is not None:
            request, request_at = self.text.resolve(op["requestBody"], at + ("requestBody",))
            if not isinstance(request, Mapping):
                raise ConfigError([self.issue(request_at, "expected a requestBody (a mapping)")])
            body = self._content(request.get("content"), request_at + ("content",))
            required = bool(request.get("required", False))
        responses = []
        raw = op.get("responses") or {}
        for status, response in (raw.items() if isinstance(raw, Mapping) else ()):
            answer, answer_at = self.text.resolve(response, at + ("responses", status))
            if not isinstance(answer, Mapping):
                continue
            headers = answer.get("headers") or {}
            responses.append(Response(str(status),
                                      self._content(answer.get("content"),
                                                    answer_at + ("content",)),
                                      headers if isinstance(headers, Mapping) else {},
                                      answer_at))
        tags = frozenset(str(t) for t in op.get("tags") or () if isinstance(t, str | int))
        if "security" in op:
            security, security_at = op.get("security") or [], at + ("security",)
        else:
            security, security_at = self.data.get("security") or [], ("security",)
        if not isinstance(security, list) or \
                not all(isinstance(s, Mapping) for s in security):
            raise ConfigError([self.issue(security_at, "expected security as a list of "
                                                       "{scheme: [scopes]}")])
        return Operation(key, method.upper(), template, at, op, tuple(parameters.values()),
                         body, required, tuple(responses), tags, tuple(security), security_at)

    def _content(self, raw: Any, path: Path_) -> tuple[Content, ...]:
        if raw is None:
            return ()
        if not isinstance(raw, Mapping):
            raise ConfigError([self.issue(path, "expected content (media type -> schema)")])
        out = []
        for media_type, entry in raw.items():
            typed = self.text.mapping(entry, path + (media_type,), f"content {media_type!r}")
            schema = typed.get("schema")
            out.append(Content(str(media_type),
                               None if schema is None else
                               self.text.deref(schema, path + (media_type, "schema")),
                               path + (media_type,)))
        return tuple(out)


def read_specs(ctx: ComposeContext, entries: Mapping[str, Any], base: Path_,
               family: str) -> dict[str, Spec]:
    """The specs of `entries` (`<label>: {catalog: ...}` at `base` of the config), read through
    their catalogs and parsed; each must be a document of `family` 3 (`openapi` or
    `asyncapi`)."""
    return reading.read_specs(ctx, entries, base, family, Spec)
