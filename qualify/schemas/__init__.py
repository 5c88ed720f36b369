"""JSON Schemas shipped with the package, and one function to validate against them."""

from __future__ import annotations

import json
import math
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


def _is_integer(checker: Any, instance: Any) -> bool:
    # JSON Schema counts 32.0 as an integer; a count, size or group written as a float is a
    # producer's mistake that Python would then compare equal to 32, so it is refused.
    return isinstance(instance, int) and not isinstance(instance, bool)


def _is_number(checker: Any, instance: Any) -> bool:
    # TOML reads nan and inf, and "minimum" lets both through: a NaN tolerance makes every
    # comparison pass, an infinite one accepts any claim. A number here is finite.
    return (isinstance(instance, (int, float)) and not isinstance(instance, bool)
            and math.isfinite(instance))


#: Draft 2020-12, with "integer" meaning a JSON integer literal and "number" a finite one.
StrictValidator = jsonschema.validators.extend(
    jsonschema.Draft202012Validator,
    type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER.redefine_many(
        {"integer": _is_integer, "number": _is_number}),
)


def schema_errors(data: Any, name: str) -> list[str]:
    """Every violation of schema ``name`` in ``data``, as ``path: message`` lines, sorted by path.

    Stricter than plain JSON Schema in two ways (:data:`StrictValidator`): an integer is never
    written as a float (``32.0``), and a number is finite (no NaN, no infinity).
    """
    validator = StrictValidator(load_schema(name))
    errors = sorted(validator.iter_errors(data), key=lambda e: [str(p) for p in e.absolute_path])
    return [f"{_path(e.absolute_path)}: {_message(e)}" for e in errors]


def _message(error: jsonschema.ValidationError) -> str:
    value = error.instance
    if error.validator == "type" and isinstance(value, float):
        if not math.isfinite(value):
            return f"{value} is not a finite number"
        if value.is_integer():
            return f"{value!r} is written as a float; an integer is required"
    return error.message


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
