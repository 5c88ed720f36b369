"""Tests for qualify.run.suite_plugin: each suite test becomes one check of its level, and nothing but
recorded evidence without findings is a pass (a test that records nothing, breaks, or is skipped is
not); levels from load on do not run after a required level that did not pass. Small suites are run
in-process by pytest with the plugin, as qualify run runs the real ones."""

from __future__ import annotations

import textwrap
import uuid
from pathlib import Path
from typing import Any

import pytest

from qualify.core import Status
from qualify.profile import load_profile
from qualify.report.model import Run
from qualify.run.context import RunContext
from qualify.run.runner import new_run
from qualify.run.suite_plugin import QualifyPlugin, check_id, level_of

STRUCTURE_SUITE = '''
import pytest

from qualify.errors import HarnessError, ManifestError
from qualify.core import Evidence
from qualify.run.suite_plugin import record

pytestmark = pytest.mark.structure


def test_passes(record):
    """A check whose evidence has no finding."""
    record(Evidence("all files listed"))


def test_records_nothing():
    pass


def test_finds_a_problem(record):
    ev = Evidence("one file unlisted")
    ev.add("not in the manifest", file="extra.json")
    record(ev)


def test_is_skipped():
    pytest.skip("no source folder given")


def test_the_harness_breaks():
    raise HarnessError("cannot read the report folder")


def test_a_bug():
    raise KeyError("oops")


@pytest.fixture(scope="module")
def broken_input():
    raise ManifestError("fails its schema", file="conversion_manifest.json")


def test_first_user_of_a_broken_input(broken_input):
    pass


def test_second_user_of_a_broken_input(broken_input):
    pass
'''

LEVEL_SUITE = '''
import pytest

from qualify.core import Evidence
from qualify.run.suite_plugin import record

pytestmark = pytest.mark.{level}


def test_{level}_check(record):
    record(Evidence("{level} shown"))
'''


def run_suites(tmp_path: Path, levels: list[str], structure: str = STRUCTURE_SUITE) -> Run:
    suites = tmp_path / "suites"
    suites.mkdir(parents=True)
    # Names no earlier call used: pytest reuses a module already imported under the same name.
    tag = uuid.uuid4().hex[:12]
    (suites / f"test_{tag}_structure.py").write_text(textwrap.dedent(structure))
    for level in ("load", "format"):
        (suites / f"test_{tag}_{level}.py").write_text(LEVEL_SUITE.format(level=level))
    run = new_run(load_profile("fixture"), None, None, levels)
    finished: list[Run] = []
    plugin = QualifyPlugin(run, RunContext(load_profile("fixture")), on_finish=finished.append)
    pytest.main([str(suites), "-q", "-p", "no:cacheprovider", "-o", "addopts=", f"--rootdir={suites}",
                 "--import-mode=importlib",
                 f"--confcutdir={suites}", "-W", "ignore::pytest.PytestUnknownMarkWarning"], plugins=[plugin])
    assert finished == [run]  # the report is handed on at the session's end
    return run


def statuses(run: Run, level: str) -> dict[str, tuple[Status, str]]:
    return {c.id: (c.status, c.message) for c in run.level(level).checks}


def test_each_test_is_one_check_and_only_clean_evidence_passes(tmp_path: Path) -> None:
    run = run_suites(tmp_path, ["structure"])
    got = statuses(run, "structure")
    assert got["structure.passes"] == (Status.PASSED, "all files listed")
    assert got["structure.records_nothing"] == (Status.ERROR, "the check recorded no evidence")
    assert got["structure.finds_a_problem"] == (Status.FAILED, "one file unlisted")
    assert got["structure.is_skipped"] == (Status.SKIPPED, "no source folder given")
    assert got["structure.the_harness_breaks"] == (Status.ERROR, "cannot read the report folder")
    assert got["structure.a_bug"] == (Status.ERROR, "KeyError: 'oops'")
    assert run.level("structure").status is not Status.PASSED
    check = next(c for c in run.level("structure").checks if c.id == "structure.passes")
    assert check.title == "A check whose evidence has no finding."
    assert check.evidence is not None and check.evidence.ok


def test_a_broken_input_fails_its_first_check_once_and_the_others_are_not_run(tmp_path: Path) -> None:
    run = run_suites(tmp_path, ["structure"])
    first = next(c for c in run.level("structure").checks if c.id == "structure.first_user_of_a_broken_input")
    assert first.status is Status.FAILED and first.message == "an input this check reads is broken"
    assert first.evidence is not None and "fails its schema" in first.evidence.failure_text()
    assert statuses(run, "structure")["structure.second_user_of_a_broken_input"] == (
        Status.NOT_RUN, "not run: an input it needs is broken (see structure.first_user_of_a_broken_input)")


def test_only_the_runs_levels_are_collected_in_level_order(tmp_path: Path) -> None:
    run = run_suites(tmp_path, ["structure", "format"], structure="")
    assert statuses(run, "format") == {"format.format_check": (Status.PASSED, "format shown")}
    assert run.level("structure").checks == []
    assert run.level("structure").reason == "no check of this level was run"  # an empty level never passes


def test_a_gated_level_is_not_run_after_a_required_level_that_did_not_pass(tmp_path: Path) -> None:
    run = run_suites(tmp_path, ["structure", "load"])
    (load,) = run.level("load").checks
    assert load.status is Status.NOT_RUN
    assert load.message.startswith("not run: level structure ") and load.message.endswith(" before it")
    assert run.level("load").reason == load.message
    clean = run_suites(tmp_path / "clean", ["structure", "load"], structure=LEVEL_SUITE.format(level="structure"))
    assert statuses(clean, "load") == {"load.load_check": (Status.PASSED, "load shown")}


def test_a_check_id_is_its_level_and_its_name_without_test(tmp_path: Path) -> None:
    class Item:
        name = "test_scales[param]"
        originalname = "test_scales"

        def get_closest_marker(self, name: str) -> object:
            return object() if name == "format" else None

    item = Item()
    assert level_of(item) == "format"  # type: ignore[arg-type]
    assert check_id(item, "format") == "format.scales"  # type: ignore[arg-type]


FAILING_SUITE = '''
import pytest

from qualify.core import Evidence
from qualify.run.suite_plugin import record


@pytest.mark.{level}
def test_{level}_fails(record):
    ev = Evidence("{level} answered")
    ev.add("connection failed: the server is down")
    record(ev)
'''


def run_failing(tmp_path: Path, level: str, fault: Any) -> tuple[Status, str]:
    """One check of ``level`` that fails, run while the probe says ``fault``: its status and message."""
    suites = tmp_path / level
    suites.mkdir()
    (suites / f"test_{uuid.uuid4().hex[:12]}_{level}.py").write_text(FAILING_SUITE.format(level=level))
    run = new_run(load_profile("fixture"), None, None, [level])
    plugin = QualifyPlugin(run, RunContext(load_profile("fixture")))
    plugin.fault_probes.append(lambda: fault)
    pytest.main([str(suites), "-q", "-p", "no:cacheprovider", "-o", "addopts=", f"--rootdir={suites}",
                 "--import-mode=importlib", f"--confcutdir={suites}", "-W", "ignore::pytest.PytestUnknownMarkWarning"],
                plugins=[plugin])
    return statuses(run, level)[f"{level}.{level}_fails"]


@pytest.mark.slow
def test_a_serving_check_failing_while_the_machine_killed_its_server_is_an_error(tmp_path: Path) -> None:
    from qualify.errors import ContainerKilled

    fault = ContainerKilled("the runtime container qualify-x was killed for memory (the engine's State.OOMKilled)")
    status, message = run_failing(tmp_path, "smoke", fault)
    assert status is Status.ERROR
    assert message.startswith("not judged: the runtime container qualify-x was killed for memory")
    assert run_failing(tmp_path, "acceptance", None) == (Status.FAILED, "acceptance answered")  # no fault: its own
    # Before the runtime is up, a failure is the checkpoint's whatever the machine does later.
    assert run_failing(tmp_path, "structure", fault) == (Status.FAILED, "structure answered")
