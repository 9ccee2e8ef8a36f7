"""http-filesystem proxy (SPEC §5): maps a request path onto a filesystem server's path."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from twisted.web import http
from twisted.web.server import Request

from ssekd.bindings import BindingType, HttpContext, KindSpec
from ssekd.bindings._schemas import PATH_WHEN
from ssekd.config.model import Binding
from ssekd.engine import BuildContext

_PARAM = re.compile(r"\{([a-zA-Z_][a-zA-Z0-9_]*)\}")
_REFERENCE = re.compile(r"\$\{params\.([a-zA-Z_][a-zA-Z0-9_]*)\}")


class FileServing(Protocol):
    def serve(self, request: Request, path: str) -> bytes | int: ...


def compile_path(pattern: str) -> re.Pattern[str]:
    """`/{path}` -> a regex. The last parameter takes the rest of the path, slashes included
    (`/{path}` serves `/css/app.css`); earlier ones take one segment."""
    parts, pos = [], 0
    matches = list(_PARAM.finditer(pattern))
    for i, m in enumerate(matches):
        parts.append(re.escape(pattern[pos:m.start()]))
        rest = i == len(matches) - 1 and m.end() == len(pattern)
        parts.append(f"(?P<{m.group(1)}>{'.*' if rest else '[^/]*'})")
        pos = m.end()
    parts.append(re.escape(pattern[pos:]))
    return re.compile("".join(parts), re.DOTALL)


def substitute(template: str, params: Mapping[str, str]) -> str:
    return _REFERENCE.sub(lambda m: params.get(m.group(1), ""), template)


@dataclass(frozen=True)
class FilesRoute:
    patterns: tuple[re.Pattern[str], ...]
    path: str  # the `with.path` template
    exit: FileServing


class HttpFilesystemProxy:
    """Matches the request path (query ignored) and asks the filesystem for the mapped path."""

    def __init__(self, name: str, routes: list[FilesRoute]) -> None:
        self.name = name
        self.routes = routes

    def render(self, request: Request, ctx: HttpContext) -> bytes | int:
        path = request.path.decode("latin-1")
        for route in self.routes:
            for pattern in route.patterns:
                m = pattern.fullmatch(path)
                if m is not None:
                    params = {k: v for k, v in m.groupdict().items() if v is not None}
                    return route.exit.serve(request, substitute(route.path, params))
        request.setResponseCode(http.NOT_FOUND)
        return b""


def _build(ctx: BuildContext, binding: Binding) -> HttpFilesystemProxy:
    routes = []
    for route in binding.routes:
        assert route.exit is not None
        exit_: Any = ctx.exit(route.exit)
        template = str((route.with_ or {}).get("path", "${params.path}"))
        patterns = tuple(compile_path(str(w["path"])) for w in route.when) or \
            (compile_path("/{path}"),)
        routes.append(FilesRoute(patterns, template, exit_))
    if binding.exit:
        routes.append(FilesRoute((compile_path("/{path}"),), "${params.path}",
                                 ctx.exit(binding.exit)))  # type: ignore[arg-type]
    return HttpFilesystemProxy(binding.name, routes)


BINDING = BindingType("http-filesystem", {
    "proxy": KindSpec(
        role="http", build=_build, exit="required", exit_roles=("files",),
        options={"type": "object"},
        when=PATH_WHEN,
        with_={"type": "object", "additionalProperties": False,
               "properties": {"path": {"type": "string"}}},
    ),
})
