"""JSON Schemas shipped with the package, and one function to validate against them."""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

import jsonschema

from qualify.errors import UsageError


@cache
def load_schema(name: str) -> dict[str, Any]:
    text = resources.files(__package__).joinpath(f"{name}.schema.json").read_text(encoding="utf-8")
    schema = json.loads(text)
    jsonschema.Draft202012Validator.check_schema(schema)
    return schema


def schema_errors(data: Any, name: str) -> list[str]:
    """Every violation of schema ``name`` in ``data``, as ``path: message`` lines, sorted by path."""
    validator = jsonschema.Draft202012Validator(load_schema(name))
    errors = sorted(validator.iter_errors(data), key=lambda e: [str(p) for p in e.absolute_path])
    return [f"{_path(e.absolute_path)}: {e.message}" for e in errors]


def validate(data: Any, name: str, *, what: str | None = None) -> None:
    errors = schema_errors(data, name)
    if errors:
        shown = "; ".join(errors[:5])
        more = f" (and {len(errors) - 5} more)" if len(errors) > 5 else ""
        raise UsageError(f"{what or name} fails its schema: {shown}{more}")


def _path(parts: Any) -> str:
    out = "$"
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else f".{p}"
    return out
