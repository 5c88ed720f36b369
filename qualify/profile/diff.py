"""Two profiles compared key by key: what differs, under flattened dotted keys.

A profile is a tree of TOML tables. :func:`flatten` turns it into one key per value:
``runtime.env.TP``, ``paired.concurrency`` (an array of plain values is one value), an array of tables
by each item's ``name`` where every item has a distinct one (``evidence[name=draft_weights_loaded].pattern``),
else by position (``paired.prompt_sets[0].path``). :func:`diff_profiles` lists every key whose value
differs; a table or array item present on one side only is one difference, named by its own key and
carrying every leaf key under it (so a rule about those keys can judge the whole table).

Pure functions on the parsed TOML; :mod:`qualify.profile.rehearsal` judges the differences.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from qualify.profile.model import Profile

#: A key segment written bare; anything else is quoted (``env["A.B"]``), so no key can pass for another.
_BARE = re.compile(r"[A-Za-z0-9_-]+")
#: Stands for the side a key is absent from.
ABSENT = "(absent)"


@dataclass(frozen=True)
class Difference:
    """One key whose value differs between profile A and profile B.

    ``a``/``b`` are the values (``None`` where the key is absent on that side); ``leaves`` are the
    value keys under ``key`` on the side that has it (``(key,)`` for a plain value).
    """

    key: str
    a: Any
    b: Any
    leaves: tuple[str, ...]

    @property
    def one_sided(self) -> bool:
        return self.a is None or self.b is None


def _segment(name: str) -> str:
    return name if _BARE.fullmatch(name) else '["' + name.replace("\\", "\\\\").replace('"', '\\"') + '"]'


def _join(prefix: str, name: str) -> str:
    seg = _segment(name)
    if not prefix:
        return seg
    return prefix + seg if seg.startswith("[") else f"{prefix}.{seg}"


def _named_items(items: list[Any]) -> dict[str, Any] | None:
    """An array of tables keyed by ``name=...`` when every item has a distinct string ``name``; else None."""
    if not items or not all(isinstance(x, Mapping) and isinstance(x.get("name"), str) for x in items):
        return None
    names = [x["name"] for x in items]
    if len(set(names)) != len(names):
        return None
    return {f"name={_segment(n).removeprefix('[').removesuffix(']')}": x for n, x in zip(names, items, strict=True)}


def _children(value: Any) -> dict[str, Any] | None:
    """A node's children by the key segment that names each, or None for a plain value."""
    if isinstance(value, Mapping):
        return {k: v for k, v in value.items()}
    if isinstance(value, list) and value and all(isinstance(x, Mapping) for x in value):
        named = _named_items(value)
        return named if named is not None else {str(i): x for i, x in enumerate(value)}
    return None


def _child_key(prefix: str, segment: str, parent: Any) -> str:
    if isinstance(parent, list):
        return f"{prefix}[{segment}]"
    return _join(prefix, segment)


def flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Every plain value of ``data`` under its dotted key (see the module's docstring)."""
    out: dict[str, Any] = {}

    def walk(key: str, value: Any) -> None:
        children = _children(value)
        if children is None:
            out[key] = value
            return
        for seg, child in children.items():
            walk(_child_key(key, seg, value), child)

    for name, value in data.items():
        walk(_join(prefix, name), value)
    return out


def diff_profiles(a: Profile | Mapping[str, Any], b: Profile | Mapping[str, Any]) -> list[Difference]:
    """Every key whose value differs between ``a`` and ``b``, in A's key order then B's."""
    left = a.data if isinstance(a, Profile) else a
    right = b.data if isinstance(b, Profile) else b
    out: list[Difference] = []

    def walk(key: str, x: Any, y: Any) -> None:
        if x is None or y is None:
            present = x if y is None else y
            leaves = tuple(flatten({"_": present}, "").keys())
            out.append(Difference(key, x, y, tuple(key + leaf[1:] for leaf in leaves)))
            return
        cx, cy = _children(x), _children(y)
        # Both tables (or both arrays of tables keyed the same way): compare child by child.
        if cx is not None and cy is not None and isinstance(x, Mapping) == isinstance(y, Mapping):
            for seg in [*cx, *(s for s in cy if s not in cx)]:
                walk(_child_key(key, seg, x), cx.get(seg), cy.get(seg))
            return
        if x != y or type(x) is not type(y):
            leaves = tuple(flatten({"_": x if cx is not None else y}, "").keys()) if (cx or cy) else ("_",)
            out.append(Difference(key, x, y, tuple(key + leaf[1:] for leaf in leaves)))

    for name in [*left, *(k for k in right if k not in left)]:
        walk(_join("", name), left.get(name), right.get(name))
    return out


def render_value(value: Any) -> str:
    """A value in a few words: a table by its size, a string quoted as it is, anything else as TOML-ish text."""
    if value is None:
        return ABSENT
    if isinstance(value, Mapping):
        return f"table of {len(value)} key(s)"
    if isinstance(value, list) and value and all(isinstance(x, Mapping) for x in value):
        return f"array of {len(value)} table(s)"
    if isinstance(value, str):
        return f"'{value}'"  # as it is: whoever shows it escapes it once (qualify.util.escape)
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
