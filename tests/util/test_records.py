"""Tests for qualify.util.records: a frozen record's JSON form is its fields, tuples as lists."""

from __future__ import annotations

import json
from dataclasses import dataclass

from qualify.util.records import record_dict


@dataclass(frozen=True)
class Inner:
    values: tuple[int, ...]


@dataclass(frozen=True)
class Outer:
    name: str
    inner: Inner
    pairs: tuple[tuple[str, int], ...]
    extra: dict[str, tuple[int, ...]]


def test_a_record_becomes_plain_json_values() -> None:
    data = record_dict(Outer("x", Inner((1, 2)), (("a", 1),), {"k": (3,)}))
    assert data == {"name": "x", "inner": {"values": [1, 2]}, "pairs": [["a", 1]], "extra": {"k": [3]}}
    assert json.loads(json.dumps(data)) == data  # nothing a JSON round trip would change
