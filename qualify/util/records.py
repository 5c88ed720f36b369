"""Frozen dataclasses as the plain JSON values the reports hold."""

from __future__ import annotations

import dataclasses
from typing import Any


def _plain(value: Any) -> Any:
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def record_dict(obj: Any) -> dict[str, Any]:
    """Every field of the dataclass ``obj``, by name, recursively; tuples become lists, as JSON has no tuple.

    For records whose JSON form is exactly their fields. A record that renames, redacts or
    computes what it shows writes its own ``to_dict``.
    """
    data: dict[str, Any] = _plain(dataclasses.asdict(obj))
    return data
