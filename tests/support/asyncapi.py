"""The official AsyncAPI 3.0.0 JSON Schema (npm `@asyncapi/specs`, installed by `make test`
through `make asyncapi-specs`), as a jsonschema validator. Its `schemas/3.0.0.json` bundles
every definition it refers to, so no network is needed to validate."""

from __future__ import annotations

import json
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema

ROOT = Path(__file__).resolve().parents[2]
SPECS = ROOT / ".venv" / "node" / "node_modules" / "@asyncapi" / "specs" / "schemas" / "3.0.0.json"


@cache
def validator() -> Any:
    if not SPECS.exists():  # pytest run by hand before `make test` ever ran: fetch it the same way
        subprocess.run(["make", "-s", "asyncapi-specs"], cwd=ROOT, check=True)
    schema = json.loads(SPECS.read_text(encoding="utf-8"))
    assert schema["$id"] == "http://asyncapi.com/definitions/3.0.0/asyncapi.json"
    return jsonschema.validators.validator_for(schema)(schema)


def problems(document: Any) -> list[str]:
    """Every way `document` breaks the AsyncAPI 3.0.0 schema (empty: it is valid)."""
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message[:300]}"
            for e in validator().iter_errors(document)]
