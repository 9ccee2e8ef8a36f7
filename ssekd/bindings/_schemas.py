"""Schema fragments several binding types share (names, paths, ports)."""

from __future__ import annotations

from typing import Any

STRING_LIST: dict[str, Any] = {"type": "array", "items": {"type": "string"}}

PORT: dict[str, Any] = {
    "anyOf": [
        {"type": "integer", "minimum": 1, "maximum": 65535},
        {"type": "string", "pattern": r"^[0-9]{1,5}(-[0-9]{1,5})?$"},
    ],
    "x-expected": "a port 1-65535 or a range such as \"8080-8090\"",
}

PORTS: dict[str, Any] = {
    "anyOf": [PORT, {"type": "array", "minItems": 1, "items": PORT}],
    "x-expected": "a port, a range such as \"8080-8090\", or a list of them",
}

PATH_WHEN: dict[str, Any] = {
    "type": "object", "additionalProperties": False, "required": ["path"],
    "properties": {"path": {"type": "string", "pattern": "^/",
                            "x-expected": "a path starting with /",
                            "description": "Pattern for the request path, query string left out: "
                                           "`*` matches anything, `{name}` captures a segment "
                                           "for `${params.name}` in `with`."}},
}
