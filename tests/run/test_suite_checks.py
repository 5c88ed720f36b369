"""qualify.run.suite_checks: the suites are the catalogue. pytest collects from suites/ exactly the declared checks
of each level, under their ids, each set up with exactly its declared inputs and ``record``; a suite test records
what its check's function returns, and skips where that says so."""

from __future__ import annotations

import inspect
import textwrap
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from qualify.checks.catalogue import CATALOGUE, CheckSpec, by_id, level_checks
from qualify.core import LEVELS, Evidence, Status
from qualify.errors import HarnessError
from qualify.profile import load_profile
from qualify.report.model import Run
from qualify.run.checks.result import Measured, Skipped
from qualify.run.context import RunContext
from qualify.run.runner import new_run
from qualify.run.suite_checks import check_function, record_result, suite_checks, suite_test
from qualify.run.suite_plugin import QualifyPlugin, check_id, check_title, level_of
from tests.helpers import REPO


@dataclass(frozen=True)
class Collected:
    id: str
    levels: tuple[str, ...]  # every level marker the test carries
    argnames: tuple[str, ...]  # the fixtures pytest sets up for it, as its signature names them
    title: str
    path: str


@pytest.fixture(scope="module")
def collected() -> list[Collected]:
    """What pytest collects from suites/, as qualify run collects it (the plugin reads the same items)."""
    items: list[Collected] = []

    class Collector:
        def pytest_collection_finish(self, session: pytest.Session) -> None:
            for item in session.items:
                level = level_of(item)
                assert isinstance(item, pytest.Function)
                items.append(Collected(
                    check_id(item, level) if level else item.nodeid,
                    tuple(lv for lv in LEVELS if item.get_closest_marker(lv) is not None),
                    tuple(item._fixtureinfo.argnames), check_title(item, level) if level else "",
                    Path(item.path).name))

    code = pytest.main([str(REPO / "suites"), "--collect-only", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
                        "--strict-markers", f"--confcutdir={REPO}"], plugins=[Collector()])
    assert code == 0
    return items


def test_the_suites_run_exactly_the_catalogues_checks_per_level(collected: list[Collected]) -> None:
    """A suite that runs a check the catalogue does not declare, or a declared check no suite runs, fails here."""
    by_level = {level: tuple(c.id for c in collected if c.levels == (level,)) for level in LEVELS}
    assert by_level == level_checks()
    assert len(collected) == len(CATALOGUE)  # and no test without a level, or with two


def test_each_suite_test_takes_its_checks_inputs_and_record(collected: list[Collected]) -> None:
    wrong = []
    for c in collected:
        spec = by_id(c.id)
        assert spec is not None
        if c.argnames != (*spec.inputs, "record"):
            wrong.append(f"{c.id}: set up with {c.argnames}, declared {spec.inputs}")
        if c.title != spec.title:
            wrong.append(f"{c.id}: titled {c.title!r}")
    assert wrong == []


def test_a_level_is_one_suite_module(collected: list[Collected]) -> None:
    files = {level: {c.path for c in collected if c.levels == (level,)} for level in LEVELS}
    assert files["structure"] == {"test_manifest.py"}
    assert all(names == {f"test_{level}.py"} for level, names in files.items() if level != "structure")


def test_a_suite_test_is_named_and_signed_as_its_check() -> None:
    spec = CATALOGUE[0]
    test = suite_test(spec)
    assert test.__name__ == f"test_{spec.name}" and test.__doc__ == spec.title
    assert tuple(inspect.signature(test).parameters) == (*spec.inputs, "record")
    assert list(suite_checks("reproduction")) == ["test_quantized_tensors", "test_unquantized_tensors"]
    with pytest.raises(HarnessError, match="'manifest' is no level"):
        suite_checks("manifest")


# ---- what a suite test does with its function's result

def _spec(function: str, inputs: tuple[str, ...] = ()) -> CheckSpec:
    return CheckSpec("throughput.probe", "A probe.", "A check of these tests.", f"{__name__}:{function}", inputs)


def measured_probe() -> Measured:
    return Measured(Evidence("120.0 output tokens/s"), "the profile states no bound")


def failing_probe(value: int) -> Evidence:
    ev = Evidence(f"value {value}")
    ev.add(f"{value} is too small")
    return ev


def passing_probe(value: int) -> Evidence:
    return Evidence(f"value {value}")


def skipped_probe() -> Skipped:
    return Skipped("profile p states no [probe] table")


def wrong_probe() -> str:
    return "a string"


def test_evidence_is_recorded() -> None:
    recorded: list[Evidence] = []
    suite_test(_spec("passing_probe", ("value",)))(value=3, record=recorded.append)
    assert recorded == [Evidence("value 3")]


def test_a_measurement_is_recorded_then_skipped_and_a_skip_records_nothing() -> None:
    recorded: list[Evidence] = []
    with pytest.raises(pytest.skip.Exception, match=r"^throughput measured \(120.0 output tokens/s\) but not "
                                                    r"qualified: the profile states no bound$"):
        record_result(_spec("measured_probe"), measured_probe(), recorded.append)
    assert recorded == [Evidence("120.0 output tokens/s")]
    with pytest.raises(pytest.skip.Exception, match=r"^profile p states no \[probe\] table$"):
        suite_test(_spec("skipped_probe"))(record=recorded.append)
    assert len(recorded) == 1


def test_anything_else_is_a_harness_error_naming_the_check() -> None:
    with pytest.raises(HarnessError, match=r"throughput.probe: .*:wrong_probe returned str"):
        suite_test(_spec("wrong_probe"))(record=lambda ev: ev)


def test_the_function_is_imported_when_the_check_runs_not_when_the_suite_is_built() -> None:
    absent = CheckSpec("throughput.absent", "t", "w", "qualify.run.checks.nothing_here:absent", ())
    test = suite_test(absent)  # nothing is imported yet
    with pytest.raises(HarnessError, match=r"throughput\.absent: the catalogue's module "
                                           r"qualify\.run\.checks\.nothing_here does not exist"):
        test(record=lambda ev: ev)
    with pytest.raises(HarnessError, match=r"throughput\.absent: qualify\.run\.checks\.throughput has no function "
                                           r"absent"):
        check_function(CheckSpec("throughput.absent", "t", "w", "qualify.run.checks.throughput:absent", ()))


SUITE = '''
import pytest

from qualify.checks.catalogue import CheckSpec
from qualify.run.suite_checks import suite_test
from qualify.run.suite_plugin import record

pytestmark = pytest.mark.throughput

MODULE = "{module}"
test_measured = suite_test(CheckSpec("throughput.measured", "Measured, not qualified.", "w",
                                     MODULE + ":measured_probe", ()))
test_failing = suite_test(CheckSpec("throughput.failing", "Fails.", "w", MODULE + ":failing_probe", ("value",)))
test_passing = suite_test(CheckSpec("throughput.passing", "Passes.", "w", MODULE + ":passing_probe", ("value",)))


@pytest.fixture
def value():
    return 7
'''


def test_through_the_plugin_a_measurement_is_a_skipped_check_that_keeps_its_evidence(tmp_path: Path) -> None:
    suites = tmp_path / "suites"
    suites.mkdir()
    # A name no earlier call used: pytest reuses a module already imported under the same name.
    (suites / f"test_{uuid.uuid4().hex[:12]}_throughput.py").write_text(textwrap.dedent(SUITE.format(module=__name__)))
    profile = load_profile("fixture")
    run: Run = new_run(profile, None, None, ["throughput"])
    plugin = QualifyPlugin(run, RunContext(profile))
    pytest.main([str(suites), "-q", "-p", "no:cacheprovider", "-o", "addopts=", f"--rootdir={suites}",
                 "--import-mode=importlib", f"--confcutdir={suites}"], plugins=[plugin])
    checks = {c.id: c for c in run.level("throughput").checks}
    assert list(checks) == ["throughput.measured", "throughput.failing", "throughput.passing"]
    measured = checks["throughput.measured"]
    assert measured.status is Status.SKIPPED
    assert measured.message == ("throughput measured (120.0 output tokens/s) but not qualified: the profile states "
                                "no bound")
    assert measured.evidence == Evidence("120.0 output tokens/s")
    assert checks["throughput.failing"].status is Status.FAILED
    assert checks["throughput.failing"].message == "value 7"
    assert checks["throughput.passing"].status is Status.PASSED
    # Not declared in the catalogue: the title is the test's docstring, which is the spec's title.
    assert checks["throughput.passing"].title == "Passes."
