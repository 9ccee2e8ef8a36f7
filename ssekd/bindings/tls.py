"""tls server: placeholder registration until TLS lands (issue 4)."""

from __future__ import annotations

from typing import Any

from ssekd.bindings import BindingType, KindSpec
from ssekd.bindings._schemas import STRING_LIST


def _build(ctx: Any, binding: Any) -> object:
    raise NotImplementedError("the tls binding is not built yet")


OPTIONS = {"type": "object", "additionalProperties": False, "properties": {
    "keys": STRING_LIST,
    "trust": STRING_LIST,
    "signers": STRING_LIST,
    "trustcacerts": {"type": "boolean"},
    "sni": STRING_LIST,
    "alpn": {"type": "array", "items": {"enum": ["http/1.1", "h2"]}},
    "mutual": {"enum": ["required", "requested", "none"]},
}}

BINDING = BindingType("tls", {
    "server": KindSpec(
        role="stream", build=_build, exit="required", exit_roles=("stream",), vault=True,
        options=OPTIONS,
        when={"type": "object", "additionalProperties": False, "properties": {
            "authority": {"type": "string"}, "alpn": {"type": "string"}}},
    ),
})
