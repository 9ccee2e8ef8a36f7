"""An AsyncAPI 3 document read through a catalog: its servers, channels and operations with their
local `$ref`s followed, and the file and line of each part, so that a problem in a spec is
reported in the spec.

Only what composing bindings needs is read, and checked as it is read: a spec may say more
(info, tags, traits, examples) and that is left as it is. References are local (`#/...`, JSON
Pointer); one to another document is an error at its line.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ssekd.bindings.specs import reading
from ssekd.config.document import Document
from ssekd.config.errors import ConfigError, ConfigIssue, format_path
from ssekd.config.model import Binding
from ssekd.spi.compose import ComposeContext, Source

Path_ = tuple[str | int, ...]

#: Ports a URL or a server's host means when it names none.
DEFAULT_PORTS = {"http": 80, "https": 443, "kafka": 9092, "kafka-secure": 9093}
#: How deep a chain of references may go (a loop is found before).
MAX_REFS = 32
_VARIABLE = re.compile(r"\{([^{}]+)\}")
#: What a `{name}` in a channel address may be called to become a path capture.
PARAMETER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


@dataclass(frozen=True)
class Spec:
    """One spec of a binding's `options.specs`, parsed with the line of each part."""

    label: str
    source: Source
    document: Document
    #: Where the binding names it: `options.specs.<label>` in the config.
    option_path: Path_

    @property
    def data(self) -> Mapping[str, Any]:
        data = self.document.data
        return data if isinstance(data, Mapping) else {}

    @property
    def file(self) -> Path:
        return self.source.file

    def line(self, path: Path_) -> int | None:
        line = self.document.line_of(path)
        return None if line is None else self.source.first_line - 1 + line

    def where(self, path: Path_) -> tuple[Path, int | None]:
        return self.source.file, self.line(path)

    def at(self, path: Path_) -> str:
        """`file:line` of a part, for messages that point at a second place."""
        line = self.line(path)
        return f"{self.source.file}:{line}" if line else str(self.source.file)

    def issue(self, path: Path_, message: str) -> ConfigIssue:
        return ConfigIssue(self.source.file, self.line(path), format_path(path),
                           f"{message} (spec {self.label!r})")

    def resolve(self, value: Any, path: Path_) -> tuple[Any, Path_]:
        """`value` (found at `path`) with its `$ref`s followed: the target and its path."""
        seen: list[str] = []
        while isinstance(value, Mapping) and isinstance(value.get("$ref"), str):
            ref = str(value["$ref"])
            if not ref.startswith("#/") and ref != "#":
                raise ConfigError([self.issue(path + ("$ref",),
                                              f"reference {ref!r} is to another document; "
                                              f"only references inside the spec (#/...) are "
                                              f"followed")])
            if ref in seen or len(seen) >= MAX_REFS:
                raise ConfigError([self.issue(path + ("$ref",),
                                              f"references go round in a loop: "
                                              f"{' -> '.join(seen + [ref])}")])
            seen.append(ref)
            target: Any = self.data
            target_path: Path_ = ()
            for raw in ref[2:].split("/") if ref != "#" else []:
                part = raw.replace("~1", "/").replace("~0", "~")
                if isinstance(target, Mapping) and part in target:
                    target, target_path = target[part], target_path + (part,)
                elif isinstance(target, list) and part.isdigit() and int(part) < len(target):
                    target, target_path = target[int(part)], target_path + (int(part),)
                else:
                    raise ConfigError([self.issue(path + ("$ref",),
                                                  f"reference {ref!r} points at nothing in "
                                                  f"the spec")])
            value, path = target, target_path
        return value, path

    def mapping(self, value: Any, path: Path_, what: str) -> Mapping[str, Any]:
        value, path = self.resolve(value, path)
        if not isinstance(value, Mapping):
            raise ConfigError([self.issue(path, f"expected {what} (a mapping)")])
        return value

    def deref(self, value: Any, path: Path_, seen: tuple[str, ...] = ()) -> Any:
        """`value` with every reference inside it replaced by its target (a schema made to
        stand alone). A schema that refers to itself cannot be, and is an error."""
        if isinstance(value, Mapping) and isinstance(value.get("$ref"), str):
            ref = str(value["$ref"])
            if ref in seen:
                raise ConfigError([self.issue(path, f"schema {ref!r} contains itself; ssekd "
                                                    f"checks records only against schemas "
                                                    f"without recursion")])
            target, target_path = self.resolve(value, path)
            return self.deref(target, target_path, seen + (ref,))
        if isinstance(value, Mapping):
            return {k: self.deref(v, path + (k,), seen) for k, v in value.items()}
        if isinstance(value, list):
            return [self.deref(v, path + (i,), seen) for i, v in enumerate(value)]
        return value

    # -- views ----------------------------------------------------------------------------------

    def servers(self) -> dict[str, SpecServer]:
        raw = self.data.get("servers") or {}
        if not isinstance(raw, Mapping):
            raise ConfigError([self.issue(("servers",), "expected servers (a mapping)")])
        found: dict[str, SpecServer] = {}
        for key, value in raw.items():
            server = self.mapping(value, ("servers", key), f"server {key!r}")
            host, protocol = server.get("host"), server.get("protocol")
            if not isinstance(host, str) or not isinstance(protocol, str):
                raise ConfigError([self.issue(("servers", key),
                                              f"server {key!r} needs a host and a protocol")])
            variables = server.get("variables") or {}
            defaults: dict[str, str] = {}
            choices: dict[str, tuple[str, ...]] = {}
            for name, variable in (variables.items() if isinstance(variables, Mapping) else ()):
                var = self.mapping(variable, ("servers", key, "variables", name),
                                   f"server variable {name!r}")
                if "default" in var:
                    defaults[name] = str(var["default"])
                if isinstance(var.get("enum"), list):
                    choices[name] = tuple(str(v) for v in var["enum"])
            found[str(key)] = SpecServer(str(key), host, protocol.lower(),
                                         str(server.get("pathname") or ""), ("servers", key),
                                         defaults, choices, server)
        return found

    def operations(self) -> dict[str, Operation]:
        raw = self.data.get("operations") or {}
        if not isinstance(raw, Mapping):
            raise ConfigError([self.issue(("operations",), "expected operations (a mapping)")])
        issues: list[ConfigIssue] = []
        found: dict[str, Operation] = {}
        for key, value in raw.items():
            try:
                found[str(key)] = self._operation(str(key), value)
            except ConfigError as e:
                issues.extend(e.issues)
        if issues:
            raise ConfigError(issues)
        return found

    def _operation(self, key: str, value: Any) -> Operation:
        path: Path_ = ("operations", key)
        op = self.mapping(value, path, f"operation {key!r}")
        action = op.get("action")
        if action not in ("send", "receive"):
            raise ConfigError([self.issue(path + ("action",), f"operation {key!r}: expected "
                                                              f"action send or receive")])
        channel_ref = op.get("channel")
        ref = channel_ref.get("$ref") if isinstance(channel_ref, Mapping) else None
        if not isinstance(ref, str) or not ref.startswith("#/channels/") or \
                ref.count("/") != 2:
            raise ConfigError([self.issue(path + ("channel",),
                                          f"operation {key!r}: expected channel: {{$ref: "
                                          f"'#/channels/<name>'}}")])
        channel_key = ref.split("/", 2)[2].replace("~1", "/").replace("~0", "~")
        channel = self.channel(channel_key, path + ("channel",))
        bindings = op.get("bindings") or {}
        bindings_path: Path_ = path + ("bindings",)
        bindings, bindings_path = self.resolve(bindings, bindings_path)
        if not isinstance(bindings, Mapping):
            raise ConfigError([self.issue(bindings_path, "expected bindings (a mapping)")])
        tags = set()
        for i, tag in enumerate(op.get("tags") or ()):
            resolved, _ = self.resolve(tag, path + ("tags", i))
            if isinstance(resolved, Mapping) and isinstance(resolved.get("name"), str):
                tags.add(resolved["name"])
        return Operation(key, str(action), channel, path, op, bindings, bindings_path,
                         frozenset(tags))

    def channel(self, key: str, referred_at: Path_) -> Channel:
        channels = self.data.get("channels") or {}
        if not isinstance(channels, Mapping) or key not in channels:
            raise ConfigError([self.issue(referred_at, f"channel {key!r} is not in the spec's "
                                                       f"channels")])
        path: Path_ = ("channels", key)
        channel = self.mapping(channels[key], path, f"channel {key!r}")
        address = channel.get("address")
        if address is not None and not isinstance(address, str):
            raise ConfigError([self.issue(path + ("address",), "expected the address as a "
                                                               "string")])
        messages: list[Message] = []
        raw = channel.get("messages") or {}
        for name, message in (raw.items() if isinstance(raw, Mapping) else ()):
            body, body_path = self.resolve(message, path + ("messages", name))
            if isinstance(body, Mapping):
                messages.append(Message(str(name), body, body_path))
        return Channel(key, address, path, channel, tuple(messages))

    def security(self, operation: Operation) -> Iterator[Scheme]:
        """The security schemes an operation requires, by their name under
        `components.securitySchemes` (an inline scheme has none)."""
        for i, item in enumerate(operation.data.get("security") or ()):
            item_path = operation.path + ("security", i)
            ref = item.get("$ref") if isinstance(item, Mapping) else None
            prefix = "#/components/securitySchemes/"
            if not isinstance(ref, str) or not ref.startswith(prefix):
                raise ConfigError([self.issue(item_path,
                                              "expected a $ref to #/components/securitySchemes/"
                                              "<name>: a guard is mapped to a scheme by its "
                                              "name (options.specs.<label>.security)")])
            scheme = self.mapping(item, item_path, "a security scheme")
            yield Scheme(ref[len(prefix):], scheme, item_path)


@dataclass(frozen=True)
class SpecServer:
    """One entry of a spec's `servers`."""

    key: str
    host: str
    protocol: str
    pathname: str
    path: Path_
    defaults: Mapping[str, str]
    choices: Mapping[str, tuple[str, ...]]
    data: Mapping[str, Any]

    @property
    def url(self) -> str:
        return f"{self.protocol}://{self.host}{self.pathname}"

    def matches(self, scheme: str, host: str, port: int, pathname: str) -> bool:
        """Whether a URL (`scheme://host:port/pathname`) names this server."""
        if scheme != self.protocol or pathname.rstrip("/") != self.pathname.rstrip("/"):
            return False
        pattern = ""
        pos = 0
        for m in _VARIABLE.finditer(self.host):
            pattern += re.escape(self.host[pos:m.start()])
            options = self.choices.get(m.group(1))
            pattern += "(?:" + "|".join(map(re.escape, options)) + ")" if options \
                else "[^.:/]+"
            pos = m.end()
        pattern += re.escape(self.host[pos:])
        with_port = f"{host}:{port}"
        default = DEFAULT_PORTS.get(scheme)
        return re.fullmatch(pattern, with_port, re.IGNORECASE) is not None or \
            (port == default and re.fullmatch(pattern, host, re.IGNORECASE) is not None)

    def address(self) -> tuple[str, int] | None:
        """(host, port) with the variables' defaults put in; None when one has no default."""
        host = self.host
        for m in _VARIABLE.finditer(self.host):
            if m.group(1) not in self.defaults:
                return None
            host = host.replace(m.group(0), self.defaults[m.group(1)])
        parsed = urlsplit(f"//{host}")
        try:
            port = parsed.port
        except ValueError:
            return None
        if parsed.hostname is None:
            return None
        return parsed.hostname, port or DEFAULT_PORTS.get(self.protocol, 0)


@dataclass(frozen=True)
class Message:
    key: str
    data: Mapping[str, Any]
    path: Path_


@dataclass(frozen=True)
class Channel:
    key: str
    address: str | None
    path: Path_
    data: Mapping[str, Any]
    messages: tuple[Message, ...]

    @property
    def parameters(self) -> list[str]:
        """The names of the `{name}` parts of the address."""
        return _VARIABLE.findall(self.address or "")


@dataclass(frozen=True)
class Operation:
    key: str
    action: str
    channel: Channel
    path: Path_
    data: Mapping[str, Any]
    bindings: Mapping[str, Any]
    bindings_path: Path_
    tags: frozenset[str]


@dataclass(frozen=True)
class Scheme:
    name: str
    data: Mapping[str, Any]
    path: Path_


@dataclass(frozen=True)
class SelectedServer:
    """A spec server a binding uses, and the address it listens on or connects to."""

    server: SpecServer
    scheme: str
    host: str
    port: int
    #: Where the choice is made: `options.specs.<label>.servers[i]` of the config, or None
    #: when the binding names no servers and uses all of the spec's.
    option_path: Path_ | None


def read_specs(ctx: ComposeContext, binding: Binding) -> dict[str, Spec]:
    """Every spec of `options.specs`, read through its catalog and parsed."""
    return reading.read_specs(ctx, binding.options.get("specs") or {},
                              ("bindings", binding.name, "options", "specs"), "asyncapi", Spec,
                              version_example="3.0.0")


def select_servers(ctx: ComposeContext, binding: Binding, spec: Spec,
                   protocols: tuple[str, ...]) -> list[SelectedServer]:
    """The servers of `spec` the binding uses: those its `servers` URLs name (each must name
    one), else every server of the spec whose protocol is one of `protocols`."""
    servers = spec.servers()
    urls = binding.options["specs"][spec.label].get("servers")
    issues: list[ConfigIssue] = []
    chosen: list[SelectedServer] = []
    declared = "the spec's servers: " + "; ".join(
        f"{s.key} ({s.url}, {spec.at(s.path)})" for s in servers.values()) \
        if servers else "the spec declares none"
    if urls is None:
        for server in servers.values():
            if server.protocol not in protocols:
                continue
            address = server.address()
            if address is None:
                issues.append(spec.issue(server.path + ("host",),
                                         f"server {server.key!r}: a host variable has no "
                                         f"default; name the server with a URL in "
                                         f"{format_path(spec.option_path + ('servers',))}"))
                continue
            chosen.append(SelectedServer(server, server.protocol, *address, None))
        if not chosen and not issues:
            issues.append(ctx.issue(spec.option_path,
                                    f"spec {spec.label!r} ({spec.file}) has no server with "
                                    f"protocol {' or '.join(protocols)}; {declared}"))
    for i, url in enumerate(urls or ()):
        path = spec.option_path + ("servers", i)
        parts = urlsplit(str(url))
        try:
            port = parts.port
        except ValueError:
            port = -1
        scheme = parts.scheme.lower()
        if parts.hostname is None or port == -1:
            issues.append(ctx.issue(path, f"expected a URL such as http://localhost:7114, "
                                          f"got {url!r}"))
            continue
        port = port or DEFAULT_PORTS.get(scheme, 0)
        match = [s for s in servers.values()
                 if s.matches(scheme, parts.hostname, port, parts.path)]
        if not match:
            issues.append(ctx.issue(path, f"{url} is not a server of spec {spec.label!r} "
                                          f"({spec.file}); {declared}"))
            continue
        if scheme not in protocols:
            issues.append(ctx.issue(path, f"{url}: protocol {scheme} is not one this binding "
                                          f"serves or connects to; expected "
                                          f"{' or '.join(protocols)}"))
            continue
        chosen.append(SelectedServer(match[0], scheme, parts.hostname, port, path))
    if issues:
        raise ConfigError(issues)
    return chosen
