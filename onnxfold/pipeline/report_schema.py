"""The JSON report's schema (``report.schema.json``, shipped in the package) and a checker.

The checker covers the part of JSON Schema the file uses (``type``, ``required``,
``properties``, ``additionalProperties``, ``items``, ``const``, ``enum``, ``minimum``), so
that validating a report needs no dependency; ``jsonschema`` reads the same file.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

SCHEMA_FILE = "report.schema.json"
_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,), "array": (list,), "string": (str,), "boolean": (bool,),
    "integer": (int,), "number": (int, float), "null": (type(None),),
}


def load_schema() -> dict:
    """The schema of ``onnxfold optimize --json`` (docs/report-json.md)."""
    return json.loads(resources.files("onnxfold").joinpath(SCHEMA_FILE).read_text())


def validate(instance: Any, schema: dict | None = None) -> list[str]:
    """Every place ``instance`` breaks ``schema`` (the report schema by default), as
    ``path: problem`` lines; empty when it conforms."""
    errors: list[str] = []
    _check(instance, load_schema() if schema is None else schema, "$", errors)
    return errors


def _is(value: Any, name: str) -> bool:
    if isinstance(value, bool) and name in ("integer", "number"):
        return False  # JSON's true is not a number
    return isinstance(value, _TYPES[name])


def _check(value: Any, schema: dict, path: str, errors: list[str]) -> None:
    if "const" in schema and value != schema["const"]:
        errors.append(f"{path}: {value!r} is not {schema['const']!r}")
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{path}: {value!r} is not one of {schema['enum']!r}")
    if "type" in schema:
        names = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(_is(value, name) for name in names):
            errors.append(f"{path}: {type(value).__name__} where {'/'.join(names)} is expected")
            return
    if "minimum" in schema and _is(value, "number") and value < schema["minimum"]:
        errors.append(f"{path}: {value!r} is below {schema['minimum']!r}")
    if isinstance(value, dict):
        errors.extend(f"{path}: missing {key!r}" for key in schema.get("required", ())
                      if key not in value)
        properties = schema.get("properties", {})
        extra = schema.get("additionalProperties", True)
        for key, item in value.items():
            if key in properties:
                _check(item, properties[key], f"{path}.{key}", errors)
            elif extra is False:
                errors.append(f"{path}: unexpected key {key!r}")
            elif isinstance(extra, dict):
                _check(item, extra, f"{path}.{key}", errors)
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            _check(item, schema["items"], f"{path}[{i}]", errors)
