"""asyncapi binding (kinds server, proxy, client): the bindings an API's AsyncAPI specs describe,
composed from the specs instead of written by hand (docs/asyncapi.md).

An API team writes two specs: one for the SSE side (servers `http`/`https`, operations with the
`x-zilla-sse` binding on channels whose address is a path), one for the Kafka side (a `kafka`
server, operations that receive from channels whose address is a topic). Three bindings read
them through the config's catalogs:

- **server** composes tcp (and tls), http and sse bindings for the SSE spec's servers and
  operations (`ssekd.bindings.asyncapi.server`);
- **proxy** composes the sse-kafka binding that pairs each SSE operation with a Kafka one, and
  the http-kafka binding that pairs each HTTP operation (`http` operation binding) with one
  (`ssekd.bindings.asyncapi.proxy`, `ssekd.bindings.asyncapi.http_kafka`);
- **client** composes the kafka cache_client, cache_server and client for the Kafka spec
  (`ssekd.bindings.asyncapi.client`); for an SSE spec, the sse client, http client and tcp (and
  tls) client that relay an SSE upstream to an asyncapi server's operations, each event checked
  against its operation's payload schema (`ssekd.bindings.asyncapi.sse_client`). Before it is
  composed it may be either (`roles.SpecClient`).

The loader replaces each with what it composes before anything is built (`KindSpec.compose`,
`ssekd.config.compose`): the engine sees ordinary bindings. The vocabulary is Zilla's
(`options.specs.<label>`, routes `when: [{spec, operation, tag}]`, `with: {spec, operation}`).
"""

from __future__ import annotations

from typing import Any

from ssekd.bindings.asyncapi.client import compose_client
from ssekd.bindings.asyncapi.proxy import compose_proxy
from ssekd.bindings.asyncapi.roles import SpecClient
from ssekd.bindings.asyncapi.server import compose_server
from ssekd.bindings.asyncapi.spec import read_specs
from ssekd.bindings.asyncapi.sse_client import compose_sse_client, relays_sse
from ssekd.bindings.http.roles import HttpBinding
from ssekd.bindings.kafka.roles import KafkaCache
from ssekd.bindings.specs import options
from ssekd.bindings.sse.roles import StreamSource
from ssekd.config.model import Binding
from ssekd.spi.binding import BindingType, Exit, KindSpec
from ssekd.spi.compose import ComposeContext, Composition
from ssekd.spi.connection import ListenerBinding

__all__ = ["BINDING"]

_SECURITY = options.security(
    "Security scheme name (`components.securitySchemes`) to the guard "
    "(`guards.<name>`) that checks its tokens. An operation whose security names "
    "a scheme mapped to no guard is a config error (Zilla leaves it unguarded).")


def _specs(servers: str, security: bool) -> dict[str, Any]:
    """`options` of a kind: `specs.<label>` with what `servers` does for it, and `security`
    for the kinds that guard operations."""
    spec = options.spec(
        "One AsyncAPI 3 spec, by the label routes name it with.",
        options.servers("^[a-zA-Z][a-zA-Z0-9+.-]*://",
                        "every server of the spec with a protocol the kind uses",
                        "URLs of the spec's servers (protocol, host and port, and pathname, as "
                        "the spec's `servers` say them); one the spec does not declare is an "
                        "error. " + servers),
        _SECURITY if security else None)
    return options.specs(spec)


_WHEN = options.when("An operation id, or a glob (`*` matches any run of characters).")


def _options(description: str, servers: str, security: bool) -> dict[str, Any]:
    return {**_specs(servers, security), "description": description}


def _compose_any_client(ctx: ComposeContext, binding: Binding) -> Composition:
    """An asyncapi client of an SSE spec relays an SSE upstream; of a Kafka spec, reads Kafka
    (`sse_client.relays_sse` tells them apart by the servers used)."""
    specs = read_specs(ctx, binding)
    if relays_sse(binding, specs):
        return compose_sse_client(ctx, binding, specs)
    return compose_client(ctx, binding, specs)


_composed_only = options.composed_only("asyncapi")


BINDING = BindingType("asyncapi", {
    "server": KindSpec(
        role=ListenerBinding, build=_composed_only, compose=compose_server,
        exit=Exit.REQUIRED, exit_roles=(StreamSource, HttpBinding), vault=True, when=_WHEN,
        options=_options(
            "Composes the tcp (and, for `https` servers, tls: keys from `vault`), http and sse "
            "bindings that serve a spec's SSE operations (those with the `x-zilla-sse` "
            "operation binding) and HTTP operations (the `http` operation binding's `method`) "
            "on its servers. Each operation's channel address is a path (SSE: `GET`; "
            "cross-origin allowed); the token of an operation's security is read as its "
            "scheme says (a bearer token, or an API key in a header, query parameter or "
            "cookie). An operation goes to the exit of the first route whose `when` takes it, "
            "else to `exit` (an asyncapi proxy, any sse-kafka binding for SSE operations, any "
            "http-kafka binding for HTTP ones). `ssekd check` prints the bindings composed.",
            "Those of an SSE spec are listened on (`http`, `https`): on the URL's address when "
            "it is localhost or an IP address, else on every interface.", security=True)),
    "proxy": KindSpec(
        role=StreamSource, build=_composed_only, compose=compose_proxy,
        exit=Exit.REQUIRED, exit_roles=(KafkaCache,), when=_WHEN,
        with_={"type": "object", "additionalProperties": False, "required": ["spec"],
               "description": "The Kafka side of the route.",
               "properties": {
                   "spec": {"type": "string", "description": "The label of the Kafka spec."},
                   "operation": {"type": "string",
                                 "x-ssekd-default": "the operation's own id (an HTTP "
                                                    "operation without one is left unserved, "
                                                    "as in Zilla)",
                                 "description": "The Kafka operation each SSE or HTTP "
                                                "operation of the route is paired with."}}},
        options=_options(
            "Composes the sse-kafka binding that streams Kafka topics for an SSE spec's "
            "operations: each operation a route's `when` takes is paired with the Kafka "
            "operation of `with.spec` of the same id (or `with.operation`), which must have "
            "`action: receive`. Its route's path is the SSE channel's address, its topic the "
            "Kafka channel's address (`{name}` parts from the path), its filters the SSE "
            "operation's `x-zilla-sse-kafka` `filters` (`{identity}` is the guard's identity), "
            "its event id form `x-zilla-sse-kafka.event.id` (an ssekd addition), and its "
            "`guarded` the operation's security. HTTP operations (the `http` operation "
            "binding) make an http-kafka binding (the proxy's own name when its specs have no "
            "SSE operation, else `<name>.http_kafka`): a Kafka operation that receives is a "
            "`fetch` of its topic (by the last path parameter's key, when there is one), one "
            "that sends a `produce` (keyed by the last path parameter, else the idempotency "
            "key; with its `reply` channel as `reply-to`, and a `send` HTTP operation with a "
            "reply channel answering `Prefer: respond-async` with `202` and a location to "
            "poll). Routes exit to an asyncapi client (or any kafka cache_client).",
            "The pathnames of an SSE spec's servers are put in front of its paths.",
            security=True)),
    "client": KindSpec(
        role=SpecClient, build=_composed_only, compose=_compose_any_client, vault=True,
        options=_options(
            "For a Kafka spec, composes the kafka cache_client (what proxy routes exit to), "
            "cache_server and client: the client connects to the spec's `kafka` servers; the "
            "cache_server follows, from start-up, every topic an operation receives from, and "
            "checks each record against its channel's message payload schema (JSON Schema, or "
            "Avro) as it enters the cache. For an SSE spec (servers `http`/`https`, operations "
            "with the `x-zilla-sse` binding), composes the sse client (what an asyncapi "
            "server's operations exit to), http client and tcp client (and tls client for "
            "`https`, trusting `vault`, else the system's CAs) that relay the event streams of "
            "the upstream at the server URL: each event's data is checked against its "
            "operation's message payload schema (JSON Schema) and one that fails is dropped.",
            "For a Kafka spec, the client connects to them (`kafka`: plaintext, the kafka "
            "client's only way). For an SSE spec, the one upstream the events are relayed "
            "from: its URL need not be a server the spec declares (the spec says where the "
            "API is served, this where its events come from); without it, the spec's one "
            "`http`/`https` server.",
            security=False)),
})
