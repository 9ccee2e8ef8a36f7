"""http-filesystem proxy (docs/config-reference.md): maps a request path onto a filesystem server's path.

`with.path` may use `${params.name}` and `${guarded['guard'].identity}` (see `ssekd.patterns`); a
request that lacks a value its route refers to is a 404, like a path that no route matches.
"""

from __future__ import annotations

from dataclasses import dataclass

from twisted.web import http
from twisted.web.server import Request

from ssekd.bindings._schemas import PATH_WHEN
from ssekd.bindings.filesystem import FileServing
from ssekd.bindings.http.roles import HttpBinding, HttpContext
from ssekd.config.errors import ConfigError
from ssekd.config.model import Binding
from ssekd.patterns import Pattern, Unresolvable, reference_problems, substitute
from ssekd.spi.binding import BindingType, BuildContext, Exit, KindSpec

#: Without routes, or after them, a request path maps to the same path below the root.
DEFAULT_WHEN = "/{path}"
DEFAULT_PATH = "${params.path}"


@dataclass(frozen=True)
class FilesRoute:
    patterns: tuple[Pattern, ...]
    path: str  # the `with.path` template
    exit: FileServing


class HttpFilesystemProxy:
    """Matches the request path (query ignored) and asks the filesystem for the mapped path."""

    #: Responses are whole files, never held open (see `api.HttpBinding.max_idle`).
    max_idle: float | None = None
    #: GET and HEAD only: a request body is never read (see `api.HttpBinding.takes_body`).
    takes_body = False

    def __init__(self, name: str, routes: list[FilesRoute]) -> None:
        self.name = name
        self.routes = routes

    def render(self, request: Request, ctx: HttpContext) -> bytes | int:
        path = request.path.decode("latin-1")
        for route in self.routes:
            for pattern in route.patterns:
                params = pattern.match(path)
                if params is None:
                    continue
                try:
                    target = substitute(route.path, params, ctx.identities())
                except Unresolvable:
                    return _not_found(request)  # the first matching route decides
                return route.exit.serve(request, target)
        return _not_found(request)


def _not_found(request: Request) -> bytes:
    request.setResponseCode(http.NOT_FOUND)
    return b""


def _build(ctx: BuildContext, binding: Binding) -> HttpFilesystemProxy:
    routes = []
    for i, route in enumerate(binding.routes):
        assert route.exit is not None
        template = str((route.with_ or {}).get("path", DEFAULT_PATH))
        patterns = tuple(Pattern.compile(str(w["path"]), rest=True) for w in route.when) or \
            (Pattern.compile(DEFAULT_WHEN, rest=True),)
        problems = reference_problems([template], patterns, ctx.config.guards)
        if problems:
            raise ConfigError([ctx.issue(("bindings", binding.name, "routes", i, "with", "path"),
                                         problem) for problem in problems])
        routes.append(FilesRoute(patterns, template, ctx.exit(route.exit, FileServing)))
    if binding.exit:
        routes.append(FilesRoute((Pattern.compile(DEFAULT_WHEN, rest=True),), DEFAULT_PATH,
                                 ctx.exit(binding.exit, FileServing)))
    return HttpFilesystemProxy(binding.name, routes)


BINDING = BindingType("http-filesystem", {
    "proxy": KindSpec(
        role=HttpBinding, build=_build, exit=Exit.REQUIRED, exit_roles=(FileServing,),
        options={"type": "object", "additionalProperties": False,
                 "description": "Maps a request path to a file path for its exit (a filesystem "
                                "server). A `{name}` that ends a `when.path` takes the rest of the "
                                "path, slashes included. Without routes, or when none matches, "
                                "`exit` gets the request path as it is; with neither, `404`. It "
                                "takes no options."},
        when=PATH_WHEN,
        with_={"type": "object", "additionalProperties": False,
               "properties": {"path": {"type": "string", "default": DEFAULT_PATH,
                                       "description": "The file path below the filesystem's "
                                                      "`location`; may use `${params.name}`."}}},
    ),
})
