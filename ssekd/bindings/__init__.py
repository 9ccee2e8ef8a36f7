"""What a binding type is, and the interfaces that bindings of different layers offer each other.

A binding *type* (tcp, tls, http, ...) is one module that exposes `BINDING`, a `BindingType`, and is
registered under the `ssekd.bindings` entry point group. The type says, for each `kind`, the JSON
Schema of its `options`, of one `when` condition and of `with`, whether it takes an `exit`, which
role its runtime object plays, and which roles its exits must play. The config schema is composed
from these, and `ssekd.engine` builds the runtime graph from them; nothing else in the tree needs
to know a binding type's name.

Roles are the layers of the graph, outermost first:

- ``listener``  - owns sockets (tcp server). Its exits are ``stream`` bindings.
- ``stream``    - takes an accepted byte stream (tls, http): `StreamBinding`.
- ``http``      - answers one HTTP request (sse, http-filesystem): `HttpBinding`.
- ``events``    - opens event streams for the sse binding (sse-kafka).
- ``files``     - serves files for http-filesystem (filesystem).
- ``kafka``     - the kafka bindings (cache_client, cache_server, client).
- ``outbound``  - tcp client: validated, no behaviour of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from twisted.internet.interfaces import IAddress, IProtocol
from twisted.web.server import Request

if TYPE_CHECKING:
    from ssekd.config.model import Binding
    from ssekd.engine import BuildContext

JsonSchema = Mapping[str, Any]

ANY_OBJECT: JsonSchema = {"type": "object"}


@dataclass(frozen=True)
class KindSpec:
    """One `kind` of a binding type: its config shape and how to build it."""

    role: str
    build: Callable[[BuildContext, Binding], object]
    options: JsonSchema = field(default_factory=lambda: {"type": "object",
                                                         "additionalProperties": False})
    #: Schema of one item of a route's `when` list; None when this kind has no routes.
    when: JsonSchema | None = None
    #: Schema of a route's `with`; None when routes take no `with`.
    with_: JsonSchema | None = None
    #: "required", "optional" or "none": may the binding (and its routes) name an `exit`?
    exit: str = "none"
    #: Roles an exit of this binding may play (checked when references are resolved).
    exit_roles: tuple[str, ...] = ()
    #: Does the binding take a `vault`?
    vault: bool = False
    #: Keys of `options` whose string values are file paths, relative to the config's folder.
    path_options: tuple[str, ...] = ()


@dataclass(frozen=True)
class BindingType:
    """What a binding module registers: its type name and its kinds."""

    name: str
    kinds: Mapping[str, KindSpec]


@dataclass(frozen=True)
class ConnectionInfo:
    """What the outer layers know about an accepted connection, for routing inside."""

    local: IAddress
    peer: IAddress
    secure: bool = False
    server_name: str | None = None  # TLS SNI
    alpn: str | None = None  # negotiated ALPN protocol


@runtime_checkable
class StreamBinding(Protocol):
    """A binding that takes over an accepted connection (tls, http)."""

    def build_protocol(self, conn: ConnectionInfo) -> IProtocol | None:
        """The protocol for this connection, or None to close it."""


@runtime_checkable
class HttpBinding(Protocol):
    """A binding that answers HTTP requests routed to it by the http server.

    `render` behaves like `twisted.web.resource.Resource.render`: return the body bytes, or
    `twisted.web.server.NOT_DONE_YET` and finish the request later. `params` are the values the
    http route captured; `HttpContext` carries what the http layer decided (identity, CORS).
    """

    def render(self, request: Request, ctx: HttpContext) -> bytes | int:
        ...


@dataclass
class HttpContext:
    """Per-request facts decided by the http binding, handed to its exit."""

    binding: str
    params: Mapping[str, str] = field(default_factory=dict)
    #: guard name -> authenticated session object (see ssekd.guards), when the request carried
    #: credentials for a guard named in `options.authorization`.
    sessions: dict[str, Any] = field(default_factory=dict)
