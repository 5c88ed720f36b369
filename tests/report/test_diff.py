"""`qualify diff`: what changed between two reports, and whether it is verdict-relevant."""

from __future__ import annotations

import pytest

from qualify.core import Status
from qualify.report.diff import Change, diff_runs, relative_change, relevant, render
from qualify.report.model import LevelResult, write_json
from tests.helpers import TRACEBACK, run_qualify
from tests.run_builders import LOAD_LOG, make_check, seed_run


def lines(a, b) -> list[str]:
    return [str(c) for c in diff_runs(a, b)]


def test_identical_reports_have_no_difference():
    assert diff_runs(seed_run(), seed_run()) == []


def test_run_id_times_and_command_are_ignored():
    a, b = seed_run(run_id="a"), seed_run(run_id="b")
    b.started_at, b.finished_at, b.command = "2027-01-01T00:00:00Z", None, ["qualify", "check", "x"]
    b.level("format").checks[0].duration_s = 99.0
    assert diff_runs(a, b) == []


def test_checkpoint_files_added_removed_and_changed_sorted_by_path():
    a, b = seed_run(), seed_run()
    files = b.checkpoint["files"]
    files[3] = {**files[3], "sha256": "9" * 64}  # model.safetensors changed
    del files[0]  # config.json removed
    files.append({"path": "added.json", "sha256": "8" * 64, "size": 5})
    out = [c for c in diff_runs(a, b) if c.subject.startswith("checkpoint file")]
    assert [str(c) for c in out] == [
        f"checkpoint file added.json: added (sha256 {'8' * 64}, 5 bytes)",
        f"checkpoint file config.json: removed (sha256 {'1' * 64}, 804 bytes)",
        f"checkpoint file model.safetensors: sha256 {'4' * 64}, 1200000000 bytes -> sha256 {'9' * 64}, "
        "1200000000 bytes",
    ]
    assert all(c.relevant for c in out)


def test_source_files_and_manifest_are_relevant():
    a, b = seed_run(), seed_run()
    b.source["files"][0]["size"] += 1
    b.checkpoint["manifest_sha256"] = "f" * 64
    rel = [c.subject for c in relevant(diff_runs(a, b))]
    assert rel == ["checkpoint manifest_sha256", "source file model.safetensors"]


def test_profile_sha256_and_runtime_image_digest_are_relevant():
    a, b = seed_run(), seed_run()
    b.profile["sha256"] = "e" * 64
    b.profile["conditions"]["runtime"]["digest"] = "sha256:" + "d" * 64
    got = relevant(diff_runs(a, b))
    assert [c.subject for c in got] == ["profile sha256", "profile condition runtime.digest"]
    assert str(got[1]) == f"profile condition runtime.digest: null -> sha256:{'d' * 64}"


def test_environment_image_is_relevant_but_package_versions_are_not():
    a, b = seed_run(), seed_run()
    a.environment["runtime"] = {"image_digest": "sha256:" + "1" * 64}
    b.environment["runtime"] = {"image_digest": "sha256:" + "2" * 64}
    b.environment["packages"]["torch"] = "2.14.0"
    b.harness_version = "0.2.0"
    changes = diff_runs(a, b)
    assert [c.subject for c in relevant(changes)] == ["environment runtime.image_digest"]
    info = [str(c) for c in changes if not c.relevant]
    assert info == ["harness version: 0.1.0 -> 0.2.0", "environment packages.torch: 2.13.0 -> 2.14.0"]


def test_status_changes_of_checks_levels_and_the_verdict_are_relevant_and_ordered():
    a = seed_run()
    b = seed_run(status={"smoke.request": Status.FAILED, "format.scales": Status.SKIPPED})
    got = [str(c) for c in relevant(diff_runs(a, b))]
    assert got == [
        "verdict: qualified -> not qualified",
        "qualified levels: structure, format, reproduction, load, smoke -> structure, reproduction, load",
        "level format status: passed -> skipped",
        "check format.scales status: passed -> skipped",
        "level smoke status: passed -> failed",
        "check smoke.request status: passed -> failed",
    ]
    # The finding the failure brought is shown, as information.
    assert "check smoke.request findings: 0 -> 1" in lines(a, b)


def test_levels_and_checks_present_in_one_report_only():
    a = seed_run(levels=("structure", "format"))
    b = seed_run(levels=("structure", "format", "load"))
    b.level("format").checks.append(make_check("format", "exclusions"))
    got = [str(c) for c in relevant(diff_runs(a, b))]
    assert "check format.exclusions: added (passed)" in got
    assert "level load: added (passed, required)" in got
    # Levels compare in the order of a run, whatever order they were added in.
    b.levels.insert(0, b.levels.pop())
    assert [str(c) for c in relevant(diff_runs(a, b))] == got


def test_measured_figures_show_their_relative_change_and_are_informational():
    a = seed_run()
    a = seed_run(measured={"load.ready": {"gb": 1.2, "interval": [1.0, 1.4], "line": "took 1.20 GB"}})
    b = seed_run(measured={"load.ready": {"gb": 1.32, "interval": [1.1, 1.5]}})
    changes = [c for c in diff_runs(a, b) if c.subject.startswith("measured")]
    assert [str(c) for c in changes] == [
        "measured load.ready gb: 1.2 -> 1.32 (+10%)",
        "measured load.ready interval: [1.0, 1.4] -> [1.1, 1.5]",
        "measured load.ready line: removed (took 1.20 GB)",
    ]
    assert not relevant(diff_runs(a, b))


def test_nested_measured_values_are_compared_leaf_by_leaf():
    a, b = seed_run(), seed_run()
    a.level("format").checks[0].evidence.measured["per_layer"] = {"0": {"mse": 0.5}, "1": {"mse": 0.25}}
    b.level("format").checks[0].evidence.measured["per_layer"] = {"0": {"mse": 0.5}, "1": {"mse": 0.0}}
    assert lines(a, b) == ["measured format.weights per_layer.1.mse: 0.25 -> 0.0 (-100%)"]


def test_harness_errors_and_interruptions_are_relevant():
    a, b = seed_run(), seed_run()
    b.interrupted = "SIGTERM"
    b.errors = ["docker daemon not reachable"]
    assert [str(c) for c in relevant(diff_runs(a, b))] == [
        "verdict: qualified -> not qualified",
        "interrupted: no -> SIGTERM",
        "harness error: added (docker daemon not reachable)",
    ]


def test_a_required_flag_change_is_relevant():
    a, b = seed_run(), seed_run()
    b.level("smoke").required = False
    # A level that is only measured is no longer claimed as qualified, and the diff says both.
    assert [str(c) for c in relevant(diff_runs(a, b))] == [
        "qualified levels: structure, format, reproduction, load, smoke -> structure, format, reproduction, load",
        "level smoke required: true -> false"]


def test_duplicate_check_ids_are_told_apart():
    a, b = seed_run(), seed_run()
    for run, status in ((a, Status.PASSED), (b, Status.FAILED)):
        run.levels.append(LevelResult("acceptance", checks=[make_check("acceptance", "x"),
                                                             make_check("acceptance", "x", status)]))
    assert "check acceptance.x#2 status: passed -> failed" in lines(a, b)


@pytest.mark.parametrize(("x", "y", "words"), [
    (1.0, 1.5, "+50%"), (2, 1, "-50%"), (-2.0, -1.0, "+50%"), (0, 3, "from zero"), (1, 1.0001, "+0.01%"),
    ("nan", 1.0, ""), (True, False, ""), ([1, 2], [1, 3], ""), (float("inf"), 1.0, ""),
])
def test_relative_change(x, y, words):
    assert relative_change(x, y) == words


def test_render_puts_relevant_first_and_counts():
    changes = [Change("measured x.y k", "1", "2", False, "+100%"),
               Change("verdict", "qualified", "not qualified", True)]
    text = render(changes, "A.json", "B.json")
    assert text == [
        "A: A.json", "B: B.json", "",
        "verdict-relevant differences:", "  verdict: qualified -> not qualified", "",
        "other differences (informational):", "  measured x.y k: 1 -> 2 (+100%)", "",
        "1 verdict-relevant difference, 1 informational",
    ]
    assert render([], "A", "B")[3] == "verdict-relevant differences: none"


def test_long_values_are_shortened():
    a, b = seed_run(), seed_run()
    b.level("format").checks[0].evidence.measured["names"] = ["x" * 20] * 20
    (line,) = lines(a, b)
    assert line.endswith("...)") and len(line) < 200


def test_cli_exit_codes(tmp_path):
    a, b, c = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "c.json"
    write_json(seed_run(run_id="a"), a)
    write_json(seed_run(run_id="b", load_log=LOAD_LOG.replace("size: 1.20 GiB", "size: 1.21 GiB")), b)
    write_json(seed_run(run_id="c", status={"format.scales": Status.FAILED}), c)
    same = run_qualify("diff", str(a), str(b))
    assert same.returncode == 0, same.stderr
    assert "verdict-relevant differences: none" in same.stdout
    assert "measured load.load_evidence items.draft_weights_loaded.gb: [1.2] -> [1.21]" in same.stdout
    different = run_qualify("diff", str(a), str(c))
    assert different.returncode == 1, different.stderr
    assert "  check format.scales status: passed -> failed" in different.stdout.splitlines()
    assert different.stdout == run_qualify("diff", str(a), str(c)).stdout  # stable
    missing = run_qualify("diff", str(a), str(tmp_path / "nope.json"))
    assert missing.returncode == 2 and "no such report" in missing.stderr and TRACEBACK not in missing.stderr


def test_how_the_source_was_proven_is_relevant():
    from qualify.checkpoint.identity import identity_record

    a, b = seed_run(), seed_run()
    claimed = a.source["identity"]
    b.source["identity"] = identity_record(verified=False, trusted=True, method=None, repo=claimed["claimed_repo"],
                                           revision=claimed["claimed_revision"])
    out = [c for c in relevant(diff_runs(a, b)) if c.subject.startswith("source identity")]
    assert [c.subject for c in out] == ["source identity status", "source identity method", "source identity repo",
                                        "source identity revision"]
    assert str(out[0]) == "source identity status: verified -> trusted"
