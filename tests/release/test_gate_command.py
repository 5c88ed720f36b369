"""`qualify gate` in this process, on reports built in code and attestations signed here (fast).

Every case signs a report with an EC P-256 key generated for the module and runs the command's
own ``main``; no ``qualify check`` runs. The checkpoint is three small files whose sha256 the
report records, so what the gate hashes is what was signed. Each case asserts the line the gate
prints: a pass names the levels, the run, the shipped profile and its sha256; a refusal names why.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from qualify import __version__
from qualify.cli import main
from qualify.core import Status
from qualify.profile import list_profiles, load_profile
from qualify.release import attestation as a
from qualify.release import signing as sig
from qualify.report.model import Run, write_json
from qualify.util.provenance import harness_source
from tests.helpers import TRACEBACK, write_key
from tests.run_builders import DRAFT_REVISION, defined_run

CHECKPOINT_LEVELS = ("structure", "format", "reproduction")
CONTENT = {"config.json": b'{"architectures": ["DFlashDraftModel"]}\n', "hf_quant_config.json": b'{"quant": "MXFP8"}\n',
           "model.safetensors": b"\x08\x00\x00\x00\x00\x00\x00\x00{}      "}
UNSIGNED = "UNSIGNED (--allow-unsigned): the report was not verified by any signature"
STAND_IN = ("required level {} ran on a stand-in (plumbing, it qualifies nothing): no runtime showed that it loads or "
            "serves this checkpoint, so it cannot count for a release")


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    folder = tmp_path_factory.mktemp("keys")
    return {"release": write_key(folder, "release"), "attacker": write_key(folder, "attacker")}


@pytest.fixture
def release(tmp_path: Path) -> Path:
    """The checkpoint directory about to be released."""
    folder = tmp_path / "release"
    folder.mkdir()
    for name, data in CONTENT.items():
        (folder / name).write_bytes(data)
    return folder


def files_of(folder: Path) -> list[dict[str, Any]]:
    return [{"path": p.name, "sha256": hashlib.sha256(p.read_bytes()).hexdigest(), "size": p.stat().st_size}
            for p in sorted(folder.iterdir())]


def report_of(folder: Path, profile: str = "fixture", levels: tuple[str, ...] = CHECKPOINT_LEVELS,
              status: dict[str, Status] | None = None) -> Run:
    """A run of ``profile`` holding exactly the defined checks of ``levels``, about the files in ``folder``;
    a level the profile does not require is recorded as measured, as the run records it."""
    run = defined_run(levels=levels, profile=profile, files=files_of(folder), status=status)
    run.harness_version = __version__
    # Made by this very harness code, committed: what a release run on the release runner records.
    run.environment["harness_source"] = {"commit": harness_source().commit, "clean": True}
    required = load_profile(profile).required_levels
    for lvl in run.levels:
        lvl.required = lvl.name in required
    return run


def sign(run: Run, folder: Path, key: Path, model_signature: dict[str, Any] | None = None) -> Path:
    """report.json and its attestation in ``folder``, signed with ``key``; the attestation's path."""
    folder.mkdir(parents=True, exist_ok=True)
    write_json(run, folder / "report.json")
    if model_signature is None:
        return a.write_attestation(folder, sig.load_signing_key(key))
    raw = (folder / "report.json").read_bytes()
    statement = a.build_statement(json.loads(raw), hashlib.sha256(raw).hexdigest(), model_signature)
    out = folder / a.ATTESTATION_NAME
    out.write_text(json.dumps(sig.sign_statement(statement, sig.load_signing_key(key))) + "\n")
    return out


def fingerprint(pub: Path) -> str:
    return sig.key_fingerprint(sig.load_verify_key(pub))


@dataclass
class Result:
    code: int
    out: str
    err: str

    @property
    def lines(self) -> list[str]:
        return self.out.splitlines()


@pytest.fixture
def gate(capsys: pytest.CaptureFixture[str]) -> Callable[..., Result]:
    def call(*args: str) -> Result:
        capsys.readouterr()
        code = main(["gate", *args])
        out, err = capsys.readouterr()
        assert TRACEBACK not in out + err
        return Result(code, out, err)

    return call


@pytest.fixture
def signed(tmp_path: Path, release: Path, keys: dict[str, tuple[Path, Path]]) -> Path:
    """The attestation of a qualified run of the fixture profile's checkpoint levels, about ``release``."""
    return sign(report_of(release), tmp_path / "run", keys["release"][0])


def attested(attestation: Path, pub: Path, release: Path, *extra: str) -> list[str]:
    return ["--attestation", str(attestation), "--verify-key", str(pub), "--checkpoint", str(release), *extra]


@pytest.fixture
def no_hang() -> Iterator[None]:
    """Fail, rather than hang the suite, if the gate blocks on what it opens."""

    def expired(*_: object) -> None:
        raise TimeoutError("the gate blocked")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(20)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


# ---------------------------------------------------------------- a pass names what it vouches for


def test_a_signed_qualified_run_passes_and_the_line_names_the_profile_and_its_sha256(signed, keys, release, gate):
    res = gate(*attested(signed, keys["release"][1], release))
    assert res.code == 0, res.out
    sha = load_profile("fixture").sha256
    assert res.lines == [f"qualified: structure, format, reproduction passed in run r-1 under profile fixture (sha256 "
                         f"{sha}), attestation signed by {fingerprint(keys['release'][1])}; 3 files in {release} are "
                         f"the ones signed; harness commit {harness_source().commit}"]
    assert res.err == ""


def test_the_profile_named_by_profile_passes_when_it_is_the_runs(signed, keys, release, gate):
    res = gate(*attested(signed, keys["release"][1], release, "--profile", "fixture"))
    assert res.code == 0, res.out
    assert f"under profile fixture (sha256 {load_profile('fixture').sha256})" in res.out


def test_a_verified_revision_is_named_in_the_pass(tmp_path, release, keys, gate):
    run = report_of(release)
    run.checkpoint.update(revision_source=a.VERIFIED_BY_CONTENT, revision_verified_by=a.VERIFIED_BY_CONTENT)
    attestation = sign(run, tmp_path / "run", keys["release"][0])
    res = gate(*attested(attestation, keys["release"][1], release, "--revision", DRAFT_REVISION))
    assert res.code == 0, res.out
    assert res.out.rstrip().endswith(f"3 files in {release} are the ones signed; revision {DRAFT_REVISION} verified "
                                     f"by the run ({a.VERIFIED_BY_CONTENT}); harness commit {harness_source().commit}")
    res = gate(*attested(attestation, keys["release"][1], release, "--revision", "f" * 40))
    assert res.lines == [f"refused: the attestation is about draft revision {DRAFT_REVISION}, not {'f' * 40}"]


def test_the_report_beside_its_attestation_is_taken_and_must_be_the_one_signed(signed, keys, release, gate):
    report = signed.parent / "report.json"
    res = gate(str(report), "--verify-key", str(keys["release"][1]), "--checkpoint", str(release))
    assert res.code == 0, res.out
    assert res.out.startswith("qualified: structure, format, reproduction passed in run r-1 under profile fixture")
    signed_sha = hashlib.sha256(report.read_bytes()).hexdigest()
    report.write_bytes(report.read_bytes() + b" ")
    actual = hashlib.sha256(report.read_bytes()).hexdigest()
    res = gate(str(report), "--verify-key", str(keys["release"][1]), "--checkpoint", str(release))
    assert res.code == 1
    assert res.lines == [f"refused: {report} is not the report the attestation signed (sha256 {actual[:12]}..., "
                         f"signed {signed_sha[:12]}...): it was altered after signing or belongs to another run"]


def test_a_report_without_its_attestation_is_refused_unless_accepted_unsigned(tmp_path, release, keys, gate):
    report = tmp_path / "run" / "report.json"
    report.parent.mkdir()
    write_json(report_of(release), report)
    res = gate(str(report), "--verify-key", str(keys["release"][1]), "--checkpoint", str(release))
    assert res.code == 1
    assert res.lines == [f"refused: {report} has no attestation beside it ({a.ATTESTATION_NAME}): an unsigned report "
                         "cannot license a release (the run was not given --sign-key?)"]
    res = gate(str(report), "--verify-key", str(keys["release"][1]), "--checkpoint", str(release), "--allow-unsigned")
    assert res.code == 0, res.out
    assert res.lines == [f"qualified: structure, format, reproduction passed in report r-1 under profile fixture "
                         f"(sha256 {load_profile('fixture').sha256}); 3 files in {release} match the report; "
                         f"{UNSIGNED}"]
    res = gate(str(report), "--checkpoint", str(release))
    assert res.code == 1
    assert res.lines == [f"refused: {report} comes with no attestation: an unsigned report is a file anyone can edit, "
                         "so it cannot license a release; give --attestation FILE --verify-key PUB.pem (qualify "
                         "run/check --sign-key writes one), or --allow-unsigned to accept the report on its word"]


def test_an_unsigned_report_checked_against_a_revision_only(tmp_path, release, gate):
    report = tmp_path / "report.json"
    write_json(report_of(release), report)
    res = gate(str(report), "--revision", DRAFT_REVISION, "--allow-unsigned")
    assert res.code == 0, res.out
    assert res.out.rstrip().endswith(f"(sha256 {load_profile('fixture').sha256}); revision {DRAFT_REVISION} matches; "
                                     f"{UNSIGNED}")


# ---------------------------------------------------------------- levels on a stand-in or on the caller's logs


@pytest.mark.parametrize("signed_run", [True, False])
def test_a_level_run_on_a_stand_in_never_counts(tmp_path, release, keys, gate, signed_run):
    """The fixture profile runs load and smoke on stand-ins: requiring them refuses, naming why."""
    run = report_of(release, levels=(*CHECKPOINT_LEVELS, "load", "smoke"))
    assert run.verdict.value == "qualified" and not run.level("load").required
    attestation = sign(run, tmp_path / "run", keys["release"][0])
    args = (attested(attestation, keys["release"][1], release) if signed_run else
            [str(attestation.parent / "report.json"), "--allow-unsigned", "--checkpoint", str(release)])
    res = gate(*args, "--require", "load,smoke")
    assert res.code == 1
    assert res.lines == ["refused: " + STAND_IN.format("load"), "refused: " + STAND_IN.format("smoke")]
    assert "qualified" not in res.out


def test_the_statement_records_the_stand_in_levels_and_the_gate_reads_them(tmp_path, release, keys):
    """The signed record alone says so: a shipped profile with no stand-in, given the statement's word."""
    from qualify.release.checklist import level_checks
    from qualify.release.gate import Expected, ShippedProfile, attestation_refusals

    run = report_of(release, levels=(*CHECKPOINT_LEVELS, "load"))
    statement = a.build_statement(run.to_dict(), "r" * 64)
    config = {d["name"]: d for d in statement["predicate"]["configuration"]}
    records = {lv["name"]: lv for lv in config["report.json"]["annotations"]["levels"]}
    assert records["load"] == {"name": "load", "required": False, "status": "passed", "standIn": True}
    assert records["structure"] == {"name": "structure", "required": True, "status": "passed"}
    profile = load_profile("fixture")
    plain = ShippedProfile(profile.name, profile.sha256, profile.required_levels)  # no stand-in of its own
    expected = Expected(required_levels=(*CHECKPOINT_LEVELS, "load"), profile=plain,
                        checkpoint_files=tuple(a_file(f) for f in files_of(release)),
                        harness_commit=harness_source().commit)
    att = a.read_statement(statement)
    assert attestation_refusals(att, expected, version=__version__, defined=level_checks()) == [
        STAND_IN.format("load")]


def a_file(record: dict[str, Any]) -> Any:
    from qualify.checkpoint.files import FileEntry

    return FileEntry(record["path"], record["sha256"], record["size"])


def cpu_run(release: Path, given: list[str] | None) -> Run:
    """A qualified run of every level fixture-dflash-cpu requires; paired on logs ``given`` by the caller."""
    run = report_of(release, profile="fixture-dflash-cpu", levels=load_profile("fixture-dflash-cpu").required_levels)
    check = run.level("paired").checks[0]
    assert check.evidence is not None
    check.evidence.measured["engine_settings"] = {"verified": True, "findings": [], "logs_given_by": given or []}
    return run


@pytest.mark.parametrize("signed_run", [True, False])
def test_a_paired_level_on_logs_the_caller_gave_never_counts(tmp_path, release, keys, gate, signed_run):
    for given, words in (([], None), (["--server-log"], "--server-log"),
                         (["--server-log", "--source-server-log"], "--server-log, --source-server-log")):
        folder = tmp_path / f"run-{len(given)}"
        attestation = sign(cpu_run(release, given), folder, keys["release"][0])
        args = (attested(attestation, keys["release"][1], release) if signed_run else
                [str(folder / "report.json"), "--allow-unsigned", "--checkpoint", str(release)])
        res = gate(*args)
        if words is None:
            assert res.code == 0, res.out
            assert res.out.startswith("qualified: structure, format, reproduction, load, smoke, acceptance, paired, "
                                      "losslessness passed in ")
            continue
        assert res.code == 1
        assert res.lines == [f"refused: required level paired rests on logs the caller gave ({words}), not read from "
                             "a server this run started: taken on the caller's word, it cannot count for a release"]


def test_the_statement_records_whose_logs_a_level_rests_on(release):
    run = cpu_run(release, ["--source-server-log"])
    smoke = run.level("smoke").checks[0]
    assert smoke.evidence is not None
    smoke.evidence.measured["logs_given_by"] = "--server-log"  # any value set counts (fail closed)
    statement = a.build_statement(run.to_dict(), "r" * 64)
    att = a.read_statement(statement)
    assert att.logs_given_by("paired") == ["--source-server-log"]
    assert att.logs_given_by("smoke") == ["--server-log"]
    assert att.logs_given_by("acceptance") == [] and att.stand_in("paired") is False
    records = {lv["name"]: lv for lv in att.annotation(a.REPORT, "levels")}
    assert "logsGivenBy" not in records["acceptance"] and "standIn" not in records["paired"]


def test_level_records_that_are_not_a_list_say_nothing():
    att = a.read_statement({"predicate": {"configuration": [{"name": a.REPORT, "annotations": {"levels": "load"}}]}})
    assert att.stand_in("load") is False and att.logs_given_by("load") == []
    att = a.read_statement({"predicate": {"configuration": [{"name": a.REPORT, "annotations": {"levels": [
        "load", {"name": "load", "standIn": 1, "logsGivenBy": ["--server-log", "--server-log"]},
        {"name": "load", "logsGivenBy": "--source-server-log"}]}}]}})
    assert att.stand_in("load") is True
    assert att.logs_given_by("load") == ["--server-log", "--source-server-log"]


def test_flags_are_read_fail_closed():
    assert a.as_flags(["--server-log", 3]) == ["--server-log", "3"]
    assert a.as_flags("--server-log") == ["--server-log"]
    assert a.as_flags(None) == [] and a.as_flags([]) == [] and a.as_flags("") == []
    both = {"logs_given_by": ["-a"], "engine_settings": {"logs_given_by": ["-a", "-b"]}}
    assert a.logs_given_by(both) == ["-a", "-b"]
    assert a.logs_given_by({"engine_settings": "verified"}) == []


# ---------------------------------------------------------------- only a shipped profile, byte for byte


def user_profile_run(release: Path) -> Run:
    run = report_of(release)
    run.profile.update(name="lenient", sha256="0" * 64)
    return run


@pytest.mark.parametrize("require", [(), ("--require", "structure,format,reproduction")])
def test_a_profile_the_harness_does_not_ship_is_refused_even_with_require(tmp_path, release, keys, gate, require):
    attestation = sign(user_profile_run(release), tmp_path / "run", keys["release"][0])
    res = gate(*attested(attestation, keys["release"][1], release, *require))
    assert res.code == 1
    assert res.lines == ["refused: the run was made under profile 'lenient', which this harness does not ship: a "
                         "profile of one's own qualifies a checkpoint for development, never for a release; qualify "
                         "it under a shipped profile"]
    res = gate(str(attestation.parent / "report.json"), "--allow-unsigned", "--checkpoint", str(release), *require)
    assert res.code == 1
    assert res.lines == ["refused: the report was made under profile 'lenient', which this harness does not ship: a "
                         "profile of one's own qualifies a checkpoint for development, never for a release; qualify "
                         "it under a shipped profile"]
    assert res.err == f"qualify gate: {UNSIGNED}\n"


def test_an_edited_copy_of_a_shipped_profile_is_refused(tmp_path, release, keys, gate):
    run = report_of(release)
    run.profile["sha256"] = "e" * 64
    attestation = sign(run, tmp_path / "run", keys["release"][0])
    res = gate(*attested(attestation, keys["release"][1], release))
    assert res.lines == [f"refused: the run was made under profile fixture with sha256 {'e' * 64}, but the shipped "
                         f"profile of that name has sha256 {load_profile('fixture').sha256}: its conditions are not "
                         "the ones this release is qualified under"]


def test_profile_pins_the_release_profile(signed, keys, release, gate):
    res = gate(*attested(signed, keys["release"][1], release, "--profile", "glm53-flash-dflash2-mxfp8-tp4"))
    assert res.code == 1
    assert ("refused: the run was made under profile 'fixture', not under glm53-flash-dflash2-mxfp8-tp4, the shipped "
            "profile this release is qualified under (--profile)") in res.lines
    # ... and it takes that profile's required levels, which this run does not have.
    assert "refused: required level load is missing from the attestation (no check of it ran)" in res.lines
    res = gate(*attested(signed, keys["release"][1], release, "--profile", "lenient"))
    assert res.code == 2 and res.out == ""
    assert (f"--profile 'lenient': not a profile this harness ships ({', '.join(list_profiles())}); a release is "
            "qualified under a shipped profile only") in res.err


def test_require_adds_to_the_profiles_levels_and_never_replaces_them(tmp_path, release, keys, gate):
    run = report_of(release, levels=("structure",))
    attestation = sign(run, tmp_path / "run", keys["release"][0])
    res = gate(*attested(attestation, keys["release"][1], release, "--require", "structure"))
    assert res.code == 1
    assert res.lines == ["refused: required level format is missing from the attestation (no check of it ran)",
                         "refused: required level reproduction is missing from the attestation (no check of it ran)"]


def test_require_adds_a_level_the_run_measured(tmp_path, release, keys, gate):
    """fixture-dflash-cpu measures throughput for real (no stand-in): --require may ask for it too."""
    levels = (*load_profile("fixture-dflash-cpu").required_levels, "throughput")
    run = report_of(release, profile="fixture-dflash-cpu", levels=levels)
    attestation = sign(run, tmp_path / "run", keys["release"][0])
    res = gate(*attested(attestation, keys["release"][1], release, "--require", "throughput"))
    assert res.code == 0, res.out
    assert res.out.startswith("qualified: structure, format, reproduction, load, smoke, acceptance, paired, "
                              "losslessness, throughput passed in run r-1 under profile fixture-dflash-cpu (sha256 ")
    res = gate(*attested(attestation, keys["release"][1], release, "--require", "speedup"))
    assert res.lines == ["refused: required level speedup is missing from the attestation (no check of it ran)"]


NO_IMAGE_PINNED = ("refused: the release policy pins no runtime image (its runtime_images is empty): a release "
                   "engineer must pin the image ID releases run on; this run ran on {}")


def test_the_release_policy_pins_its_profile_and_its_levels(tmp_path, release, keys, gate):
    from qualify.release.policy import load_policy

    policy = load_policy()
    run = report_of(release, profile=policy.profile, levels=policy.required_levels)
    attestation = sign(run, tmp_path / "run", keys["release"][0])
    # The committed policy pins no runtime image yet (the seed's is not known by digest): every release under it
    # is refused for that alone until a release engineer pins one (a pinned one passes: test_release_clone.py).
    res = gate(*attested(attestation, keys["release"][1], release, "--release-policy"))
    assert res.code == 1 and res.lines == [NO_IMAGE_PINNED.format("no recorded image")]
    res = gate(*attested(attestation, keys["release"][1], release, "--release-policy", "--profile", policy.profile))
    assert res.code == 1 and res.lines == [NO_IMAGE_PINNED.format("no recorded image")]
    usage_error(gate(*attested(attestation, keys["release"][1], release, "--release-policy", "--profile", "fixture")),
                f"--profile fixture contradicts the release policy's profile {policy.profile} ({policy.path})")
    # A run under another shipped profile is not a release under the policy.
    res = gate(*attested(sign(report_of(release), tmp_path / "fixture-run", keys["release"][0]),
                         keys["release"][1], release, "--release-policy"))
    assert res.code == 1
    assert (f"refused: the run was made under profile 'fixture', not under {policy.profile}, the shipped profile this "
            "release is qualified under (--profile)") in res.lines


def test_the_levels_a_release_policy_adds_are_required_with_those_require_adds(tmp_path, release, keys, gate,
                                                                             monkeypatch):
    from qualify.release import policy as release_policy

    committed = release_policy.load_policy
    policy_file = tmp_path / "policy.toml"
    policy_file.write_text('profile = "fixture"\nrequire = ["load"]\nrepository = "org/draft"\n')
    monkeypatch.setattr(release_policy, "load_policy", lambda: committed(policy_file))
    run = report_of(release, levels=(*CHECKPOINT_LEVELS, "load", "smoke"))
    attestation = sign(run, tmp_path / "run", keys["release"][0])
    # A policy file that is not the committed one is refused by name, whatever it says.
    elsewhere = (f"refused: the release policy lies outside the harness "
                 f"({hashlib.sha256(policy_file.read_bytes()).hexdigest()[:12]}...): only the files of commit "
                 f"{harness_source().commit} count")
    res = gate(*attested(attestation, keys["release"][1], release, "--release-policy"))
    assert res.lines == ["refused: " + STAND_IN.format("load"), NO_IMAGE_PINNED.format("no recorded image"), elsewhere]
    res = gate(*attested(attestation, keys["release"][1], release, "--release-policy", "--require", "smoke"))
    assert res.lines == ["refused: " + STAND_IN.format("load"), "refused: " + STAND_IN.format("smoke"),
                         NO_IMAGE_PINNED.format("no recorded image"), elsewhere]


# ---------------------------------------------------------------- what cannot be trusted or read


def test_another_key_is_refused(signed, keys, release, gate):
    res = gate(*attested(signed, keys["attacker"][1], release))
    assert res.code == 1
    assert res.lines == [f"refused: the attestation cannot be trusted: signed by another key "
                         f"({fingerprint(keys['release'][1])}), not by the verify key "
                         f"({fingerprint(keys['attacker'][1])})"]
    assert res.err == ""  # signed: no word of an unsigned report


def test_a_statement_that_signed_no_report_vouches_for_none(tmp_path, release, keys, gate):
    folder = tmp_path / "run"
    folder.mkdir()
    write_json(report_of(release), folder / "report.json")
    statement = a.build_statement(json.loads((folder / "report.json").read_text()), "")  # no report digest
    attestation = folder / a.ATTESTATION_NAME
    attestation.write_text(json.dumps(sig.sign_statement(statement, sig.load_signing_key(keys["release"][0]))) + "\n")
    report = folder / "report.json"
    res = gate(str(report), "--verify-key", str(keys["release"][1]), "--checkpoint", str(release))
    assert res.code == 1
    actual = hashlib.sha256(report.read_bytes()).hexdigest()
    assert res.lines == [f"refused: {report} is not the report the attestation signed (sha256 {actual[:12]}..., "
                         "signed (none)...): it was altered after signing or belongs to another run"]


def test_an_unsigned_report_is_held_to_the_checks_and_version_of_this_harness(tmp_path, release, gate):
    run = report_of(release)
    run.level("format").checks.append(replace(run.level("format").checks[0], id="format.looks_fine"))
    run.harness_version = "9.9.9"
    report = tmp_path / "report.json"
    write_json(run, report)
    res = gate(str(report), "--allow-unsigned", "--checkpoint", str(release))
    assert res.code == 1
    assert res.lines == [f"refused: the report was made by qualify 9.9.9; this gate (qualify {__version__}) knows the "
                         "checks of its own version only",
                         f"refused: check format.looks_fine: not a check qualify {__version__} defines (made up)"]


def test_a_file_changed_after_signing_is_named(signed, keys, release, gate):
    (release / "config.json").write_bytes(b"{}\n")
    res = gate(*attested(signed, keys["release"][1], release))
    assert res.code == 1
    assert len(res.lines) == 1 and res.lines[0].startswith("refused: config.json: changed after signing (sha256 ")


def test_a_checkpoint_that_cannot_be_hashed_is_refused(signed, keys, release, gate, tmp_path):
    (release / "extra.safetensors").symlink_to(tmp_path / "nowhere")
    res = gate(*attested(signed, keys["release"][1], release))
    assert res.code == 1
    assert len(res.lines) == 1
    assert res.lines[0].startswith("refused: the checkpoint directory cannot be verified: ")
    assert "extra.safetensors" in res.lines[0]
    res = gate(str(signed.parent / "report.json"), "--allow-unsigned", "--checkpoint", str(release))
    assert res.code == 1 and res.lines[0].startswith("refused: the checkpoint directory cannot be verified: ")
    assert res.err == f"qualify gate: {UNSIGNED}\n"


def test_a_report_that_cannot_be_trusted_on_its_own_word(tmp_path, release, gate):
    report = tmp_path / "report.json"
    report.write_text('{"verdict": "qualified"')
    res = gate(str(report), "--allow-unsigned", "--checkpoint", str(release))
    assert res.code == 1
    assert res.lines[0].startswith("refused: the report cannot be trusted: ")
    assert res.err == f"qualify gate: {UNSIGNED}\n"
    data = report_of(release).to_dict()
    data["levels"][0]["status"] = "failed"
    report.write_text(json.dumps(data))
    res = gate(str(report), "--allow-unsigned", "--checkpoint", str(release))
    assert res.lines == ["refused: the report's level structure says failed but its checks give passed; the report "
                         "was altered or is corrupt"]


def test_a_report_whose_content_the_model_cannot_read(tmp_path, release, gate, monkeypatch):
    from qualify.report import model

    def broken(data: dict) -> Run:
        raise KeyError("levels")

    report = tmp_path / "report.json"
    write_json(report_of(release), report)
    monkeypatch.setattr(model.Run, "from_dict", staticmethod(broken))
    res = gate(str(report), "--allow-unsigned", "--checkpoint", str(release))
    assert res.code == 1
    assert res.lines == ["refused: the report cannot be read: KeyError: 'levels'"]
    assert res.err == f"qualify gate: {UNSIGNED}\n"


# ---------------------------------------------------------------- the model signature beside the attestation


def test_the_model_signature_must_be_there_the_one_named_and_verify(tmp_path, release, keys, gate):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    bundle = run_dir / a.MODEL_SIGNATURE_NAME
    # Signed by the attacker's key: the bundle is the one the statement names, and it does not verify.
    named = sig.sign_model(release, sig.load_signing_key(keys["attacker"][0]), bundle)
    attestation = sign(report_of(release), run_dir, keys["release"][0], named)
    res = gate(*attested(attestation, keys["release"][1], release))
    assert res.code == 1
    assert len(res.lines) == 1
    assert res.lines[0].startswith(f"refused: the model signature {bundle} does not verify against {release} with "
                                   "this key")
    # A file already refused by name needs no second word from the model signature.
    (release / "config.json").write_bytes(b"{}\n")
    res = gate(*attested(attestation, keys["release"][1], release))
    assert len(res.lines) == 1 and res.lines[0].startswith("refused: config.json: changed after signing")
    (release / "config.json").write_bytes(CONTENT["config.json"])
    bundle.write_text("{}")
    res = gate(*attested(attestation, keys["release"][1], release))
    assert res.lines == [f"refused: {bundle} is not the model signature the attestation names (sha256 "
                         f"{named['sha256']}): it was replaced or altered after signing"]
    bundle.unlink()
    res = gate(*attested(attestation, keys["release"][1], release))
    assert res.lines == [f"refused: the attestation names a model signature, {bundle}, that is not beside it: the "
                         "release would ship without the signature its users verify"]


def test_a_model_signature_by_the_release_key_passes(tmp_path, release, keys, gate):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    named = sig.sign_model(release, sig.load_signing_key(keys["release"][0]), run_dir / a.MODEL_SIGNATURE_NAME)
    attestation = sign(report_of(release), run_dir, keys["release"][0], named)
    res = gate(*attested(attestation, keys["release"][1], release))
    assert res.code == 0, res.out


# ---------------------------------------------------------------- usage: the caller's mistakes, exit 2


def usage_error(res: Result, message: str) -> None:
    assert res.code == 2, res
    assert res.out == ""
    assert res.err == f"qualify: error: {message}\n"


def test_usage_errors_name_the_mistake(signed, keys, release, tmp_path, gate):
    pub = str(keys["release"][1])
    report = str(signed.parent / "report.json")
    usage_error(gate("--verify-key", pub, "--checkpoint", str(release)),
                "--verify-key: say which attestation to verify (--attestation FILE)")
    usage_error(gate("--attestation", str(signed), "--checkpoint", str(release)),
                "--attestation needs --verify-key PUB.pem: an attestation is worth nothing unverified")
    usage_error(gate("--attestation", str(signed), "--verify-key", pub),
                "--attestation needs --checkpoint DIR: the signed files are compared with the directory being "
                "released")
    usage_error(gate("--checkpoint", str(release)),
                "give the run's attestation (--attestation FILE --verify-key PUB.pem) or, unsigned, its report.json "
                "with --allow-unsigned")
    usage_error(gate(report, "--allow-unsigned"),
                "say what is being released: --checkpoint DIR and/or --revision REV; without an identity the gate "
                "cannot tell that the report is about this checkpoint")
    usage_error(gate(*attested(signed, keys["release"][1], tmp_path / "missing")),
                f"{tmp_path / 'missing'}: not a checkpoint directory")
    usage_error(gate(*attested(signed, keys["release"][1], release, "--revision", "main")),
                "--revision 'main' is not an immutable commit (40 lowercase hex); a branch or tag can move after the "
                "gate has passed")
    usage_error(gate(*attested(signed, keys["release"][1], release, "--require", "structure,bogus,worse")),
                "--require: unknown level(s) bogus, worse; known levels: structure, format, reproduction, load, smoke, "
                "acceptance, paired, losslessness, throughput, speedup")
    usage_error(gate(*attested(signed, keys["release"][1], release, "--require", " , ")),
                "--require names no level; give a comma-separated list, e.g. structure,format")
    usage_error(gate(*attested(tmp_path / "none.jsonl", keys["release"][1], release)),
                f"{tmp_path / 'none.jsonl'}: no such attestation file")
    usage_error(gate(str(tmp_path / "none.json"), "--allow-unsigned", "--checkpoint", str(release)),
                f"{tmp_path / 'none.json'}: no such report file")
    usage_error(gate(*attested(signed, tmp_path / "none.pem", release)), f"{tmp_path / 'none.pem'}: no such verify key "
                "file")
    usage_error(gate(*attested(signed, Path(report) / "key.pem", release)),
                f"{Path(report) / 'key.pem'}: cannot read the verify key: Not a directory")
    junk = tmp_path / "junk.pem"
    junk.write_text("not a key\n")
    usage_error(gate(*attested(signed, junk, release)),
                f"{junk}: not a PEM public key; an EC P-256 public key in PEM is required")


@pytest.mark.parametrize("which", ["verify key", "attestation", "report", "attestation beside the report"])
def test_a_path_that_is_not_a_regular_file_is_a_usage_error_and_nothing_blocks(signed, keys, release, tmp_path, gate,
                                                                              no_hang, which):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    pub = str(keys["release"][1])
    report = signed.parent / "report.json"
    if which == "verify key":
        args = attested(signed, fifo, release)
    elif which == "attestation":
        args = attested(fifo, keys["release"][1], release)
    elif which == "report":
        args = [str(fifo), "--verify-key", pub, "--checkpoint", str(release)]
    else:
        signed.unlink()
        os.mkfifo(signed)
        fifo = signed
        args = [str(report), "--verify-key", pub, "--checkpoint", str(release)]
    noun = which.removesuffix(" beside the report")
    usage_error(gate(*args), f"{fifo}: the {noun} is not a regular file (a FIFO); the gate reads regular files only")


def test_every_kind_of_file_that_is_not_regular_is_named(signed, release, tmp_path, gate):
    server = socket.socket(socket.AF_UNIX)
    sock = tmp_path / "key.sock"
    server.bind(str(sock))
    try:
        for path, kind in ((sock, "a socket"), (Path("/dev/null"), "a character device"), (tmp_path, "a directory")):
            usage_error(gate(*attested(signed, path, release)),
                        f"{path}: the verify key is not a regular file ({kind}); the gate reads regular files only")
    finally:
        server.close()


def test_the_help_says_what_the_gate_checks_and_how(capsys):
    for args in (["--help"], ["gate", "--help"]):
        with pytest.raises(SystemExit) as exc:
            main(args)
        assert exc.value.code == 0
    raw = capsys.readouterr().out
    # The epilog keeps its lines: one exit code a line, as a release engineer reads them.
    assert "\nexit codes:\n  0  the release may ship: the attestation verifies with the key" in raw
    assert "\n  2  usage error: no such file, a path that is not a regular file (a FIFO, a socket, a device), " in raw
    text = " ".join(raw.split())
    for words in (
        "gate refuse a release unless a signed attestation qualifies exactly this checkpoint",
        "Verify the attestation's signature with --verify-key, then check that what it states licenses releasing "
        "the checkpoint: every file in --checkpoint is the one signed, the verdict is qualified, every required level "
        "passed with exactly the checks this harness defines, none on a stand-in or on a server log the caller gave, "
        "under a profile shipped with this harness (byte for byte), and --revision (if given) is the revision the run "
        "verified against the bytes.",
        "report.json of the run: with an attestation, it must be the report signed; alone, it is refused unless "
        "--allow-unsigned",
        "--attestation FILE the run's attestation.intoto.jsonl (default with --verify-key: the one beside REPORT)",
        "--verify-key PUB.pem the EC P-256 public key (PEM) the attestation must be signed with",
        "--allow-unsigned accept a report without an attestation (anyone can edit one); the output says so",
        "--require LEVELS comma-separated levels that must also have passed: added to the shipped profile's required "
        "levels, never in place of them",
        "--profile NAME the shipped profile the release is qualified under: the run must have been made under exactly "
        "it (name and sha256); default: the profile the run names, which must be a shipped one",
        "--checkpoint DIR the directory about to be released: every file must be the one signed (or reported), and "
        "every load-relevant file in it must be signed (or reported)",
        "--revision REV the commit about to be released: must equal the draft revision the run verified (40 hex)",
        "--release-policy judge under the committed release policy (qualify/release/policy.toml): its profile, as "
        "--profile, the levels it adds, as --require, and the hub endpoints whose metadata may prove a revision "
        "(without it: the public hub only)",
        "--allow-unpinned accept a run whose runtime ran from a moving image tag or revision (not reproducible)",
        "--allow-untrusted-source accept a run whose source folder was trusted on --trust-local-source without proof "
        "of its identity",
        "a level run on a stand-in or resting on a server log the caller gave",
        "a --profile this harness does not ship",
        "--accept-unpinned-target accept a run whose runtime was not held to the target's pinned revision (the "
        "profile's launcher takes no revision variable and no --target-snapshot was mounted): the target revision is "
        "then only claimed, and the pass line says WARNING: target revision not enforced. Never implied, under "
        "--release-policy too: a release accepts it only by this flag",
        "a target revision the run did not enforce (without --accept-unpinned-target, a target snapshot whose files "
        "were not proven to be it included)",
        "a revision proven by a hub the release policy does not name (a mirror, a local server: the line names the "
        "endpoint)",
    ):
        assert words in text, words


def test_the_unpinned_and_untrusted_source_options_reach_the_policy(tmp_path, release, keys, gate):
    from qualify.checkpoint.identity import identity_record

    run = report_of(release)
    run.environment["runtime"] = {"reproducible": False, "image": {"id": "sha256:" + "d" * 64}}
    run.source["identity"] = identity_record(verified=False, trusted=True, method="hub", repo=None, revision=None)
    attestation = sign(run, tmp_path / "run", keys["release"][0])
    res = gate(*attested(attestation, keys["release"][1], release))
    assert res.code == 1 and len(res.lines) == 2
    assert "--allow-untrusted-source" in res.lines[0] and "--allow-unpinned" in res.lines[1]
    res = gate(*attested(attestation, keys["release"][1], release, "--allow-unpinned", "--allow-untrusted-source"))
    assert res.code == 0, res.out
    res = gate(str(attestation.parent / "report.json"), "--checkpoint", str(release), "--allow-unsigned",
               "--allow-unpinned", "--allow-untrusted-source")
    assert res.code == 0, res.out


def test_a_release_is_gated_only_on_committed_harness_code_at_the_gates_own_commit(tmp_path, release, keys, gate):
    """The harness is named by its commit: a run by other code, or by uncommitted code, does not license a release."""
    from qualify.release.policy import load_policy

    policy = load_policy()
    run = report_of(release, profile=policy.profile, levels=policy.required_levels)
    here = harness_source().commit
    changed = f"conftest.py: imported by the run and changed since commit {here[:12]}"
    cases = {
        "dirty": ({"commit": here, "clean": False, "problems": [changed]},
                  f"the harness code that ran was not the code of commit {here} ({changed}): a release is qualified "
                  "only by committed code; commit or remove those files (and stale bytecode) and run again"),
        "unsaid": ({"commit": here, "clean": None}, "the harness code that ran was not said to be as committed: a "
                                                     "release is qualified only by committed code"),
        "unnamed": ({"commit": None, "clean": None}, "the attestation names no harness commit, so nothing says "
                                                       "which code judged the checkpoint: run the release from a git "
                                                       "checkout of the harness at a commit"),
        "other": ({"commit": "1" * 40, "clean": True}, f"the attestation was made by the harness at commit {'1' * 40}; "
                                                         f"this gate runs commit {here}"),
    }
    for name, (source, words) in cases.items():
        run.environment["harness_source"] = source
        attestation = sign(run, tmp_path / name, keys["release"][0])
        res = gate(*attested(attestation, keys["release"][1], release, "--release-policy"))
        assert res.code == 1, name
        assert any(line.startswith("refused: " + words) for line in res.lines), (name, res.lines)
        # The same statement is refused on its commit outside a release too; only its cleanliness is a release's.
        res = gate(*attested(attestation, keys["release"][1], release))
        assert (res.code == 1) is (name in ("unnamed", "other")), (name, res.lines)
    # Outside a release (no --release-policy), uncommitted code is recorded, not refused; another commit still is.
    run.environment["harness_source"] = {"commit": here, "clean": False}
    res = gate(*attested(sign(run, tmp_path / "dev", keys["release"][0]), keys["release"][1], release))
    assert res.code == 0 and f"harness commit {here}" in res.out
    # --harness-commit repeats the checkout's commit or the gate knows no commit of its own.
    res = gate(*attested(sign(run, tmp_path / "dev", keys["release"][0]), keys["release"][1], release,
                         "--harness-commit", here))
    assert res.code == 0, res.out
    res = gate(*attested(sign(run, tmp_path / "dev", keys["release"][0]), keys["release"][1], release,
                         "--harness-commit", "2" * 40))
    assert res.lines == [f"refused: the attestation was made by the harness at commit {here}, but --harness-commit "
                         f"{'2' * 40} is not the commit this gate's checkout is at ({here}): run the gate from a "
                         "checkout of that commit, or pass --harness-commit COMMIT to a gate built from it"]
    usage_error(gate(*attested(sign(run, tmp_path / "dev", keys["release"][0]), keys["release"][1], release,
                               "--harness-commit", "HEAD")),
                "--harness-commit 'HEAD' is not a commit (40 lowercase hex)")


# ---------------------------------------------------------------- the target's revision


NOT_ENFORCED = "the launcher takes no target revision variable"
TARGET_REFUSAL = (f"refused: the target revision was not enforced ({NOT_ENFORCED}): the runtime loaded whatever target "
                  "its launcher resolved, so the target revision the run names is a claim, not what it ran; enforce it "
                  "(a launcher revision variable the profile declares, or qualify run --target-snapshot), or pass "
                  "--accept-unpinned-target to accept that")
TARGET_WARNING = f"WARNING: target revision not enforced ({NOT_ENFORCED}), accepted by --accept-unpinned-target"


def unenforced(run: Run) -> Run:
    """``run`` as a launch that held its runtime to no target revision records it (qualify.runtime.plan.TargetPin)."""
    target = run.profile["conditions"]["target"]["revision"]
    run.environment["runtime"]["plan"]["target_revision_enforcement"] = {
        "revision": target, "enforced": False, "method": None, "variable": None, "snapshot": None,
        "reason": NOT_ENFORCED}
    return run


def test_an_unenforced_target_revision_is_refused_and_accepted_only_by_the_flag_with_a_warning(tmp_path, release,
                                                                                               keys, gate):
    attestation = sign(unenforced(cpu_run(release, [])), tmp_path / "run", keys["release"][0])
    res = gate(*attested(attestation, keys["release"][1], release))
    assert res.code == 1 and res.lines == [TARGET_REFUSAL]
    res = gate(*attested(attestation, keys["release"][1], release, "--accept-unpinned-target"))
    assert res.code == 0, res.out
    assert len(res.lines) == 1 and res.lines[0].endswith(f"harness commit {harness_source().commit}; {TARGET_WARNING}")
    # The unsigned report is held to the same, and says the same on a pass.
    report = str(attestation.parent / "report.json")
    res = gate(report, "--allow-unsigned", "--checkpoint", str(release))
    assert res.code == 1 and res.lines == [TARGET_REFUSAL]
    res = gate(report, "--allow-unsigned", "--checkpoint", str(release), "--accept-unpinned-target")
    assert res.code == 0 and res.lines[0].endswith(f"; {TARGET_WARNING}; {UNSIGNED}")


def test_a_release_under_the_policy_accepts_an_unenforced_target_only_by_the_flag_and_says_so(tmp_path, release,
                                                                                             keys, gate):
    from qualify.release.policy import load_policy

    policy = load_policy()
    run = unenforced(report_of(release, profile=policy.profile, levels=policy.required_levels))
    attestation = sign(run, tmp_path / "run", keys["release"][0])
    # The committed policy pins no runtime image, which is refused whatever else holds (NO_IMAGE_PINNED).
    no_image = NO_IMAGE_PINNED.format("no recorded image")
    res = gate(*attested(attestation, keys["release"][1], release, "--release-policy"))
    assert res.code == 1 and res.lines == [no_image, TARGET_REFUSAL]
    res = gate(*attested(attestation, keys["release"][1], release, "--release-policy", "--accept-unpinned-target"))
    assert res.code == 1 and res.lines == [no_image]
    # Enforced (a pinned snapshot, as the builder records): no flag needed.
    res = gate(*attested(sign(report_of(release, profile=policy.profile, levels=policy.required_levels),
                              tmp_path / "pinned", keys["release"][0]), keys["release"][1], release,
                         "--release-policy"))
    assert res.code == 1 and res.lines == [no_image]
