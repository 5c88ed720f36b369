"""qualify.core: evidence passes only without findings, a level is as good as its worst check, measurements
stay JSON."""

from __future__ import annotations

import pytest

from qualify import core as c
from qualify.core import Evidence, Status, combine


@pytest.mark.parametrize(
    ("statuses", "expected"),
    [
        ([], Status.NOT_RUN),
        ([Status.PASSED], Status.PASSED),
        ([Status.PASSED, Status.SKIPPED], Status.SKIPPED),
        ([Status.PASSED, Status.NOT_RUN], Status.NOT_RUN),
        ([Status.SKIPPED, Status.FAILED], Status.FAILED),
        ([Status.FAILED, Status.ERROR], Status.ERROR),
    ],
)
def test_level_status_is_the_worst_of_its_checks(statuses, expected):
    assert combine(statuses) is expected


def test_findings_are_capped_but_counted():
    ev = Evidence("rule")
    for i in range(c.MAX_FINDINGS + 7):
        ev.add(f"p{i}")
    assert len(ev.findings) == c.MAX_FINDINGS
    assert ev.to_dict()["findings_total"] == c.MAX_FINDINGS + 7
    assert "and 7 more" in ev.failure_text()


def test_failure_text_lists_findings_and_counts_the_rest():
    ev = Evidence("the rule")
    assert ev.ok and ev.failure_text() == "the rule\n"
    ev.add("one", file="f")
    ev.add("two", tensor="t")
    assert not ev.ok
    assert ev.failure_text() == "the rule\n  - f: one\n  - tensor 't': two"
    assert str(c.Finding("m", None, None)) == "m"


def test_measured_values_become_json_safe() -> None:
    import math
    from pathlib import Path

    import torch

    class Thing:
        def __str__(self) -> str:
            return "a thing"

    value = {1: (1.5, math.nan, math.inf, -math.inf), "path": Path("a/b.json"), "tensor": torch.tensor(3),
             "list": [True, None, "s", 7], "thing": Thing(), "nested": {"t": (1,)}}
    assert c.jsonable(value) == {"1": [1.5, "nan", "inf", "-inf"], "path": "a/b.json", "tensor": 3,
                                "list": [True, None, "s", 7], "thing": "a thing", "nested": {"t": [1]}}
