"""The test data kept in `tests/data/` (see its README for where each file comes from)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parents[1] / "data"

#: The full example zilla.yaml of Zilla's SSE-Kafka documentation.
ZILLA_EXAMPLE = DATA / "zilla-example.yaml"
#: The zilla.yaml of Zilla's todo demo (todo-mvc-cqrs), as published.
ZILLA_TODO_DEMO = DATA / "zilla-todo-demo.yaml"


def event_id_vectors() -> dict[str, Any]:
    """Event-id vectors distilled from Zilla's SSE-Kafka protocol tests and documentation."""
    data: dict[str, Any] = json.loads((DATA / "event-ids.json").read_text())
    return data
