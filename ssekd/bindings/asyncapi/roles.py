"""The role an asyncapi client plays before it is composed.

What an asyncapi client stands for depends on its spec: for a Kafka spec, a kafka cache (what an
asyncapi proxy's routes exit to); for an SSE spec, an sse client relaying an upstream event
stream (what an asyncapi server's operations exit to). The references of the config as written
are checked before the specs are read, so the client plays both there; once composed, the
binding under its name plays its own role, and the references are checked again against it.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from ssekd.bindings.kafka.roles import KafkaCache
from ssekd.bindings.sse.roles import StreamSource


@runtime_checkable
class SpecClient(KafkaCache, StreamSource, Protocol):
    """A kafka cache or a stream source, as the asyncapi client's spec decides."""
