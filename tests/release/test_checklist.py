"""Tests for qualify.release.checklist: the checks each level consists of, read from the suites' source
without importing them, are exactly what pytest collects from them."""

from __future__ import annotations

from pathlib import Path

import pytest

from qualify.errors import HarnessError
from qualify.release.checklist import level_checks, level_of_check, suite_checks
from qualify.report.model import LEVELS
from tests.helpers import REPO


def test_the_check_list_is_what_the_suites_collect():
    """The list the gate reads from the suites' source is exactly what pytest collects from them."""
    import pytest as pt

    from qualify.run.suite_plugin import check_id, level_of

    collected: list[str] = []

    class Collector:
        def pytest_collection_finish(self, session):
            collected.extend(check_id(it, level_of(it)) for it in session.items if level_of(it))

    code = pt.main([str(REPO / "suites"), "--collect-only", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
                    f"--confcutdir={REPO}"], plugins=[Collector()])
    assert code == 0
    defined = level_checks()
    assert sorted(collected) == sorted(cid for ids in defined.values() for cid in ids)
    assert set(defined) == set(LEVELS)
    assert all(defined[lv] for lv in ("structure", "format", "reproduction", "load", "smoke"))


def test_a_suite_module_is_read_without_importing_it():
    source = ("import pytest\npytestmark = pytest.mark.format\n"
              "def test_a(): pass\nasync def test_b(): pass\ndef helper(): pass\n")
    assert suite_checks(source) == ("format", ("format.a", "format.b"))
    assert suite_checks("def test_a(): pass\n") == (None, ())
    with pytest.raises(HarnessError, match="carries a level mark of its own"):
        suite_checks("import pytest\npytestmark = pytest.mark.format\n@pytest.mark.load\ndef test_a(): pass\n")
    with pytest.raises(HarnessError, match="does not parse"):
        suite_checks("def test_a(:\n")



def test_a_check_id_names_its_level_by_its_prefix() -> None:
    assert level_of_check("format.scales") == "format"
    assert level_of_check("format") is None  # a bare level is no check
    assert level_of_check("nolevel.check") is None


def test_missing_suites_are_a_harness_error(tmp_path: Path) -> None:
    with pytest.raises(HarnessError, match="the qualification suites are missing"):
        level_checks(tmp_path / "absent")
    (tmp_path / "test_x.py").write_text("import pytest\npytestmark = pytest.mark.smoke\ndef test_one(): pass\n")
    (tmp_path / "helper.py").write_text("def test_not_a_suite(): pass\n")
    checks = level_checks(tmp_path)
    assert checks["smoke"] == ("smoke.one",) and set(checks) == set(LEVELS)
    assert all(ids == () for level, ids in checks.items() if level != "smoke")
