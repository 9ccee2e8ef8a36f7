"""What a composed binding keeps of the spec it came from (`Binding.origin`), so that the AsyncAPI
document of a composed config (`ssekd.asyncapi`) says what the spec says: the same channels,
operations, messages and servers, under the same names.

Plain data, no behaviour, and part of the config model rather than of the asyncapi binding: the
asyncapi kinds write it, the document generator reads it, and neither knows the other (nothing
outside ssekd/bindings imports a binding's module).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class SpecRef:
    """A spec by its label, with its parsed document (refs as written)."""

    label: str
    document: Mapping[str, Any]


@dataclass(frozen=True)
class OperationOrigin:
    """The operation a composed sse-kafka or http-kafka route serves."""

    spec: SpecRef
    operation: str
    channel: str
    #: More of the spec the route serves: the reply channel of a write whose reply is polled,
    #: and the operation that receives from it (an http-kafka route of an asyncapi proxy).
    channels: tuple[str, ...] = ()
    operations: tuple[str, ...] = ()


@dataclass(frozen=True)
class ServerOrigin:
    """A spec server a composed tcp listener serves, on `port`."""

    spec: SpecRef
    server: str
    port: int


@dataclass(frozen=True)
class Origin:
    """`Binding.origin` of a binding an asyncapi binding composed."""

    #: The asyncapi binding that composed it, and its kind.
    composite: str
    kind: str
    #: Route index -> the operation it serves (sse-kafka routes of an asyncapi proxy).
    routes: Mapping[int, OperationOrigin] = field(default_factory=dict)
    #: The spec servers it listens for (the tcp server of an asyncapi server).
    servers: tuple[ServerOrigin, ...] = ()
