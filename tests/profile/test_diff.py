"""Tests for qualify.profile.diff: two profiles compared key by key."""

from __future__ import annotations

from typing import Any

from qualify.profile import Profile
from qualify.profile.diff import ABSENT, diff_profiles, flatten, render_value


def _base() -> dict[str, Any]:
    return {
        "name": "a",
        "runtime": {"env": {"TP": "4", "A.B": "x"}, "endpoint": "http://127.0.0.1:8000/v1"},
        "evidence": [{"name": "one", "pattern": "p1"}, {"name": "two", "pattern": "p2"}],
        "paired": {"concurrency": [1, 16], "prompt_sets": [{"path": "a.jsonl"}, {"path": "b.jsonl"}]},
    }


def test_flatten_names_every_value_by_its_dotted_key() -> None:
    flat = flatten(_base())
    assert flat["runtime.env.TP"] == "4"
    assert flat['runtime.env["A.B"]'] == "x"  # a key with a dot is quoted, never read as two keys
    assert flat["evidence[name=one].pattern"] == "p1"
    assert flat["paired.concurrency"] == [1, 16]  # an array of plain values is one value
    assert flat["paired.prompt_sets[1].path"] == "b.jsonl"  # items without names go by position


def test_identical_profiles_have_no_difference(seed_profile: Profile) -> None:
    assert diff_profiles(_base(), _base()) == []
    assert diff_profiles(seed_profile, seed_profile) == []


def test_each_changed_value_is_one_difference_under_its_key() -> None:
    b = _base()
    b["runtime"]["env"]["TP"] = "2"
    b["evidence"][1]["pattern"] = "other"
    b["paired"]["concurrency"] = [1, 4]
    diffs = {d.key: (d.a, d.b) for d in diff_profiles(_base(), b)}
    assert diffs == {"runtime.env.TP": ("4", "2"), "evidence[name=two].pattern": ("p2", "other"),
                     "paired.concurrency": ([1, 16], [1, 4])}


def test_a_table_on_one_side_is_one_difference_carrying_its_keys() -> None:
    b = _base()
    b["orchestration"] = {"arms": "sequential", "order": {"first": "source"}}
    del b["evidence"][0]
    diffs = {d.key: d for d in diff_profiles(_base(), b)}
    assert set(diffs) == {"orchestration", "evidence[name=one]"}
    assert diffs["orchestration"].a is None and diffs["orchestration"].one_sided
    assert diffs["orchestration"].leaves == ("orchestration.arms", "orchestration.order.first")
    assert diffs["evidence[name=one]"].b is None
    assert diffs["evidence[name=one]"].leaves == ("evidence[name=one].name", "evidence[name=one].pattern")


def test_a_value_of_another_type_differs_even_when_equal() -> None:
    b = _base()
    b["runtime"]["env"]["TP"] = 4
    assert [d.key for d in diff_profiles(_base(), b)] == ["runtime.env.TP"]
    b = _base()
    b["temperature"] = 1
    a = _base()
    a["temperature"] = True  # True == 1 in Python; a profile's boolean is not its number
    assert [d.key for d in diff_profiles(a, b)] == ["temperature"]


def test_values_render_as_one_short_line() -> None:
    assert render_value(None) == ABSENT
    assert render_value({"a": 1, "b": 2}) == "table of 2 key(s)"
    assert render_value([{"a": 1}]) == "array of 1 table(s)"
    assert render_value("x") == "'x'"
    assert render_value(False) == "false" and render_value([1, 4]) == "[1, 4]"
