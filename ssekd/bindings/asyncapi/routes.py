"""`when` of the asyncapi server and proxy routes: which operations of which spec a route takes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ssekd.bindings.asyncapi.spec import Operation, glob_match


def matches(when: Mapping[str, Any], label: str, operation: Operation) -> bool:
    """Whether a `when` item takes `operation` of spec `label`: every field it gives must
    match (`spec` the label, `operation` the id or a glob of it, `tag` one of its tags)."""
    if "spec" in when and when["spec"] != label:
        return False
    if "operation" in when and not glob_match(str(when["operation"]), operation.key):
        return False
    return "tag" not in when or when["tag"] in operation.tags
