"""What a binding or guard type registers, and what it may use while it is built.

A binding *type* (tcp, tls, http, ...) is one module that exposes `BINDING`, a `BindingType`,
registered under the `ssekd.bindings` entry point group (`ssekd.spi.plugins`). For each `kind`
it says, in a `KindSpec`, the JSON Schema of its `options`, of one `when` condition and of
`with`, whether it takes an `exit` and a `vault`, what it depends on outside itself
(`depends`), which role its runtime object plays and which roles its exits must play.

A role is simply the protocol class its runtime provides, defined beside what offers it: the
engine's own (`ListenerBinding`, `ReadinessSource`) and the connection layers' here and in
`ssekd.spi.connection`, the others in their binding package (`ssekd.bindings.kafka.roles`
offers `KafkaCache`). The config loader compares them (`plays`), the engine checks a runtime
against its role with `isinstance`; neither needs a type's name. A kind that can stand in
several places (the echo server: behind a tcp or tls server, or behind an http server) has a
role that extends the roles it can play.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar, runtime_checkable

from twisted.internet.interfaces import IDelayedCall

from ssekd.catalogs.catalog import Catalog
from ssekd.config.errors import ConfigIssue
from ssekd.config.model import Binding, Config
from ssekd.config.model import Guard as GuardConfig
from ssekd.health import Check, Health
from ssekd.spi.compose import ComposeContext, Composition
from ssekd.spi.guard import CredentialSource, Guard, GuardRuntime
from ssekd.spi.workers import Siblings
from ssekd.telemetry.events import EventLog
from ssekd.telemetry.metrics import Metrics

JsonSchema = Mapping[str, Any]
#: A path below a binding's `options`, e.g. `("authorization", "jwt0")`.
OptionPath = tuple[str | int, ...]


def role_name(role: type) -> str:
    """A role's name in messages and docs, from its protocol's: `StreamSource` -> "stream
    source", `KafkaClientBinding` -> "kafka client" (a trailing `Binding` says nothing)."""
    words = re.findall(r"[A-Z]+(?![a-z])|[A-Z][a-z]*|[a-z]+", role.__name__)
    if len(words) > 1 and words[-1] == "Binding":
        words.pop()
    return " ".join(w.lower() for w in words)


def plays(role: type, wanted: type) -> bool:
    """Whether a kind of role `role` can be an exit that must play `wanted`: the same role, or
    one that extends it (a protocol class whose bases include `wanted`)."""
    return wanted in role.__mro__


class Exit(enum.Enum):
    """Whether a binding (and its routes) may or must name an `exit`."""

    REQUIRED = "required"
    OPTIONAL = "optional"
    NONE = "none"


# -- the reactor and the build context ----------------------------------------------------------


class Reactor(Protocol):
    """The part of Twisted's reactor a binding may use: timers, time, and hand-over from its
    own threads. Tests pass a `twisted.internet.testing.MemoryReactorClock`."""

    def callLater(self, delay: float, callable: Callable[..., Any], *args: Any,
                  **kw: Any) -> IDelayedCall: ...

    def seconds(self) -> float: ...

    def callFromThread(self, callable: Callable[..., Any], *args: Any, **kw: Any) -> None: ...


R = TypeVar("R")


class BuildContext(Protocol):
    """What a binding's `build(ctx, binding)` may use. Exits are built on demand, once."""

    @property
    def config(self) -> Config: ...

    @property
    def reactor(self) -> Reactor: ...

    @property
    def events(self) -> EventLog: ...

    @property
    def metrics(self) -> Metrics:
        """The engine's metrics: a binding takes its instruments here, once, when built."""

    def issue(self, path: tuple[str | int, ...], message: str) -> ConfigIssue:
        """A problem at `path` of the config, with its line, to raise in a `ConfigError`."""

    def exit(self, name: str, role: type[R]) -> R:
        """The runtime object of binding `name`, built once (or kept from before a reload).

        `role` is the protocol the caller needs (e.g. `HttpBinding`); an exit that does not
        provide it is a `ConfigError` naming both bindings, never an `AttributeError` later.
        """

    def guard(self, name: str) -> Guard:
        """The runtime of guard `name` (under `guards`), built once, to check requests'
        credentials; the config loader has already checked that every guard a binding names
        exists. A guard that checks nothing (inline) is a `ConfigError` naming the binding."""

    def credentials(self, name: str) -> CredentialSource:
        """The runtime of guard `name` as the holder of credentials the binding presents (an
        inline guard, for a kafka client's SASL); a guard that holds none (jwt) is a
        `ConfigError` naming the binding."""

    @property
    def health(self) -> Health:
        """The process's liveness and readiness, for bindings that answer health probes."""

    @property
    def catalogs(self) -> Mapping[str, Catalog]:
        """The config's schema catalogs (`catalogs.<name>`), built once per config."""

    @property
    def siblings(self) -> Siblings | None:
        """The other workers of this daemon, or None in a daemon without workers."""


@dataclass(frozen=True)
class Dependencies:
    """What a binding names in its options outside itself, each with where (below `options`):
    the guards that check its tokens, the catalogs whose schemas it holds, the vaults it reads.
    Its `vault` and its routes' `guarded` are the engine's to read; these only its kind knows.
    """

    guards: Mapping[str, OptionPath] = field(default_factory=dict)
    catalogs: Mapping[str, OptionPath] = field(default_factory=dict)
    vaults: Mapping[str, OptionPath] = field(default_factory=dict)
    #: It holds every catalog's schemas (a model of a shape its kind cannot say more of).
    every_catalog: bool = False
    #: It describes the whole config (an AsyncAPI document): any change to a binding, a guard,
    #: a catalog or what a composite says of its bindings rebuilds it.
    whole_config: bool = False
    #: It takes settings from the bindings that exit to it (a kafka cache_server adopts the
    #: topic models its cache_clients declare): a reload that changes one of those, or a
    #: catalog one of them holds, rebuilds it too.
    inbound: bool = False


NO_DEPENDENCIES = Dependencies()


def no_dependencies(options: Mapping[str, Any]) -> Dependencies:
    """`KindSpec.depends` of a kind whose options name nothing outside the binding."""
    return NO_DEPENDENCIES


@dataclass(frozen=True)
class KindSpec:
    """One `kind` of a binding type: its config shape and how to build it."""

    #: The protocol its runtime object provides (checked when it is built), e.g.
    #: `ListenerBinding`: its role in the graph, named by `role_name`.
    role: type
    build: Callable[[BuildContext, Binding], object]
    options: JsonSchema = field(default_factory=lambda: {"type": "object",
                                                         "additionalProperties": False})
    #: Schema of one item of a route's `when` list; None when this kind has no routes.
    when: JsonSchema | None = None
    #: Schema of a route's `with`; None when routes take no `with`.
    with_: JsonSchema | None = None
    exit: Exit = Exit.NONE
    #: Roles (protocols) an exit of this binding may play (checked when references are
    #: resolved).
    exit_roles: tuple[type, ...] = ()
    #: Does the binding take a `vault`?
    vault: bool = False
    #: A few words on where a binding of this kind listens or connects, from its options, for
    #: `ssekd check`'s graph (e.g. `0.0.0.0:7114`); None (or "") when there is nothing to say.
    summary: Callable[[Mapping[str, Any]], str] | None = None
    #: The (host, port) servers a binding of this kind connects to, from its options: `make run`
    #: starts the development broker on the local ones where nothing listens. None: no servers.
    connects_to: Callable[[Mapping[str, Any]], list[tuple[str, int]]] | None = None
    #: The topics a binding of this kind consumes from start-up, from its options: `make run`'s
    #: demo producer writes to them. None: none.
    bootstrap_topics: Callable[[Mapping[str, Any]], list[str]] | None = None
    #: For a composite kind (asyncapi): the bindings it stands for, written as a zilla.yaml
    #: would write them. The loader replaces the binding with them before anything is built,
    #: so `build` is never called for it; `role` and `exit_roles` are those of the composed
    #: binding that takes the composite's name (the one its neighbours reach).
    compose: Callable[[ComposeContext, Binding], Composition] | None = None
    #: The (topic, reply-to topic or None) of the records a binding of this kind writes, from
    #: its routes: `make run` starts the demo command service for the todo demo's topics.
    #: None: it writes none.
    produces: Callable[[Binding], list[tuple[str, str | None]]] | None = None
    #: What a binding of this kind names in its options outside itself (guards, catalogs,
    #: vaults): the loader checks they exist, the engine rebuilds the binding on reload when one
    #: of them changes. The default: nothing.
    depends: Callable[[Mapping[str, Any]], Dependencies] = no_dependencies


@dataclass(frozen=True)
class BindingType:
    """What a binding module registers: its type name and its kinds."""

    name: str
    kinds: Mapping[str, KindSpec]


@dataclass(frozen=True)
class GuardType:
    """What a guard module registers (entry point group `ssekd.guards`): its type name, the
    JSON Schema file of its entry (`ssekd:guard/<name>`, shipped in `ssekd/config/schema/`) and
    how to build its runtime (a `Guard` or a `CredentialSource`). A runtime that is also an
    `IService` is started and stopped with the daemon."""

    name: str
    build: Callable[[BuildContext, GuardConfig], GuardRuntime]


@runtime_checkable
class ReadinessSource(Protocol):
    """A runtime that can keep the daemon out of a load balancer's rotation until it can serve
    (a Kafka cache loading its bootstrap topics); the engine asks every one in the graph."""

    def readiness(self) -> Iterable[Check]: ...
