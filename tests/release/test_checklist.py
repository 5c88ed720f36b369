"""Tests for qualify.release.checklist: the checks each level consists of are the check catalogue's (which the
suites pytest collects are held to in tests/run/test_suite_checks.py)."""

from __future__ import annotations

import subprocess
import sys

from qualify.checks.catalogue import CATALOGUE
from qualify.core import LEVELS
from qualify.release.checklist import level_checks, level_of_check
from tests.helpers import REPO


def test_each_levels_checks_are_the_catalogues_in_run_order() -> None:
    defined = level_checks()
    assert list(defined) == list(LEVELS)
    assert [cid for ids in defined.values() for cid in ids] == [spec.id for spec in CATALOGUE]
    assert all(defined[lv] for lv in ("structure", "format", "reproduction", "load", "smoke"))
    assert defined["format"][:2] == ("format.weights", "format.scales")


def test_a_check_id_names_its_level_by_its_prefix() -> None:
    assert level_of_check("format.scales") == "format"
    assert level_of_check("format") is None  # a bare level is no check
    assert level_of_check("nolevel.check") is None


def test_the_list_is_read_without_the_suites_or_torch() -> None:
    code = ("import sys; from qualify.release.checklist import level_checks; level_checks(); "
            "print(sorted({'torch', 'pytest'} & set(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert out.stdout.strip() == "[]"
