"""The URLs an openapi binding serves or calls: those `options.specs.<label>.servers` names, as
given (Zilla takes them as they are: the client's upstream is rarely a server the spec lists),
else the spec's own `servers` with their variables' defaults."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from ssekd.bindings.asyncapi.spec import DEFAULT_PORTS
from ssekd.bindings.openapi.spec import OpenapiSpec
from ssekd.config.errors import ConfigError, ConfigIssue, format_path
from ssekd.config.model import Binding
from ssekd.spi.compose import ComposeContext, Where

Path_ = tuple[str | int, ...]


@dataclass(frozen=True)
class BaseUrl:
    """One URL: where to listen or connect, and the path the spec's paths go under."""

    scheme: str  # http or https
    host: str
    port: int
    pathname: str  # "" or "/v1" (no trailing /)
    #: Where it is said: the config's `servers[i]`, or the spec's `servers[i]`.
    where: Where

    @property
    def secure(self) -> bool:
        return self.scheme == "https"

    def request_path(self, path: str) -> str:
        return self.pathname + path


def base_urls(ctx: ComposeContext, binding: Binding, spec: OpenapiSpec,
              option: Path_) -> list[BaseUrl]:
    """The URLs of `spec` for `binding` (`option` is `options.specs.<label>`)."""
    entry = _entry(binding, option)
    issues: list[ConfigIssue] = []
    out: list[BaseUrl] = []
    given = entry.get("servers")
    if given is not None:
        for i, url in enumerate(given):
            at = ("bindings", binding.name, "options") + option + ("servers", i)
            found = _parse(str(url))
            if isinstance(found, str):
                issues.append(ctx.issue(at, found))
                continue
            issue = ctx.issue(at, "")
            out.append(BaseUrl(*found, where=(issue.file, issue.line)))
    else:
        for server in spec.servers():
            url = server.resolved()
            found = _parse(url) if url is not None else "a variable has no default"
            if isinstance(found, str):
                said = format_path(("bindings", binding.name, "options") + option + ("servers",))
                issues.append(spec.issue(server.path + ("url",),
                                         f"server {server.url!r}: {found}; name the URL to use "
                                         f"in {said}"))
                continue
            out.append(BaseUrl(*found, where=spec.text.where(server.path)))
        if not out and not issues:
            issues.append(ctx.issue(("bindings", binding.name, "options") + option,
                                    f"spec {spec.label!r} ({spec.text.file}) declares no "
                                    f"server; name the URL in servers"))
    if issues:
        raise ConfigError(issues)
    return out


def _entry(binding: Binding, option: Path_) -> dict[str, Any]:
    value: Any = binding.options
    for part in option:
        assert isinstance(value, dict)
        value = value[part]
    assert isinstance(value, dict)
    return value


def _parse(url: str) -> tuple[str, str, int, str] | str:
    """(scheme, host, port, pathname) of an http(s) URL, else what is wrong with it."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        return f"expected an http or https URL such as http://localhost:7114, got {url!r}"
    try:
        port = parts.port or DEFAULT_PORTS[scheme]
    except ValueError:
        return f"expected a port number in {url!r}"
    if not parts.hostname:
        return f"expected a host in {url!r}"
    return scheme, parts.hostname, port, parts.path.rstrip("/")
