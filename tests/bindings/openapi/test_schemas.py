"""OpenAPI schema objects as the JSON Schemas the request and response checks compile: 3.0's
dialect made draft-07 (`nullable`, boolean exclusive bounds), 3.1's taken as 2020-12."""

from __future__ import annotations

import jsonschema

from ssekd.bindings.openapi.spec import DRAFT_07, DRAFT_2020_12, json_schema

AGE = {"type": "integer", "minimum": 0, "exclusiveMinimum": True, "maximum": 150,
       "exclusiveMaximum": False, "nullable": True}


def valid(schema: object, value: object) -> bool:
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema).is_valid(value)


def test_a_3_0_schema_is_checked_as_openapi_3_0_means_it() -> None:
    schema = json_schema({"type": "object", "properties": {"age": AGE}}, "3.0.3")
    assert schema["$schema"] == DRAFT_07
    assert valid(schema, {"age": None}), "nullable allows null"
    assert not valid(schema, {"age": 0}), "exclusiveMinimum: true excludes the minimum"
    assert valid(schema, {"age": 1}) and valid(schema, {"age": 150})
    assert not valid(schema, {"age": 151})
    assert not valid(schema, {"age": "one"})


def test_a_3_1_schema_is_json_schema_2020_12_as_it_is() -> None:
    schema = json_schema({"type": ["integer", "null"], "exclusiveMinimum": 0}, "3.1.0")
    assert schema["$schema"] == DRAFT_2020_12
    assert valid(schema, None) and valid(schema, 1) and not valid(schema, 0)
