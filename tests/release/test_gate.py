"""`qualify gate`: a release ships only on a report that qualifies exactly this checkpoint."""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from qualify.cli import main
from qualify.core import Status
from qualify.errors import UsageError
from qualify.profile import load_profile
from qualify.release.gate import (
    Expected,
    FileEntry,
    check_id_refusals,
    check_revision_argument,
    identity_refusals,
    is_load_relevant,
    list_files,
    parse_require,
    refusals,
    release_levels,
    report_target,
    shipped_profile,
    shipped_profile_named,
    source_statuses,
    stored_contradictions,
    target_warning,
)
from qualify.report.model import Run, write_json
from qualify.run.pipeline import CHECKPOINT_LEVELS
from tests.helpers import FIXTURE, TRACEBACK, run_qualify
from tests.run_builders import DRAFT_REVISION, FILES, SEED, defined_run
from tests.run_builders import seed_run as card_run

SEED_LEVELS = ("structure", "format", "reproduction", "load", "smoke", "acceptance", "paired", "losslessness")
TARGET_REV = "520de24eabf507659eaef7c70f14fd584527facc"
def seed_run(**kwargs: Any) -> Run:
    """A run of every level the seed profile requires (the card's five and the paired comparison)."""
    kwargs.setdefault("levels", SEED_LEVELS)
    return card_run(**kwargs)


ACTUAL = tuple(FileEntry(f["path"], f["sha256"], f["size"]) for f in FILES)


def expected(**kw) -> Expected:
    kw.setdefault("required_levels", SEED_LEVELS)
    kw.setdefault("checkpoint_files", ACTUAL)
    kw.setdefault("profile", shipped_profile_named(SEED))
    return Expected(**kw)


# -- refusals (pure) --------------------------------------------------------------------


def test_a_good_report_for_these_files_is_not_refused():
    assert refusals(seed_run(), expected(revision=DRAFT_REVISION)) == []


@pytest.mark.parametrize("status", [Status.FAILED, Status.SKIPPED, Status.ERROR, Status.NOT_RUN])
def test_a_required_level_that_did_not_pass_is_refused_and_named(status):
    reasons = refusals(seed_run(status={"format.scales": status}), expected())
    assert f"required level format is {status} (format.scales {status})" in reasons


def test_a_required_level_missing_from_the_report_is_refused():
    # A "qualified" report of fewer levels: the run's own required list is never what the gate trusts.
    run = seed_run(levels=("structure", "format", "reproduction"))
    assert str(run.verdict) == "qualified"
    reasons = refusals(run, expected())
    assert reasons == [f"required level {level} is missing from the report"
                       for level in ("load", "smoke", "acceptance", "paired", "losslessness")]


def test_a_level_with_no_check_is_refused_with_its_reason():
    run = seed_run()
    run.level("smoke").checks.clear()
    run.level("smoke").reason = "the container did not start"
    assert "required level smoke is not-run (the container did not start)" in refusals(run, expected())


def test_every_reason_is_given_not_just_the_first():
    run = seed_run(status={"structure.output_checksums": Status.FAILED, "smoke.request":
                           Status.ERROR}, revision="f" * 40)
    run.interrupted = "SIGTERM"
    run.errors.append("docker daemon not reachable")
    actual = (*ACTUAL[:3], FileEntry("model.safetensors", "9" * 64, FILES[3]["size"]))
    reasons = refusals(run, expected(checkpoint_files=actual, revision=DRAFT_REVISION))
    assert reasons == [
        "the run was interrupted (SIGTERM) before it finished",
        "the run recorded a harness error: docker daemon not reachable",
        "required level structure is failed (structure.output_checksums failed)",
        "required level smoke is error (smoke.request error)",
        f"the report is about checkpoint revision {'f' * 40}, not {DRAFT_REVISION}",
        "model.safetensors: differs from the qualified file (size 1200000000 -> 1200000000, "
        "sha256 444444444444... -> 999999999999...)",
    ]


def test_asking_for_nothing_is_refused():
    assert refusals(seed_run(), expected(required_levels=(), checkpoint_files=None)) == [
        "no level is required, so the report cannot show that anything was qualified",
        "no checkpoint identity (directory or revision) to compare the report with",
        "the release does not require structure, format, reproduction, load, smoke, acceptance, paired, "
        f"losslessness, which profile {SEED} requires: --require adds levels to the profile's, it never drops one",
    ]
    # Under no shipped profile, that is the refusal: a release that requires nothing is not asked about.
    assert refusals(seed_run(), expected(required_levels=(), profile=None)) == [
        f"the report was made under profile {SEED!r}, which this harness does not ship: a profile of one's own "
        "qualifies a checkpoint for development, never for a release; qualify it under a shipped profile"]


def test_a_run_not_reproducible_is_refused_unless_allowed():
    run = seed_run()
    pin = run.environment["runtime"]["plan"]["target_revision_enforcement"]
    run.environment["runtime"] = {"reproducible": False, "plan": {"unpinned": ["runtime image x:latest (a tag)"],
                                                                  "target_revision_enforcement": pin}}
    reasons = refusals(run, expected(revision=DRAFT_REVISION))
    assert reasons == ["the runtime was launched unpinned, so the run is not reproducible (runtime image x:latest "
                       "(a tag)); pin the image digest and revisions, or pass --allow-unpinned to accept that"]
    assert refusals(run, expected(revision=DRAFT_REVISION, allow_unpinned=True)) == []


UNENFORCED = ("the target revision was not enforced ({}): the runtime loaded whatever target its launcher resolved, "
              "so the target revision the run names is a claim, not what it ran; enforce it (a launcher revision "
              "variable the profile declares, or qualify run --target-snapshot), or pass --accept-unpinned-target to "
              "accept that")


def test_a_run_whose_target_revision_was_not_enforced_is_refused_unless_accepted():
    run = seed_run()
    reason = "the launcher takes no target revision variable"
    run.environment["runtime"]["plan"]["target_revision_enforcement"] = {
        "revision": TARGET_REV, "enforced": False, "method": None, "variable": None, "snapshot": None,
        "reason": reason}
    assert refusals(run, expected(revision=DRAFT_REVISION)) == [UNENFORCED.format(reason)]
    accepting = expected(revision=DRAFT_REVISION, accept_unpinned_target=True)
    assert refusals(run, accepting) == []
    assert target_warning(*report_target(run), accepting) == (
        f"WARNING: target revision not enforced ({reason}), accepted by --accept-unpinned-target")
    assert target_warning(*report_target(run), expected()) is None  # refused, not warned about
    assert target_warning(*report_target(seed_run()), accepting) is None  # enforced: nothing to warn about
    # The checkpoint's levels alone do not rest on the target: nothing to refuse or warn about.
    only_files = replace(shipped_profile_named(SEED), required_levels=CHECKPOINT_LEVELS)
    checkpoint_only = expected(required_levels=CHECKPOINT_LEVELS, profile=only_files)
    assert not any("target revision" in r for r in refusals(run, checkpoint_only))
    assert target_warning(*report_target(run), replace(checkpoint_only, accept_unpinned_target=True)) is None


def test_a_report_that_records_no_runtime_is_read_as_not_enforced():
    run = seed_run()
    del run.environment["runtime"]
    assert refusals(run, expected()) == [UNENFORCED.format(
        "this run launched no runtime (its serving levels, if any, talked to servers it was given), so nothing held "
        "the target to its revision")]


def test_an_interrupted_run_is_refused_even_if_every_level_passed():
    run = seed_run()
    run.interrupted = "KeyboardInterrupt"
    assert refusals(run, expected()) == ["the run was interrupted (KeyboardInterrupt) before it finished"]


def test_a_level_the_run_required_but_the_release_does_not_still_refuses():
    run = seed_run(status={"smoke.request": Status.FAILED})
    # A release whose profile requires structure only (the run's own profile required smoke too).
    only_structure = replace(shipped_profile_named(SEED), required_levels=("structure",))
    reasons = refusals(run, expected(required_levels=("structure",), profile=only_structure))
    assert reasons == ["the report's verdict is not qualified: the run also required smoke failed"]
    # Under the seed profile itself, the release cannot drop the levels it requires.
    reasons = refusals(run, expected(required_levels=("structure",)))
    assert reasons[-1] == (f"the release does not require format, reproduction, load, smoke, acceptance, paired, "
                           f"losslessness, which profile {SEED} requires: --require adds levels to the profile's, "
                           "it never drops one")


def test_a_run_that_required_nothing_is_refused():
    run = seed_run()
    for lvl in run.levels:
        lvl.required = False
    assert refusals(run, expected()) == ["the report's verdict is not qualified: the run required no level"]


def test_a_report_made_under_an_edited_profile_of_a_shipped_name_is_refused():
    run = seed_run()
    run.profile["sha256"] = "0" * 64
    (reason,) = refusals(run, expected())
    assert "sha256 " + "0" * 64 in reason and "not the ones this release is qualified under" in reason
    del run.profile["sha256"]
    assert refusals(run, expected()) == [
        f"the report was made under profile {SEED} with sha256 (none recorded), but the shipped profile of that name "
        f"has sha256 {load_profile(SEED).sha256}: its conditions are not the ones this release is qualified under"]


STAND_IN = ("required level {} ran on a stand-in (plumbing, it qualifies nothing): no runtime showed that it loads or "
            "serves this checkpoint, so it cannot count for a release")


def test_a_level_the_report_records_as_run_on_a_stand_in_never_counts():
    run = seed_run()
    run.profile["conditions"]["stand_in_levels"] = ["load"]
    assert refusals(run, expected()) == [STAND_IN.format("load")]
    # ... nor one the release's shipped profile runs on a stand-in, whatever the report says.
    run = seed_run(status={"smoke.request": Status.FAILED})
    stand_in = replace(shipped_profile_named(SEED), stand_in_levels=("smoke", "speedup"))
    assert refusals(run, expected(profile=stand_in)) == ["required level smoke is failed (smoke.request failed)",
                                                          STAND_IN.format("smoke")]
    run = seed_run()
    run.profile["conditions"]["stand_in_levels"] = "load"  # not a list: names nothing
    assert refusals(run, expected()) == []
    del run.profile["conditions"]["stand_in_levels"]  # a report that records none
    assert refusals(run, expected()) == []


def test_a_level_resting_on_logs_the_caller_gave_never_counts():
    run = seed_run()
    paired = run.level("paired").checks[0]
    paired.evidence.measured["engine_settings"] = {"verified": True, "logs_given_by": ["--server-log"]}
    smoke = run.level("smoke").checks[1]
    smoke.evidence.measured["logs_given_by"] = ["--server-log", "--source-server-log"]
    # A check with no evidence says nothing either way.
    run.level("smoke").checks.append(replace(smoke, id="smoke.again", evidence=None))
    assert refusals(run, expected()) == [
        "required level smoke rests on logs the caller gave (--server-log, --source-server-log), not read from a "
        "server this run started: taken on the caller's word, it cannot count for a release",
        "required level paired rests on logs the caller gave (--server-log), not read from a server this run "
        "started: taken on the caller's word, it cannot count for a release",
    ]


def test_a_report_under_another_shipped_profile_than_the_release_is_refused():
    fixture = shipped_profile_named("fixture")
    assert refusals(seed_run(), expected(profile=fixture, required_levels=fixture.required_levels)) == [
        f"the report was made under profile {SEED!r}, not under fixture, the shipped profile this release is "
        "qualified under (--profile)"]


def test_every_unpinned_input_is_named_or_the_run_is_said_unpinned():
    run = seed_run()
    run.environment["runtime"] = {"reproducible": False, "plan": {"unpinned": ["image x:latest", "revision main"]}}
    # The target's revision is judged on its own (this record has none): accepted here, to see the unpinned reason.
    accepting = expected(accept_unpinned_target=True)
    (reason,) = refusals(run, accepting)
    assert reason.startswith("the runtime was launched unpinned, so the run is not reproducible (image x:latest; "
                             "revision main); pin")
    run.environment["runtime"] = {"reproducible": False}
    (reason,) = refusals(run, accepting)
    assert reason.startswith("the runtime was launched unpinned, so the run is not reproducible (unpinned); pin")


def test_the_report_is_held_to_the_checks_this_harness_defines():
    from qualify.release.checklist import level_checks

    run = defined_run(levels=SEED_LEVELS)
    run.interrupted = "SIGTERM"  # an earlier reason: the check-id reasons are added to it, not put in its place
    run.level("structure").checks.append(replace(run.level("format").checks[0], id="format.elsewhere",
                                                 level="structure"))
    run.level("smoke").checks.append(replace(run.level("smoke").checks[0], id="smoke.other", level="load"))
    assert refusals(run, expected(defined_checks=level_checks())) == [
        "the run was interrupted (SIGTERM) before it finished",
        "check smoke.other says level load but is listed under smoke",
        # The gate was given no version of its own: the report's is named.
        "check format.elsewhere: not a check qualify 0.1.0 defines (made up)",
        "check smoke.other: not a check qualify 0.1.0 defines (made up)",
    ]
    reasons = refusals(defined_run(levels=SEED_LEVELS), expected(defined_checks=level_checks(),
                                                                 harness_version="9.9.9"))
    assert reasons == ["the report was made by qualify 0.1.0; this gate (qualify 9.9.9) knows the checks of its own "
                       "version only"]


def test_check_id_refusals_name_each_kind_of_wrong_id():
    defined = {"structure": ("structure.a", "structure.b", "structure.c"), "format": ("format.a",), "smoke": ()}
    ids = {"structure": ["structure.a", "structure.a", "format.a", "structure.zz"], "load": ["load.x"]}
    assert check_id_refusals(ids, ("structure", "format", "smoke", "speedup"), defined, "9.9") == [
        "check structure.a is listed more than once",
        "check format.a: a check of level format, listed under structure",
        "check structure.zz: not a check qualify 9.9 defines (made up)",
        "check load.x: not a check qualify 9.9 defines (made up)",
        "required level structure: check(s) structure.b, structure.c missing (qualify 9.9 defines 3 for it)",
        # format: no check of it at all, which the caller reports as a missing level
        "required level smoke: qualify 9.9 defines no check for it",
        "required level speedup: qualify 9.9 defines no check for it",
    ]


def test_stored_fields_are_compared_with_what_the_checks_give():
    run = seed_run()
    data = run.to_dict()
    assert stored_contradictions(data, run) == []
    data["qualified_levels"] = ["structure"]
    data["levels"][1]["status"] = "failed"
    assert stored_contradictions(data, run) == [
        "the report's level format says failed but its checks give passed; the report was altered or is corrupt",
        f"the report's qualified levels ['structure'] contradict its checks ({run.qualified_levels}); the report was "
        "altered or is corrupt",
    ]
    data["levels"].append({"name": "speedup", "status": "passed"})  # a level the checks do not have: not compared
    data["qualified_levels"] = run.qualified_levels
    assert stored_contradictions(data, run) == [
        "the report's level format says failed but its checks give passed; the report was altered or is corrupt"]
    nothing = seed_run(levels=())
    assert stored_contradictions({}, nothing) == []


def test_source_statuses_read_the_record_and_the_identity_checks_only():
    run = seed_run()
    assert source_statuses(run) == {"verified"}
    run.source["identity"]["status"] = "trusted"
    assert source_statuses(run) == {"trusted"}
    run.source["identity"].pop("status")
    assert source_statuses(run) == set()
    run.source["identity"] = "verified"  # not a record
    assert source_statuses(run) == set()
    run.source.pop("identity")
    check = run.level("structure").checks[0]
    check.evidence.measured["status"] = "not verified"  # not a source_identity check: says nothing of the source
    assert source_statuses(run) == set()
    check.id = "structure.source_identity"
    assert source_statuses(run) == {"not verified"}
    check.evidence.measured["status"] = 3
    assert source_statuses(run) == set()


def test_each_failed_check_and_each_other_required_level_is_named():
    run = seed_run(status={"format.weights": Status.FAILED, "format.scales": Status.ERROR})
    assert refusals(run, expected()) == ["required level format is error (format.weights failed, format.scales "
                                         "error)"]
    run = seed_run()
    run.level("smoke").checks.clear()
    assert refusals(run, expected()) == ["required level smoke is not-run (no check ran)"]
    only_structure = replace(shipped_profile_named(SEED), required_levels=("structure",))
    run = seed_run(status={"smoke.request": Status.FAILED, "paired.non_inferiority": Status.FAILED})
    assert refusals(run, expected(required_levels=("structure",), profile=only_structure)) == [
        "the report's verdict is not qualified: the run also required smoke failed, paired failed"]
    # An interrupted run says so; the levels it left unfinished are not listed again.
    run.interrupted = "SIGTERM"
    assert refusals(run, expected(required_levels=("structure",), profile=only_structure)) == [
        "the run was interrupted (SIGTERM) before it finished"]


def test_describe_checkpoint_names_what_it_cannot_hash(tmp_path):
    from qualify.errors import CheckpointError
    from qualify.release.gate import describe_checkpoint

    with pytest.raises(UsageError) as info:
        describe_checkpoint(tmp_path / "none")
    assert str(info.value) == f"{tmp_path / 'none'}: not a checkpoint directory"
    folder = tmp_path / "ck"
    folder.mkdir()
    (folder / "a.json").write_text("{}")
    assert describe_checkpoint(folder) == (FileEntry("a.json", hashlib.sha256(b"{}").hexdigest(), 2),)
    (folder / "b.safetensors").symlink_to(tmp_path / "nowhere")
    with pytest.raises(CheckpointError) as err:
        describe_checkpoint(folder)
    assert err.value.file == "b.safetensors"
    assert err.value.detail == "a broken link or not a regular file; it cannot be hashed"
    (folder / "b.safetensors").unlink()
    (tmp_path / "outside.json").write_text("{}")
    (folder / "b.json").symlink_to(tmp_path / "outside.json")
    with pytest.raises(CheckpointError) as err:
        describe_checkpoint(folder)
    assert err.value.detail == (f"resolves outside the checkpoint (to {tmp_path / 'outside.json'}); the release would "
                                "upload another file's bytes")


def test_revision_must_be_recorded_and_equal():
    assert refusals(seed_run(), expected(revision=DRAFT_REVISION, checkpoint_files=None)) == []
    (reason,) = refusals(seed_run(revision=None), expected(revision=DRAFT_REVISION, checkpoint_files=None))
    assert "records no checkpoint revision" in reason
    (reason,) = refusals(seed_run(revision="a" * 40), expected(revision=DRAFT_REVISION, checkpoint_files=None))
    assert "is about checkpoint revision " + "a" * 40 in reason


# -- identity ---------------------------------------------------------------------------


def test_identity_names_every_file_that_differs():
    actual = [
        FileEntry("config.json", "1" * 64, 805),  # size differs
        FileEntry("conversion_manifest.json", "2" * 64, 29866),
        # hf_quant_config.json: missing from the directory
        FileEntry("model.safetensors", "4" * 64, 1_200_000_000),
        FileEntry("model-00002-of-00002.safetensors", "6" * 64, 10),  # not qualified
        FileEntry("tokenizer.model", "7" * 64, 10),  # load-relevant: tokenizer
        FileEntry("modeling_dflash.py", "8" * 64, 10),  # load-relevant: custom code
        FileEntry("README.md", "9" * 64, 10),  # a model card, written after qualification
        FileEntry("LICENSE", "a" * 64, 10),
        FileEntry("assets/figure.png", "b" * 64, 10),
    ]
    assert identity_refusals(FILES, actual) == [
        "config.json: differs from the qualified file (size 804 -> 805, sha256 111111111111... -> 111111111111...)",
        "hf_quant_config.json: in the report but missing from the checkpoint directory",
        "model-00002-of-00002.safetensors: in the checkpoint directory but not in the report (unqualified content)",
        "modeling_dflash.py: in the checkpoint directory but not in the report (unqualified content)",
        "tokenizer.model: in the checkpoint directory but not in the report (unqualified content)",
    ]


def test_a_file_the_report_lists_must_match_even_if_not_load_relevant():
    reported = [*FILES, {"path": "README.md", "sha256": "c" * 64, "size": 10}]
    (reason,) = identity_refusals(reported, [*ACTUAL, FileEntry("README.md", "d" * 64, 10)])
    assert reason.startswith("README.md: differs")


def test_a_report_with_no_files_or_no_checksum_vouches_for_nothing():
    assert identity_refusals([], ACTUAL) == [
        "the report lists no checkpoint files, so it cannot vouch for any directory"]
    reported = [dict(f) for f in FILES]
    reported[0]["sha256"] = None
    assert identity_refusals(reported, ACTUAL) == [
        "config.json: the report recorded no sha256 for it (hashing failed during the run)"]


@pytest.mark.parametrize(("path", "relevant"), [
    ("model.safetensors", True), ("model.safetensors.index.json", True), ("config.json", True),
    ("tokenizer.model", True), ("merges.txt", True), ("modeling.py", True), ("sub/dir/x.bin", True),
    ("README.md", False), ("docs/usage.MD", False), ("LICENSE", False), ("LICENSE.txt", False),
    ("NOTICE", False), ("image.PNG", False), (".gitattributes", False), (".cache/huggingface/x.json", False),
])
def test_load_relevance(path, relevant):
    assert is_load_relevant(path) is relevant


def test_the_gates_listing_is_the_reports(tmp_path):
    from qualify.checkpoint.manifest import list_checkpoint_files

    for rel in ("a.json", "sub/b.safetensors", ".hidden", ".git/HEAD", "x/.cache/y", "README.md"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(rel)
    (tmp_path / "link.json").symlink_to(tmp_path / "a.json")
    assert list_files(tmp_path) == list_checkpoint_files(tmp_path)
    assert ".git/HEAD" not in list_files(tmp_path) and ".hidden" in list_files(tmp_path)
    assert "x/.cache/y" in list_files(tmp_path)  # only .cache/huggingface/ is the hub client's, never uploaded


# -- arguments --------------------------------------------------------------------------


def test_parse_require():
    assert parse_require("structure, format,structure") == ("structure", "format")
    with pytest.raises(UsageError, match="unknown level"):
        parse_require("structure,loading")
    with pytest.raises(UsageError, match="names no level"):
        parse_require(" , ")


@pytest.mark.parametrize("rev", ["main", "v1.0", "A" * 40, "a" * 39, "a" * 41])
def test_a_revision_must_be_an_immutable_commit(rev):
    with pytest.raises(UsageError, match="not an immutable commit"):
        check_revision_argument(rev)


def test_shipped_profile_gives_its_required_levels():
    profile = shipped_profile(seed_run())
    assert profile is not None and profile.name == SEED
    assert profile.required_levels == SEED_LEVELS and profile.sha256 == load_profile(SEED).sha256
    assert profile.stand_in_levels == ()
    fixture = shipped_profile_named("fixture")
    assert fixture is not None and fixture.stand_in_levels == load_profile("fixture").stand_in_levels
    assert "load" in fixture.stand_in_levels
    run = seed_run()
    run.profile["name"] = "my-own"
    assert shipped_profile(run) is None
    assert shipped_profile_named(None) is None and shipped_profile_named(["fixture"]) is None


def test_release_levels_add_to_the_profiles_and_never_drop_one():
    profile = shipped_profile_named("fixture")
    assert release_levels(profile) == ("structure", "format", "reproduction")
    assert release_levels(profile, ("load", "structure")) == ("structure", "format", "reproduction", "load")
    assert release_levels(profile, ("speedup", "structure")) == ("structure", "format", "reproduction", "speedup")
    assert release_levels(None, ("format", "structure")) == ("structure", "format")
    assert release_levels(None) == ()


# -- the command, on a real report ------------------------------------------------------


@pytest.fixture(scope="module")
def real_report(tmp_path_factory) -> Path:
    """One real `qualify check` of the shipped fixture (about 5 s)."""
    reports = tmp_path_factory.mktemp("reports")
    proc = run_qualify("check", str(FIXTURE / "mxfp8"), "--source", str(FIXTURE / "source"),
                       "--report-dir", str(reports))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (path,) = reports.glob("*/report.json")
    return path


@pytest.fixture
def release(tmp_path) -> Path:
    """A private copy of the checkpoint about to be released."""
    dest = tmp_path / "release"
    shutil.copytree(FIXTURE / "mxfp8", dest)
    return dest


def edited(report: Path, tmp_path: Path, edit) -> Path:
    data = json.loads(report.read_text())
    edit(data)
    out = tmp_path / "edited.json"
    out.write_text(json.dumps(data))
    return out


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def gate(capsys):
    """`qualify gate ARGS` in this process (the CLI's own main, exit code included): no interpreter start per call."""

    def call(*args: str, checkpoint_levels: bool = True) -> Result:
        capsys.readouterr()
        # The real report is a `qualify check` of the checkpoint levels, the ones the fixture profile
        # requires; --require names them again (a --require of the test's own comes later and wins,
        # and adds to the profile's required levels, never in place of them).
        require = ["--require", ",".join(CHECKPOINT_LEVELS)] if checkpoint_levels else []
        # These cases are about the report's own checks: the unsigned path (test_attestation.py: the signed one).
        code = main(["gate", *args[:1], *require, "--allow-unsigned", *args[1:]])
        out, err = capsys.readouterr()
        assert TRACEBACK not in out + err
        return Result(code, out, err)

    return call


@pytest.mark.slow
def test_cli_passes_the_qualified_fixture(real_report, release, gate):
    proc = gate(str(real_report), "--checkpoint", str(release))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("qualified: structure, format, reproduction passed")


@pytest.mark.slow
def test_cli_refuses_one_flipped_byte_and_names_the_file(real_report, release, gate):
    raw = bytearray((release / "model.safetensors").read_bytes())
    raw[-1] ^= 0x01
    (release / "model.safetensors").write_bytes(bytes(raw))
    proc = gate(str(real_report), "--checkpoint", str(release))
    assert proc.returncode == 1
    (line,) = proc.stdout.splitlines()
    assert line.startswith("refused: model.safetensors: differs from the qualified file")


@pytest.mark.slow
def test_cli_refuses_an_unqualified_file_but_not_a_model_card(real_report, release, gate):
    (release / "README.md").write_text("# GLM-5.3-Flash-DFlash2-MXFP8\n")
    assert gate(str(real_report), "--checkpoint", str(release)).returncode == 0
    (release / "tokenizer.json").write_text("{}")
    proc = gate(str(real_report), "--checkpoint", str(release))
    assert proc.returncode == 1
    assert proc.stdout == "refused: tokenizer.json: in the checkpoint directory but not in the report " \
        "(unqualified content)\n"


@pytest.mark.slow
def test_cli_refuses_levels_the_report_does_not_have(real_report, release, gate):
    proc = gate(str(real_report), "--checkpoint", str(release), "--require", "structure,load")
    assert proc.returncode == 1
    # A release that requires the runtime also needs the target held to its revision, which a report without a
    # runtime cannot show: both refusals are given.
    assert proc.stdout.splitlines()[-1] == "refused: required level load is missing from the report"
    assert proc.stdout.startswith("refused: the target revision was not enforced (this run launched no runtime")
    assert len(proc.stdout.splitlines()) == 2


@pytest.mark.slow
def test_cli_refuses_a_report_made_for_fewer_levels_than_the_profile_requires(real_report, release, tmp_path, gate):
    def drop_reproduction(d):
        d["levels"] = [lv for lv in d["levels"] if lv["name"] != "reproduction"]
        d["qualified_levels"] = [n for n in d["qualified_levels"] if n != "reproduction"]

    proc = gate(str(edited(real_report, tmp_path, drop_reproduction)), "--checkpoint", str(release))
    assert proc.returncode == 1
    assert proc.stdout == "refused: required level reproduction is missing from the report\n"


@pytest.mark.slow
@pytest.mark.parametrize(("edit", "words"), [
    (lambda d: d["levels"][0].update(status="failed"), "level structure says failed but its checks give passed"),
    (lambda d: d.update(qualified_levels=["structure"]), "qualified levels ['structure'] contradict its checks"),
    (lambda d: d["levels"][0]["checks"][0].update(status="failed"), "contradicts its checks"),
    (lambda d: d.pop("checkpoint"), "fails its schema"),
    (lambda d: d.update(interrupted="SIGTERM", verdict="not qualified"), "interrupted (SIGTERM)"),
    (lambda d: d.update(errors=["boom"], verdict="not qualified"), "harness error: boom"),
    (lambda d: d["profile"].update(sha256="0" * 64), "not the ones this release is qualified under"),
])
def test_cli_refuses_reports_that_cannot_be_trusted(real_report, release, tmp_path, edit, words, gate):
    proc = gate(str(edited(real_report, tmp_path, edit)), "--checkpoint", str(release))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert words in proc.stdout and proc.stdout.startswith("refused: ")


@pytest.mark.slow
def test_cli_refuses_a_profile_it_does_not_ship_even_with_require(real_report, release, tmp_path, gate):
    """A user's profile qualifies for development, never for a release: --require does not make it one."""
    report = edited(real_report, tmp_path, lambda d: d["profile"].update(name="my-own"))
    refusal = ("refused: the report was made under profile 'my-own', which this harness does not ship: a profile of "
               "one's own qualifies a checkpoint for development, never for a release; qualify it under a shipped "
               "profile\n")
    proc = gate(str(report), "--checkpoint", str(release), checkpoint_levels=False)
    assert proc.returncode == 1 and proc.stdout == refusal
    proc = gate(str(report), "--checkpoint", str(release), "--require", "structure,format,reproduction")
    assert proc.returncode == 1 and proc.stdout == refusal


@pytest.mark.slow
def test_cli_revision_is_compared(real_report, tmp_path, gate):
    report = edited(real_report, tmp_path, lambda d: d["checkpoint"].update(revision=DRAFT_REVISION))
    assert gate(str(report), "--revision", DRAFT_REVISION).returncode == 0
    proc = gate(str(report), "--revision", "f" * 40)
    assert proc.returncode == 1 and "not " + "f" * 40 in proc.stdout
    unrecorded = edited(real_report, tmp_path, lambda d: d["checkpoint"].pop("revision"))
    proc = gate(str(unrecorded), "--revision", DRAFT_REVISION)
    assert proc.returncode == 1 and "records no checkpoint revision" in proc.stdout


@pytest.mark.slow
def test_cli_refuses_a_broken_link_in_the_release(real_report, release, gate):
    (release / "extra.safetensors").symlink_to(release / "nowhere")
    proc = gate(str(real_report), "--checkpoint", str(release))
    assert proc.returncode == 1
    assert "extra.safetensors" in proc.stdout and proc.stdout.startswith("refused: ")


def test_cli_usage_errors_exit_2(tmp_path, gate):
    report = tmp_path / "report.json"
    write_json(seed_run(), report)
    cases = [
        ([str(report)], "--checkpoint DIR and/or --revision REV"),
        ([str(tmp_path / "nope.json"), "--revision", DRAFT_REVISION], "no such report"),
        ([str(report), "--revision", "main"], "not an immutable commit"),
        ([str(report), "--revision", DRAFT_REVISION, "--require", "structure,bogus"], "unknown level"),
        ([str(report), "--checkpoint", str(tmp_path / "missing")], "not a checkpoint directory"),
    ]
    for args, words in cases:
        res = gate(*args)
        assert res.returncode == 2, (args, res)
        assert words in res.stderr and res.stdout == ""


def test_cli_exit_codes_in_a_process_of_its_own(tmp_path):
    """0, 1 and 2 as a release pipeline sees them, from `python -m qualify.cli`."""
    good, truncated = tmp_path / "good.json", tmp_path / "truncated.json"
    write_json(defined_run(), good)
    truncated.write_text('{"verdict": "qualified"')
    proc = run_qualify("gate", str(good), "--revision", DRAFT_REVISION, "--allow-unsigned")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "structure, format, reproduction, load, smoke, acceptance, paired, losslessness passed" in proc.stdout
    assert proc.stdout.rstrip().endswith("UNSIGNED (--allow-unsigned): the report was not verified by any signature")
    proc = run_qualify("gate", str(good), "--revision", DRAFT_REVISION)
    assert proc.returncode == 1
    assert proc.stdout.startswith(f"refused: {good} comes with no attestation: an unsigned report")
    proc = run_qualify("gate", str(truncated), "--revision", DRAFT_REVISION, "--allow-unsigned")
    assert proc.returncode == 1
    assert proc.stdout.startswith("refused: the report cannot be trusted:")
    proc = run_qualify("gate", str(good))
    assert proc.returncode == 2 and "qualify: error:" in proc.stderr
    assert TRACEBACK not in proc.stderr


# -- source identity ---------------------------------------------------------------------


def _with_identity(status: str, *, check_status: str | None = None):
    from qualify.checkpoint.identity import identity_record

    run = seed_run()
    record = identity_record(verified=status == "verified", trusted=status == "trusted", method="hub",
                             repo=run.source["identity"]["claimed_repo"], revision=run.source["identity"]["revision"])
    run.source["identity"] = record
    structure = run.level("structure")
    check = structure.checks[0]
    check.id = "structure.source_identity"
    check.evidence.measured.update(status=check_status or status)
    return run


def test_a_source_trusted_without_proof_is_refused_unless_allowed():
    run = _with_identity("trusted")
    reasons = refusals(run, expected(revision=DRAFT_REVISION))
    assert reasons == ["the source folder was trusted on --trust-local-source without proof that it is the pinned "
                       "revision; prove it (profile digests, a hub cache snapshot or the hub), or pass "
                       "--allow-untrusted-source to accept that"]
    assert refusals(run, expected(revision=DRAFT_REVISION, allow_untrusted_source=True)) == []
    assert refusals(_with_identity("verified"), expected(revision=DRAFT_REVISION)) == []


def test_a_source_not_verified_is_refused_even_when_allowed():
    run = _with_identity("not verified")
    for allow in (False, True):
        assert ("the source identity was not verified: nothing shows the source folder was the pinned revision"
                in refusals(run, expected(revision=DRAFT_REVISION, allow_untrusted_source=allow)))


def test_the_identity_check_s_own_record_is_read_too():
    # A report whose source.identity was edited to "verified" still carries its check's evidence.
    run = _with_identity("verified", check_status="trusted")
    assert any("--trust-local-source" in r for r in refusals(run, expected(revision=DRAFT_REVISION)))


@pytest.mark.slow
def test_cli_a_trusted_source_is_recorded_and_refused(tmp_path, release, gate, monkeypatch):
    from fixtures.corpus import unpinned_profile

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # the source is proven, or not, by what is on this machine
    profile = tmp_path / "unpinned.toml"
    profile.write_text(unpinned_profile(tmp_path, tmp_path).replace('name = "fixture"', 'name = "fixture-unpinned"'))
    base = ("check", str(release), "--source", str(FIXTURE / "source"), "--profile", str(profile))
    refused = run_qualify(*base, "--report-dir", str(tmp_path / "no"))
    assert refused.returncode == 1 and "source identity not verified" in refused.stdout
    proc = run_qualify(*base, "--trust-local-source", "--report-dir", str(tmp_path / "r"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (report,) = (tmp_path / "r").glob("*/report.json")
    data = json.loads(report.read_text())
    assert data["source"]["identity"]["status"] == "trusted" and data["source"]["identity"]["repo"] is None
    assert "the local folder was trusted on --trust-local-source" in (report.parent / "report.md").read_text()
    out = gate(str(report), "--checkpoint", str(release))
    assert out.returncode == 1 and "--allow-untrusted-source" in out.stdout
    # Accepted, the trusted source is no refusal; the profile of one's own still is: no release is made under it.
    out = gate(str(report), "--checkpoint", str(release), "--allow-untrusted-source")
    assert out.returncode == 1
    assert out.stdout == ("refused: the report was made under profile 'fixture-unpinned', which this harness does not "
                          "ship: a profile of one's own qualifies a checkpoint for development, never for a release; "
                          "qualify it under a shipped profile\n")


# -- the runtime image the release policy pins, on the report and on the statement -------------------------------


def test_the_report_and_the_statement_are_both_held_to_the_policys_images():
    from qualify import __version__
    from qualify.release import attestation as a
    from qualify.release.checklist import level_checks
    from qualify.release.gate import attestation_refusals

    mine, other = "sha256:" + "a" * 64, "sha256:" + "b" * 64
    run = seed_run()
    run.environment.setdefault("runtime", {})["image"] = {"id": other}
    words = f"the run ran on runtime image {other}, not on one the release policy allows ({mine})"
    assert words in refusals(run, expected(runtime_images=(mine,)))
    assert words not in refusals(run, expected(runtime_images=(other,)))
    att = a.read_statement(a.build_statement(run.to_dict(), "r" * 64))
    assert words in attestation_refusals(att, expected(runtime_images=(mine,)), version=__version__,
                                         defined=level_checks())
    assert words not in attestation_refusals(att, expected(runtime_images=(other,)), version=__version__,
                                             defined=level_checks())
