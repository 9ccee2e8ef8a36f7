"""openapi binding (kinds server, client): the HTTP bindings an API's OpenAPI 3 spec describes,
composed from the spec instead of written by hand (docs/openapi.md).

- **server** composes tcp (and tls) and an http server with a route per operation of the spec
  (`ssekd.bindings.openapi.server`);
- **client** composes the http client (and tls and tcp clients) that carries those requests to
  the upstream the spec describes (`ssekd.bindings.openapi.client`).

The loader replaces each with what it composes before anything is built (`KindSpec.compose`,
`ssekd.config.compose`), as it does the asyncapi kinds. The vocabulary is Zilla's
(`options.specs.<label>.servers`, `catalog`; routes `when: [{spec, operation, tag}]`).
"""

from __future__ import annotations

from typing import Any

from ssekd.bindings.http.roles import HttpBinding
from ssekd.bindings.openapi.client import compose_client
from ssekd.bindings.openapi.server import compose_server
from ssekd.bindings.specs import options
from ssekd.spi.binding import BindingType, Exit, KindSpec
from ssekd.spi.connection import ListenerBinding

__all__ = ["BINDING", "CATALOG", "SECURITY", "WHEN"]

#: The catalog a spec is read from, by subject (as the asyncapi kinds say it).
CATALOG = options.CATALOG

#: Security scheme -> guard, for the kinds that serve operations.
SECURITY = options.security(
    "Security scheme name (`components.securitySchemes`) to the guard "
    "(`guards.<name>`) that checks its tokens; the requirement's scopes are the "
    "roles the route requires. An operation whose security names a scheme "
    "mapped to no guard, or has alternatives, is a config error (Zilla leaves "
    "the one open and drops the other).")

#: One `when` of a route: which operations of which spec it takes.
WHEN = options.when("An operationId, or a glob (`*` matches any run of characters); an "
                    "operation without one is `<METHOD> <path>`.")


def _options(description: str, servers: str, security: bool) -> dict[str, Any]:
    spec = options.spec(
        "One OpenAPI 3 spec, by the label routes name it with.",
        options.servers("^[hH][tT][tT][pP][sS]?://",
                        "the spec's `servers` (variables at their defaults)", servers),
        SECURITY if security else None)
    return options.specs(spec, description)


_composed_only = options.composed_only("openapi")


BINDING = BindingType("openapi", {
    "server": KindSpec(
        role=ListenerBinding, build=_composed_only, compose=compose_server,
        exit=Exit.REQUIRED, exit_roles=(HttpBinding,), vault=True, when=WHEN,
        options=_options(
            "Composes the tcp (and, for `https` URLs, tls: keys from `vault`) and http server "
            "bindings that serve a spec's operations: a route per operation (its path, `{name}` "
            "parts matching one segment, and its method; any other request is `404`), "
            "cross-origin allowed. Each operation goes to the exit of the first route whose "
            "`when` takes it, else to `exit` (an openapi client, an openapi-asyncapi proxy, or "
            "any binding that answers HTTP). A request is checked against the operation's "
            "request body and parameters (`400`, `415`) before it goes on; an operation's "
            "security requires the guard `security` maps its scheme to. `ssekd check` prints "
            "what was composed.",
            "URLs (scheme, host, port, and a path the spec's paths go under) listened on: on "
            "the URL's address when it is localhost or an IP address, else on every "
            "interface.", security=True)),
    "client": KindSpec(
        role=HttpBinding, build=_composed_only, compose=compose_client,
        vault=True,
        options=_options(
            "Composes the http client (and tls, for an `https` URL, and tcp clients) that "
            "carries the requests of an openapi server's routes to the spec's upstream. An "
            "`https` upstream's certificate must chain to the `vault`'s trust, or to the "
            "system's CAs when the binding has no vault. The upstream's JSON answers are "
            "checked against the operation's responses; one the spec refuses is cut after "
            "its head.",
            "The upstream's URL (scheme, host and port), as given: it need not be one the "
            "spec lists. All specs of the binding must name the same one.", security=False)),
})
