"""openapi-asyncapi binding (kind proxy): the http-kafka binding that serves an OpenAPI spec's
operations from an AsyncAPI spec's Kafka operations, composed from the two specs
(`ssekd.bindings.openapi_asyncapi.proxy`, docs/openapi.md).

An openapi server's routes exit to it; its routes exit to an asyncapi client (or any kafka
cache_client). The vocabulary is Zilla's: `options.specs.openapi.<label>` and
`options.specs.asyncapi.<label>`, routes `when: [{spec, operation, tag}]` (OpenAPI labels) and
`with: {spec, operation, tag}` (an AsyncAPI label).
"""

from __future__ import annotations

from ssekd.bindings.http.roles import HttpBinding
from ssekd.bindings.kafka.roles import KafkaCache
from ssekd.bindings.openapi import CATALOG, SECURITY, WHEN
from ssekd.bindings.openapi_asyncapi.proxy import compose_proxy
from ssekd.bindings.specs import options
from ssekd.spi.binding import BindingType, Exit, KindSpec

__all__ = ["BINDING"]



def _specs(what: str, security: bool) -> dict[str, object]:
    properties: dict[str, object] = {"catalog": CATALOG}
    if security:
        properties["security"] = SECURITY
    return {"type": "object", "minProperties": 1, "propertyNames": {"pattern": options.NAME},
            "description": f"The {what} specs, by label.",
            "additionalProperties": {"type": "object", "additionalProperties": False,
                                     "required": ["catalog"], "properties": properties}}


_composed_only = options.composed_only("openapi-asyncapi")


BINDING = BindingType("openapi-asyncapi", {
    "proxy": KindSpec(
        role=HttpBinding, build=_composed_only, compose=compose_proxy,
        exit=Exit.REQUIRED, exit_roles=(KafkaCache,), when=WHEN,
        with_={"type": "object", "additionalProperties": False, "required": ["spec"],
               "description": "The Kafka side of the route.",
               "properties": {
                   "spec": {"type": "string", "description": "The label of the AsyncAPI spec."},
                   "operation": {"type": "string",
                                 "x-ssekd-default": "the HTTP operation's own operationId",
                                 "description": "The Kafka operation every HTTP operation of "
                                                "the route is paired with; a glob (`*`) "
                                                "instead narrows the operations paired by "
                                                "operationId."},
                   "tag": {"type": "string",
                           "description": "Pair by operationId among the Kafka operations "
                                          "with this tag only."}}},
        options={"type": "object", "additionalProperties": False, "required": ["specs"],
                 "description": "Composes the http-kafka binding that serves an OpenAPI spec's "
                                "operations from an AsyncAPI spec's Kafka operations: each "
                                "operation a route's `when` takes is paired with the Kafka "
                                "operation of `with.spec` of the same operationId (or "
                                "`with.operation`). One that receives is a `fetch` of its "
                                "topic (a JSON array response merges every key's latest "
                                "value), one that sends a `produce` (keyed by the last path "
                                "parameter, else the idempotency key; `reply` gives "
                                "`reply-to`). An operation's security requires the guard "
                                "its scheme maps to (`security`), and `{identity}` in its "
                                "`x-zilla-http-kafka` extension is that guard's identity. "
                                "Routes exit to an asyncapi client (or any kafka "
                                "cache_client).",
                 "properties": {"specs": {
                     "type": "object", "additionalProperties": False,
                     "required": ["openapi", "asyncapi"],
                     "description": "The OpenAPI and AsyncAPI specs, by label.",
                     "properties": {"openapi": _specs("OpenAPI 3", True),
                                    "asyncapi": _specs("AsyncAPI 3", False)}}}}),
})
