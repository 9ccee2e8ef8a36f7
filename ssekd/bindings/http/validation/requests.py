"""The entries of `options.requests`: which entry a request (or an upstream's answer) is checked
by, and the checks of its head and body.

An entry names a request by its path template (`/items/{id}`: a `{param}` takes one or more
characters, `/` included, as Zilla's does) and method, and lists what such a request must be:
its headers, its path and query parameters and its content, each by a model (`values`). On the
client, the entry's `responses` say what the upstream's answers must be, by status and content
type.

What is checked, as Zilla checks it: only what is there. A header or query parameter the request
leaves out, or a request without a body, has nothing to check; a query parameter given twice is
checked twice. Zilla picks the entry by path, method and content type, so a request whose
`Content-Type` no entry of its path and method lists is not checked at all there; ssekd refuses
it (`415`): otherwise any body gets past a model by naming another type. (Zilla's server also
ignores the method; ssekd does not.)
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, unquote_to_bytes

from ssekd.bindings.http.validation.builder import ModelBuilder
from ssekd.bindings.http.validation.values import ValueModel
from ssekd.catalogs.models import Invalid


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
                    check_value(model, unquote_to_bytes(value), f"path parameter {name}")
        query = path.partition("?")[2]
        if self.query_params and query:
            for pair in query.split("&"):
                name, _, value = pair.partition("=")
                wanted = self.query_params.get(unquote(name.replace("+", " ")))
                if wanted is not None:
                    check_value(wanted, unquote_to_bytes(value.replace("+", " ")),
                           f"query parameter {unquote(name)}")
        if self.headers:
            for name, value in headers:
                checked = self.headers.get(name.lower())
                if checked is not None:
                    check_value(checked, value, f"header {name.lower()}")

    def check_content(self, body: bytes) -> None:
        """The body (none: nothing to check): raises `Refused` or `Pending`."""
        if self.content is not None and body:
            check_value(self.content, body, "content")

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


def check_value(model: ValueModel, value: bytes, what: str) -> None:
    """`model`'s check of `value`, its failure a `400` naming `what` (never the value)."""
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
