"""The demo producer's values satisfy the JSON Schema etc/zilla.yaml gives the demo topic, so
`make run` shows every record it writes (an invalid one would be skipped at the cache)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import jsonschema

from ssekd.dev.demo_producer import KEYS, reading

ROOT = Path(__file__).resolve().parents[2]


def test_demo_values_are_valid_and_the_schema_is_strict_enough() -> None:
    schema = json.loads((ROOT / "etc" / "schemas" / "events.json").read_text())
    validator = jsonschema.validators.validator_for(schema)(schema)
    rng = random.Random(7)
    for seq in range(1000):
        value = json.loads(json.dumps(reading(rng, rng.choice(KEYS), seq)))
        assert list(validator.iter_errors(value)) == [], value
    assert not validator.is_valid({"key": "k", "temperature": "warm", "seq": 1, "at": 0})
    assert not validator.is_valid({"temperature": 20.0, "seq": 1, "at": 0})
