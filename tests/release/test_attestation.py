"""Signed attestations and the release gate that verifies them.

One real ``qualify check`` of the shipped fixture, signed with a key the test generates; the
gate passes it, and refuses, naming why, every forgery and mismatch a release engineer could
try: another key, a file changed, added or removed after signing, the attestation of another
checkpoint, an altered statement, a forged report, a made-up or missing check, an unverified
revision. The policy itself is also tested on statements built in memory (pure, fast).
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from qualify import __version__
from qualify.cli import main
from qualify.errors import AttestationError, HarnessError
from qualify.profile import load_profile
from qualify.release import attestation as a
from qualify.release import signing as sig
from qualify.release.checklist import level_checks
from qualify.release.gate import Expected, ShippedProfile, attestation_refusals
from qualify.util.escape import escape_terminal
from tests.helpers import FIXTURE, REPO, TRACEBACK, run_qualify, write_key
from tests.run_builders import target_proof

CHECKPOINT_LEVELS = "structure,format,reproduction"
REQUIRE = ("--require", CHECKPOINT_LEVELS)


# ---------------------------------------------------------------- keys the tests generate

@pytest.fixture(scope="module")
def keys(tmp_path_factory) -> dict[str, tuple[Path, Path]]:
    folder = tmp_path_factory.mktemp("keys")
    return {"release": write_key(folder, "release"), "attacker": write_key(folder, "attacker")}


@pytest.fixture(scope="module")
def signed_run(tmp_path_factory, keys) -> Path:
    """One real `qualify check` of the fixture's checkpoint levels, signed (and the model signed too)."""
    reports = tmp_path_factory.mktemp("reports")
    proc = run_qualify("check", str(FIXTURE / "mxfp8"), "--source", str(FIXTURE / "source"), "--levels",
                       CHECKPOINT_LEVELS, "--report-dir", str(reports), "--sign-key", str(keys["release"][0]),
                       "--sign-model")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (run_dir,) = reports.glob("*/")
    assert "signed: " in proc.stdout and sig.key_fingerprint(sig.load_verify_key(keys["release"][1])) in proc.stdout
    return run_dir


@pytest.fixture
def release(tmp_path) -> Path:
    dest = tmp_path / "release"
    shutil.copytree(FIXTURE / "mxfp8", dest)
    return dest


@pytest.fixture
def gate(capsys):
    def call(*args: str) -> tuple[int, str, str]:
        capsys.readouterr()
        code = main(["gate", *args])
        out, err = capsys.readouterr()
        assert TRACEBACK not in out + err
        return code, out, err

    return call


def gate_args(run_dir: Path, key: Path, checkpoint: Path, *extra: str, require: str = CHECKPOINT_LEVELS) -> list[str]:
    return ["--attestation", str(run_dir / a.ATTESTATION_NAME), "--verify-key", str(key), "--checkpoint",
            str(checkpoint), "--require", require, *extra]


def statement_of(run_dir: Path) -> dict:
    envelope = json.loads((run_dir / a.ATTESTATION_NAME).read_text())
    return json.loads(base64.b64decode(envelope["payload"]))


# ---------------------------------------------------------------- the real run, signed

@pytest.mark.slow
def test_the_signed_fixture_run_passes_the_gate(signed_run, keys, release, gate):
    code, out, _ = gate(*gate_args(signed_run, keys["release"][1], release))
    assert code == 0, out
    assert out.startswith("qualified: structure, format, reproduction passed in run ")
    assert sig.key_fingerprint(sig.load_verify_key(keys["release"][1])) in out
    assert "4 files in" in out and "are the ones signed" in out


@pytest.mark.slow
def test_the_statement_is_in_toto_test_result_about_every_file(signed_run):
    st = statement_of(signed_run)
    assert st["_type"] == "https://in-toto.io/Statement/v1"
    assert st["predicateType"] == "https://in-toto.io/attestation/test-result/v0.1"
    report = json.loads((signed_run / "report.json").read_text())
    assert {s["name"]: s["digest"]["sha256"] for s in st["subject"]} == {
        f["path"]: f["sha256"] for f in report["checkpoint"]["files"]}
    pred = st["predicate"]
    assert pred["result"] == "PASSED" and pred["failedTests"] == []
    assert pred["passedTests"] == [c["id"] for lv in report["levels"] for c in lv["checks"]]
    config = {d["name"]: d for d in pred["configuration"]}
    assert config["report.json"]["digest"]["sha256"] == hashlib.sha256((signed_run / "report.json").read_bytes()
                                                                       ).hexdigest()
    assert config["profile"]["digest"]["sha256"] == report["profile"]["sha256"]
    assert config["qualify"]["annotations"]["version"] == __version__
    assert config["source"]["digest"]["gitCommit"] == report["source"]["revision"]
    assert config["draft"]["annotations"]["revisionVerifiedBy"] == a.VERIFIED_BY_CONTENT


@pytest.mark.slow
def test_the_model_signature_verifies_with_the_standard_tool(signed_run, keys, release):
    from model_signing import verifying

    verifying.Config().use_elliptic_key_verifier(public_key=keys["release"][1]).verify(
        release, signed_run / a.MODEL_SIGNATURE_NAME)
    bundle = json.loads((signed_run / a.MODEL_SIGNATURE_NAME).read_text())
    root = json.loads(base64.b64decode(bundle["dsseEnvelope"]["payload"]))["subject"][0]["digest"]["sha256"]
    config = {d["name"]: d for d in statement_of(signed_run)["predicate"]["configuration"]}
    assert config["model-signature"]["annotations"]["rootDigest"]["sha256"] == root
    # ... and the standard tool refuses the checkpoint once a byte changed.
    raw = bytearray((release / "config.json").read_bytes())
    raw[0] ^= 0x01
    (release / "config.json").write_bytes(bytes(raw))
    with pytest.raises(ValueError, match="Signature mismatch"):
        verifying.Config().use_elliptic_key_verifier(public_key=keys["release"][1]).verify(
            release, signed_run / a.MODEL_SIGNATURE_NAME)


@pytest.mark.slow
def test_another_key_is_refused(signed_run, keys, release, gate):
    code, out, _ = gate(*gate_args(signed_run, keys["attacker"][1], release))
    assert code == 1
    (line,) = out.splitlines()
    assert line.startswith("refused: the attestation cannot be trusted: signed by another key")


@pytest.mark.slow
def test_a_file_changed_after_signing_is_refused_and_named(signed_run, keys, release, gate):
    raw = bytearray((release / "model.safetensors").read_bytes())
    raw[-1] ^= 0x01
    (release / "model.safetensors").write_bytes(bytes(raw))
    code, out, _ = gate(*gate_args(signed_run, keys["release"][1], release))
    assert code == 1
    (line,) = out.splitlines()
    assert line.startswith("refused: model.safetensors: changed after signing")


@pytest.mark.slow
def test_an_added_and_a_removed_file_are_each_refused_and_named(signed_run, keys, release, gate):
    (release / "extra.safetensors").write_bytes(b"\0" * 16)
    (release / "hf_quant_config.json").unlink()
    (release / "README.md").write_text("# a model card written after qualification\n")
    code, out, _ = gate(*gate_args(signed_run, keys["release"][1], release))
    assert code == 1
    assert out.splitlines() == [
        "refused: hf_quant_config.json: signed in the attestation but missing from the checkpoint directory",
        "refused: extra.safetensors: in the checkpoint directory but not in the attestation (unqualified content)",
    ]  # the model card is not load-relevant: no refusal


@pytest.mark.slow
def test_the_attestation_of_another_checkpoint_is_refused(signed_run, keys, tmp_path, gate):
    other = tmp_path / "other"
    shutil.copytree(FIXTURE / "mxfp8", other)
    # Another checkpoint: the same tensors under another config (what a swapped release looks like).
    cfg = json.loads((other / "config.json").read_text())
    cfg["torch_dtype"] = "float16" if cfg.get("torch_dtype") != "float16" else "bfloat16"
    (other / "config.json").write_text(json.dumps(cfg))
    code, out, _ = gate(*gate_args(signed_run, keys["release"][1], other))
    assert code == 1
    assert out.splitlines() == ["refused: config.json: changed after signing (sha256 "
                                f"{statement_sha(signed_run, 'config.json')[:12]}... signed, "
                                f"{hashlib.sha256((other / 'config.json').read_bytes()).hexdigest()[:12]}... in the "
                                "directory)"]


def statement_sha(run_dir: Path, name: str) -> str:
    return next(s["digest"]["sha256"] for s in statement_of(run_dir)["subject"] if s["name"] == name)


def forged_envelope(run_dir: Path, tmp_path: Path, edit, sign_with: Path | None = None) -> Path:
    """The run's attestation with its statement edited: re-encoded unsigned, or re-signed with another key."""
    envelope = json.loads((run_dir / a.ATTESTATION_NAME).read_text())
    statement = json.loads(base64.b64decode(envelope["payload"]))
    edit(statement)
    if sign_with is not None:
        envelope = sig.sign_statement(statement, sig.load_signing_key(sign_with))
    else:
        envelope["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()
    out = tmp_path / "forged" / a.ATTESTATION_NAME
    out.parent.mkdir()
    out.write_text(json.dumps(envelope) + "\n")
    return out.parent


def flip_all_passed(statement: dict) -> None:
    pred = statement["predicate"]
    pred["passedTests"] += pred["failedTests"] + ["load.made_up"]
    pred["failedTests"] = []
    pred["result"] = "PASSED"


@pytest.mark.slow
def test_an_altered_statement_does_not_verify(signed_run, keys, release, tmp_path, gate):
    forged = forged_envelope(signed_run, tmp_path, flip_all_passed)
    code, out, _ = gate(*gate_args(forged, keys["release"][1], release))
    assert code == 1
    (line,) = out.splitlines()
    assert line == ("refused: the attestation cannot be trusted: the signature does not verify with the verify key "
                    f"({sig.key_fingerprint(sig.load_verify_key(keys['release'][1]))}): the attestation was altered "
                    "after it was signed, or forged")


@pytest.mark.slow
def test_a_statement_re_signed_by_another_key_is_refused(signed_run, keys, release, tmp_path, gate):
    forged = forged_envelope(signed_run, tmp_path, flip_all_passed, sign_with=keys["attacker"][0])
    code, out, _ = gate(*gate_args(forged, keys["release"][1], release))
    assert code == 1 and "signed by another key" in out


@pytest.mark.slow
def test_a_forged_report_is_refused(signed_run, keys, release, tmp_path, gate):
    """Statuses flipped to passed, findings cleared, made-up checks added: with or without the attestation."""
    report = json.loads((signed_run / "report.json").read_text())
    report["levels"][0]["checks"][0]["evidence"]["findings"] = []
    for name in ("load", "smoke"):
        report["levels"].append({"name": name, "title": name, "required": True, "status": "passed", "reason": "",
                                 "checks": [{"id": f"{name}.made_up", "level": name, "title": "made up",
                                             "status": "passed", "message": "", "duration_s": 0.0,
                                             "evidence": {"summary": "fine", "findings": [], "findings_total": 0,
                                                          "measured": {}, "expected": {}}}]})
    report["qualified_levels"] = [lv["name"] for lv in report["levels"]]
    forged_dir = tmp_path / "run"
    shutil.copytree(signed_run, forged_dir)
    (forged_dir / "report.json").write_text(json.dumps(report))
    # Beside its attestation, the forged report is not the one signed.
    code, out, _ = gate(str(forged_dir / "report.json"), "--verify-key", str(keys["release"][1]), "--checkpoint",
                        str(release), "--require", "structure,format,reproduction,load,smoke")
    assert code == 1
    assert out.splitlines()[0].startswith(f"refused: {forged_dir / 'report.json'} is not the report the "
                                          "attestation signed")
    # Alone, it is refused as unsigned ...
    code, out, _ = gate(str(forged_dir / "report.json"), "--checkpoint", str(release), *REQUIRE)
    assert code == 1 and "comes with no attestation" in out
    # ... and even on its word (--allow-unsigned), its made-up checks are.
    code, out, err = gate(str(forged_dir / "report.json"), "--checkpoint", str(release), "--allow-unsigned",
                          "--require", "structure,format,reproduction,load,smoke")
    assert code == 1
    assert f"refused: check load.made_up: not a check qualify {__version__} defines (made up)" in out.splitlines()
    assert "required level load: check(s) load.gpu_preflight" in out
    assert "UNSIGNED (--allow-unsigned)" in err


@pytest.mark.slow
def test_the_revision_must_be_the_one_the_run_verified(signed_run, keys, release, tmp_path, gate):
    revision = statement_of(signed_run)["predicate"]["configuration"][3]["annotations"]["revision"]
    code, out, _ = gate(*gate_args(signed_run, keys["release"][1], release, "--revision", revision))
    assert code == 0, out
    code, out, _ = gate(*gate_args(signed_run, keys["release"][1], release, "--revision", "f" * 40))
    assert code == 1 and f"the attestation is about draft revision {revision}, not {'f' * 40}" in out
    # A revision only claimed on the command line (--draft-revision) cannot satisfy --revision.
    claimed = "c" * 40
    reports = tmp_path / "reports"
    proc = run_qualify("check", str(FIXTURE / "mxfp8"), "--source", str(FIXTURE / "source"), "--levels", "structure",
                       "--report-dir", str(reports), "--sign-key", str(keys["release"][0]), "--draft-revision", claimed)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (run_dir,) = reports.glob("*/")
    code, out, _ = gate(*gate_args(run_dir, keys["release"][1], release, "--revision", claimed, require="structure"))
    assert code == 1
    assert f"refused: revision {claimed} was only claimed (--draft-revision): the run never compared it" in out
    assert "- Revision not verified: only claimed: " in (run_dir / "report.md").read_text()


@pytest.mark.slow
def test_the_gate_never_imports_torch(signed_run, keys, release):
    code = ("import sys; from qualify.cli import main; "
            f"rc = main({['gate', *gate_args(signed_run, keys['release'][1], release)]!r}); "
            "print(rc, 'torch' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.stdout.splitlines()[-1] == "0 False", proc.stdout + proc.stderr


def test_a_bad_key_is_refused_before_anything_runs(tmp_path):
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    bad = tmp_path / "rsa.pem"
    bad.write_bytes(rsa_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    proc = run_qualify("check", str(FIXTURE / "mxfp8"), "--levels", "structure", "--report-dir",
                       str(tmp_path / "reports"), "--sign-key", str(bad))
    assert proc.returncode == 2
    assert f"{bad}: not an elliptic-curve private key (an EC P-256 key in PEM is required)" in proc.stderr
    assert not (tmp_path / "reports").exists()


# ---------------------------------------------------------------- signing and verifying a statement (fast)

#: The harness commit the statements built here name, and the gate's own in :func:`expected`.
HARNESS_COMMIT = "c" * 40


def minimal_report(**changes) -> dict:
    checks = level_checks()
    report = {
        "run_id": "r1", "harness": {"name": "qualify", "version": __version__}, "verdict": "qualified",
        "interrupted": None, "errors": [],
        "profile": {"name": "fixture", "sha256": "p" * 64, "conditions": {}},
        "checkpoint": {"repo": "org/draft", "revision": "a" * 40, "revision_source": "content of the local folder",
                       "revision_verified_by": a.VERIFIED_BY_CONTENT, "obtained": "local folder",
                       "files": [{"path": "model.safetensors", "sha256": "1" * 64, "size": 1},
                                 {"path": "config.json", "sha256": "2" * 64, "size": 1}]},
        "source": {"repo": "org/source", "revision": "b" * 40},
        "levels": [{"name": lv, "required": True, "status": "passed",
                    "checks": [{"id": cid, "status": "passed"} for cid in checks[lv]]}
                   for lv in ("structure", "format", "reproduction")],
    }
    report.update(changes)
    # Made by committed harness code at the gate's own commit, whatever else the environment records.
    report.setdefault("environment", {}).setdefault("harness_source", {"commit": HARNESS_COMMIT, "clean": True})
    return report


def test_sign_and_verify_round_trip_and_tampering(tmp_path):
    priv, pub = write_key(tmp_path, "k")
    _, other_pub = write_key(tmp_path, "other")
    key = sig.load_signing_key(priv)
    statement = a.build_statement(minimal_report(), "r" * 64)
    envelope = sig.sign_statement(statement, key)
    assert envelope["payloadType"] == sig.PAYLOAD_TYPE
    assert envelope["signatures"][0]["keyid"] == key.fingerprint
    assert a.verify_envelope(envelope, sig.load_verify_key(pub)) == statement

    with pytest.raises(AttestationError, match="signed by another key"):
        a.verify_envelope(envelope, sig.load_verify_key(other_pub))
    tampered = copy.deepcopy(envelope)
    payload = bytearray(base64.b64decode(tampered["payload"]))
    payload[payload.index(b"PASSED")] = ord("X")
    tampered["payload"] = base64.b64encode(bytes(payload)).decode()
    with pytest.raises(AttestationError, match="altered after it was signed, or forged"):
        a.verify_envelope(tampered, sig.load_verify_key(pub))
    wrong_type = dict(envelope, payloadType="application/json")
    with pytest.raises(AttestationError, match="payload type"):
        a.verify_envelope(wrong_type, sig.load_verify_key(pub))
    unsigned = dict(envelope, signatures=[])
    with pytest.raises(AttestationError, match="no signature"):
        a.verify_envelope(unsigned, sig.load_verify_key(pub))


def test_an_attestation_file_holds_exactly_one_envelope(tmp_path):
    f = tmp_path / "a.intoto.jsonl"
    for text, words in [("", "empty"), ("{not json", "not valid JSON"), ('{"a": 1}\n{"b": 2}\n', "holds 2 lines"),
                        ('{"payload": "x"}', "not a DSSE envelope"),
                        ('{"payload": "x", "payload": "y", "payloadType": "t", "signatures": []}',
                         "duplicate key 'payload'")]:
        f.write_text(text)
        with pytest.raises(AttestationError, match=words):
            a.read_envelope(f)


def test_write_attestation_needs_the_report(tmp_path):
    priv, _ = write_key(tmp_path, "k")
    with pytest.raises(HarnessError, match="cannot read the report to sign it"):
        a.write_attestation(tmp_path, sig.load_signing_key(priv))


# ---------------------------------------------------------------- the policy on a verified statement (pure)

def expected(**changes) -> Expected:
    from qualify.checkpoint.files import FileEntry

    base = {"required_levels": ("structure", "format", "reproduction"),
            "checkpoint_files": (FileEntry("model.safetensors", "1" * 64, 1), FileEntry("config.json", "2" * 64, 1)),
            "revision": None, "profile": ShippedProfile("fixture", "p" * 64, ("structure", "format", "reproduction")),
            "harness_commit": HARNESS_COMMIT}
    base.update(changes)
    return Expected(**base)


def policy(report: dict, exp: Expected | None = None) -> list[str]:
    att = a.read_statement(a.build_statement(report, "r" * 64))
    return attestation_refusals(att, exp or expected(), version=__version__, defined=level_checks())


def with_checks(report: dict, level: str, edit) -> dict:
    report = copy.deepcopy(report)
    lvl = next(lv for lv in report["levels"] if lv["name"] == level)
    lvl["checks"] = edit(lvl["checks"])
    return report


def test_the_policy_passes_a_complete_qualified_statement():
    assert policy(minimal_report()) == []
    assert policy(minimal_report(), expected(revision="a" * 40)) == []


def test_a_made_up_check_is_refused():
    report = with_checks(minimal_report(), "format", lambda cs: [*cs, {"id": "format.looks_fine", "status": "passed"}])
    assert policy(report) == [f"check format.looks_fine: not a check qualify {__version__} defines (made up)"]
    report = with_checks(minimal_report(), "format", lambda cs: [*cs, {"id": "nolevel", "status": "passed"}])
    assert policy(report) == [f"check nolevel: not a check qualify {__version__} defines (made up)"]


def test_a_missing_check_is_refused():
    report = with_checks(minimal_report(), "reproduction", lambda cs: cs[:1])
    assert policy(report) == [f"required level reproduction: check(s) reproduction.unquantized_tensors missing "
                              f"(qualify {__version__} defines 2 for it)"]


def test_a_check_listed_twice_or_under_another_level_is_refused():
    report = with_checks(minimal_report(), "format", lambda cs: [*cs, cs[0]])
    assert policy(report) == ["check format.weights is listed more than once"]


def test_a_failed_check_or_level_and_a_failed_result_are_refused():
    report = with_checks(minimal_report(verdict="not qualified"), "format",
                         lambda cs: [dict(c, status="skipped") if c["id"] == "format.scales" else c for c in cs])
    assert policy(report) == ["the attested result is FAILED: the run's verdict was not qualified",
                              "required level format did not pass: format.scales not passed"]
    report = minimal_report(levels=minimal_report()["levels"][:2])
    assert policy(report) == ["required level reproduction is missing from the attestation (no check of it ran)"]


def test_an_interrupted_run_or_harness_errors_are_refused():
    reasons = policy(minimal_report(interrupted="SIGTERM", errors=["boom"], verdict="not qualified"))
    assert "the run was interrupted (SIGTERM) before it finished" in reasons
    assert "the run recorded 1 harness error(s)" in reasons


def test_another_profile_or_harness_version_is_refused():
    reasons = policy(minimal_report(profile={"name": "fixture", "sha256": "e" * 64}))
    assert reasons == [f"the run was made under profile fixture with sha256 {'e' * 64}, but the shipped profile of "
                       f"that name has sha256 {'p' * 64}: its conditions are not the ones this release is qualified "
                       "under"]
    reasons = policy(minimal_report(harness={"name": "qualify", "version": "9.9.9"}))
    assert reasons == [f"the attestation was made by qualify 9.9.9; this gate (qualify {__version__}) knows the "
                       "checks of its own version only"]


def test_an_unverified_or_other_revision_is_refused():
    report = minimal_report()
    report["checkpoint"] = dict(report["checkpoint"], revision_source="--draft-revision", revision_verified_by=None)
    assert policy(report, expected(revision="a" * 40)) == [
        f"revision {'a' * 40} was only claimed (--draft-revision): the run never compared it with the bytes, so it "
        "cannot vouch for it"]
    assert policy(minimal_report(), expected(revision="b" * 40)) == [
        f"the attestation is about draft revision {'a' * 40}, not {'b' * 40}"]


def test_asking_the_statement_for_nothing_is_refused():
    assert policy(minimal_report(), expected(required_levels=(), checkpoint_files=None)) == [
        "no level is required, so the attestation cannot show that anything was qualified",
        "no checkpoint directory to compare the attestation's subjects with",
        "the release does not require structure, format, reproduction, which profile fixture requires: --require "
        "adds levels to the profile's, it never drops one",
    ]
    assert policy(minimal_report(), expected(required_levels=(), profile=None)) == [
        "the run was made under profile 'fixture', which this harness does not ship: a profile of one's own qualifies "
        "a checkpoint for development, never for a release; qualify it under a shipped profile"]


def test_a_level_the_release_profile_runs_on_a_stand_in_is_refused_whatever_the_statement_says():
    stand_in = ShippedProfile("fixture", "p" * 64, ("structure", "format", "reproduction"), ("format", "load"))
    assert policy(minimal_report(), expected(profile=stand_in)) == [
        "required level format ran on a stand-in (plumbing, it qualifies nothing): no runtime showed that it loads or "
        "serves this checkpoint, so it cannot count for a release"]


def test_every_check_that_did_not_pass_is_named():
    report = with_checks(minimal_report(), "format",
                         lambda cs: [dict(c, status="failed") if c["id"] in ("format.weights", "format.scales") else c
                                     for c in cs])
    assert policy(report) == ["required level format did not pass: format.weights, format.scales not passed"]


def test_a_revision_the_statement_does_not_record_is_refused():
    report = minimal_report()
    report["checkpoint"] = dict(report["checkpoint"], revision=None)
    assert policy(report, expected(revision="a" * 40)) == [
        f"the attestation is about draft revision (none recorded), not {'a' * 40}"]


def test_subjects_are_compared_file_by_file():
    from qualify.checkpoint.files import FileEntry

    files = (FileEntry("model.safetensors", "9" * 64, 1), FileEntry("tokenizer.json", "3" * 64, 1),
             FileEntry("README.md", "4" * 64, 1))
    assert policy(minimal_report(), expected(checkpoint_files=files)) == [
        "config.json: signed in the attestation but missing from the checkpoint directory",
        f"model.safetensors: changed after signing (sha256 {'1' * 12}... signed, {'9' * 12}... in the directory)",
        "tokenizer.json: in the checkpoint directory but not in the attestation (unqualified content)",
    ]
    report = minimal_report()
    report["checkpoint"] = dict(report["checkpoint"], files=[])
    assert policy(report) == [
        "the attestation names no checkpoint file, so it cannot vouch for any directory",
    ]


def test_a_name_with_control_characters_is_escaped():
    from qualify.checkpoint.files import FileEntry

    files = (*expected().checkpoint_files, FileEntry("evil\x1b[2J.safetensors", "5" * 64, 1))
    (reason,) = policy(minimal_report(), expected(checkpoint_files=files))
    assert "\x1b" not in escape_terminal(reason) and "\\x1b[2J" in escape_terminal(reason)


def test_an_unpinned_runtime_is_refused_unless_allowed():
    report = minimal_report(environment={"runtime": {"reproducible": False, "image": {"id": "sha256:" + "d" * 64}}})
    assert policy(report) == ["the runtime was launched unpinned, so the run is not reproducible; pin the image "
                              "digest and revisions, or pass --allow-unpinned to accept that"]
    assert policy(report, expected(allow_unpinned=True)) == []


def test_the_statement_records_the_conditions():
    enforced = {"revision": "7" * 40, "enforced": True, "method": "launcher-env", "variable": "MODEL_REVISION",
                "snapshot": None, "reason": None}
    report = minimal_report(environment={"runtime": {"reproducible": True, "image": {"id": "sha256:" + "d" * 64,
                                                                                     "ref": "img@sha256:x"},
                                                     "plan": {"target_revision_enforcement": enforced}}})
    report["levels"].append({"name": "acceptance", "checks": [{"id": "acceptance.draft_acceptance", "status": "failed",
                                                               "evidence": {"measured": {"prompts": {
                                                                   "name": "mt", "sha256": "6" * 64}}}}]})
    report["profile"]["conditions"] = {"target": {"repo": "org/target", "revision": "7" * 40}}
    st = a.build_statement(report, "r" * 64, {"file": "model.sig", "sha256": "8" * 64, "root_digest": "9" * 64})
    config = {d["name"]: d for d in st["predicate"]["configuration"]}
    assert config["runtime-image"]["digest"] == {"sha256": "d" * 64}
    assert config["prompts/mt"]["digest"] == {"sha256": "6" * 64}
    assert config["target"]["digest"] == {"gitCommit": "7" * 40}
    assert config["target"]["annotations"] == {"revisionEnforced": True, "method": "launcher-env",
                                               "variable": "MODEL_REVISION"}
    assert config["model-signature"]["annotations"]["rootDigest"] == {"sha256": "9" * 64}
    assert st["predicate"]["failedTests"] == ["acceptance.draft_acceptance"]
    assert all("uri" in d or "digest" in d for d in st["predicate"]["configuration"])


TARGET_REV = "7" * 40
NOT_ENFORCED = {"revision": TARGET_REV, "enforced": False, "method": None, "variable": None, "snapshot": None,
                "reason": "the launcher takes no target revision variable"}
RUNTIME_LEVELS = ("structure", "format", "reproduction", "load")


def runtime_report(record: dict | None, proof: dict | None = None) -> dict:
    """A qualified statement's report whose required levels include load, with the run's target record (if any)
    and the proof of a mounted target snapshot's files (if any)."""
    checks = level_checks()
    runtime: dict = {"reproducible": True}
    if record is not None:
        runtime["plan"] = {"target_revision_enforcement": record}
    environment: dict = {"runtime": runtime}
    if proof is not None:
        environment["target_identity"] = proof
    report = minimal_report(environment=environment)
    report["profile"]["conditions"] = {"target": {"repo": "org/target", "revision": TARGET_REV}}
    report["levels"].append({"name": "load", "required": True, "status": "passed",
                             "checks": [{"id": cid, "status": "passed"} for cid in checks["load"]]})
    return report


def target_of(report: dict) -> dict:
    config = {d["name"]: d for d in a.build_statement(report, "r" * 64)["predicate"]["configuration"]}
    return config["target"]


def test_an_unenforced_target_revision_is_a_claim_in_the_statement_not_a_digest():
    target = target_of(runtime_report(NOT_ENFORCED))
    assert target == {"name": "target", "uri": "https://huggingface.co/org/target", "annotations": {
        "revisionEnforced": False, "claimedRevision": TARGET_REV,
        "reason": "the launcher takes no target revision variable"}}
    # No runtime record at all (a run that launched none): the same, never a digest.
    assert "digest" not in target_of(minimal_report())
    assert target_of(minimal_report())["annotations"]["revisionEnforced"] is False
    # A record that enforced another revision than the profile's pins nothing either.
    other = {**NOT_ENFORCED, "enforced": True, "method": "pinned-snapshot", "reason": None, "revision": "8" * 40}
    assert target_of(runtime_report(other, target_proof("org/target", "8" * 40, "profile digests")))["annotations"] == {
        "revisionEnforced": False, "claimedRevision": TARGET_REV,
        "reason": f"the launch enforced revision {'8' * 40}, not the profile's {TARGET_REV}"}
    enforced = {**other, "revision": TARGET_REV, "snapshot": {"refs": ["main"]}}
    assert target_of(runtime_report(enforced, target_proof("org/target", TARGET_REV, "profile digests"))) == {
        "name": "target", "uri": "https://huggingface.co/org/target", "digest": {"gitCommit": TARGET_REV},
        "annotations": {"revisionEnforced": True, "method": "pinned-snapshot", "snapshotRefs": ["main"],
                        "identity": "profile digests", "identityHubEndpoint": None}}
    # The same snapshot with no proof that its files are the revision: its folder's name is only a claim.
    unproven = target_of(runtime_report(enforced))
    assert "digest" not in unproven and unproven["annotations"]["revisionEnforced"] is False
    assert unproven["annotations"]["reason"].startswith(f"the mounted target snapshot is named revision {TARGET_REV}")


LOCAL_HUB = "http://127.0.0.1:8123"
HUB_TAIL = ("which the release policy does not name (https://huggingface.co): a mirror or a local server answers with "
            "whatever its operator wrote, so it is only claimed; run again with HF_ENDPOINT unset or set to a hub the "
            "policy names, or pin the digests in the profile")


def test_the_statement_names_the_hub_the_run_consulted_in_its_uris():
    report = minimal_report(environment={"hub_endpoint": LOCAL_HUB})
    config = {d["name"]: d for d in a.build_statement(report, "r" * 64)["predicate"]["configuration"]}
    for name, repo in (("draft", "org/draft"), ("source", "org/source")):
        assert config[name]["uri"] == f"{LOCAL_HUB}/{repo}"
        assert config[name]["annotations"][a.HUB_ENDPOINT] == LOCAL_HUB
    # A report that records none (made before it was recorded): the public hub's URI, and no endpoint claimed.
    config = {d["name"]: d for d in a.build_statement(minimal_report(), "r" * 64)["predicate"]["configuration"]}
    assert config["draft"]["uri"] == "https://huggingface.co/org/draft"
    assert a.HUB_ENDPOINT not in config["draft"]["annotations"]


def test_a_revision_verified_by_a_hub_the_policy_does_not_name_is_refused_naming_the_endpoint():
    report = minimal_report(environment={"hub_endpoint": LOCAL_HUB})
    report["checkpoint"] = dict(report["checkpoint"], revision_verified_by=a.VERIFIED_BY_HUB_METADATA)
    report["source"] = {"repo": "org/source", "revision": "b" * 40,
                        "identity": {**_identity("verified"), "method": "hub cache snapshot and hub"}}
    reasons = [r for r in policy(report, expected(revision="a" * 40)) if "release policy does not name" in r]
    assert reasons == [f"draft revision {'a' * 40} was verified by the hub at {LOCAL_HUB}, {HUB_TAIL}",
                       f"the source (commit {'b' * 40}) was verified by the hub at {LOCAL_HUB}, {HUB_TAIL}"]
    allowed = expected(revision="a" * 40, hub_endpoints=(LOCAL_HUB,))
    assert not [r for r in policy(report, allowed) if "release policy does not name" in r]
    # The public hub, recorded as such, proves it.
    report["environment"] = {"hub_endpoint": "https://huggingface.co"}
    assert not [r for r in policy(report, expected(revision="a" * 40)) if "release policy does not name" in r]


def test_a_target_snapshot_proven_by_a_local_hub_or_not_said_how_is_refused():
    enforced = {**NOT_ENFORCED, "enforced": True, "method": "pinned-snapshot", "reason": None}
    exp = expected(required_levels=RUNTIME_LEVELS)
    by_local = runtime_report(enforced, target_proof("org/target", TARGET_REV, "hub", LOCAL_HUB))
    assert [r for r in policy(by_local, exp) if "target" in r] == [
        f"the mounted target snapshot at revision {TARGET_REV} was verified by the hub at {LOCAL_HUB}, {HUB_TAIL}"]
    by_hub = runtime_report(enforced, target_proof("org/target", TARGET_REV, "hub", "https://huggingface.co"))
    assert not [r for r in policy(by_hub, exp) if "target" in r]
    # A statement (signed by other code) that says a snapshot held the target but not how its files were proven.
    statement = a.build_statement(by_hub, "r" * 64)
    target = next(d for d in statement["predicate"]["configuration"] if d["name"] == "target")
    del target["annotations"]["identity"]
    reasons = attestation_refusals(a.read_statement(statement), exp, version=__version__, defined=level_checks())
    assert ("the attestation says a mounted target snapshot held the runtime to the target revision, but not how its "
            "files were proven to be that revision (a folder's name proves nothing)") in reasons
    # Unproven: not enforced, so refused as an unpinned target (the reason says why).
    unproven = runtime_report(enforced, target_proof("org/target", TARGET_REV, None))
    (reason,) = [r for r in policy(unproven, exp) if "target" in r]
    assert reason.startswith(f"the target revision was not enforced (the mounted target snapshot's files were not "
                             f"proven to be revision {TARGET_REV}: only claimed")


def test_an_unenforced_target_is_refused_where_a_runtime_level_is_required_unless_accepted():
    refusal = ("the target revision was not enforced (the launcher takes no target revision variable): the runtime "
               "loaded whatever target its launcher resolved, so the target revision the run names is a claim, not "
               "what it ran; enforce it (a launcher revision variable the profile declares, or qualify run "
               "--target-snapshot), or pass --accept-unpinned-target to accept that")
    exp = expected(required_levels=RUNTIME_LEVELS)
    assert policy(runtime_report(NOT_ENFORCED), exp) == [refusal]
    assert policy(runtime_report(NOT_ENFORCED), replace(exp, accept_unpinned_target=True)) == []
    enforced = {**NOT_ENFORCED, "enforced": True, "method": "launcher-env", "variable": "MODEL_REVISION",
                "reason": None}
    assert policy(runtime_report(enforced), exp) == []
    # A statement that says nothing of it (made before the record existed, or edited out): not enforced.
    (reason,) = policy(runtime_report(None), exp)
    assert reason.startswith("the target revision was not enforced (the run recorded no target revision enforcement)")
    # Only the checkpoint's levels required: the target played no part, nothing to refuse.
    assert policy(runtime_report(NOT_ENFORCED)) == []


def test_the_statement_records_the_paired_levels_prompt_sets_and_chat_template():
    measured = {"prompt_sets": [{"name": "mt-bench", "sha256": "1" * 64}, {"name": "gsm8k", "sha256": "2" * 64},
                                {"name": "broken"}],
                "chat_template": {"sha256": "3" * 64}}
    report = minimal_report()
    report["levels"].append({"name": "paired", "checks": [{"id": "paired.non_inferiority", "status": "passed",
                                                           "evidence": {"measured": measured}}]})
    config = {d["name"]: d for d in a.build_statement(report, "r" * 64)["predicate"]["configuration"]}
    assert config["prompts/mt-bench"]["digest"] == {"sha256": "1" * 64}
    assert config["prompts/gsm8k"]["digest"] == {"sha256": "2" * 64}
    assert config["prompts/chat-template"]["digest"] == {"sha256": "3" * 64}
    assert "prompts/broken" not in config
    measured["chat_template"] = {"sha256": None, "note": "not verified"}  # an unread template is not attested
    config = {d["name"]: d for d in a.build_statement(report, "r" * 64)["predicate"]["configuration"]}
    assert "prompts/chat-template" not in config


# ---------------------------------------------------------------- the card cites it

@pytest.mark.slow
def test_the_card_cites_the_verified_attestation(signed_run, keys, tmp_path, capsys):
    report = signed_run / "report.json"
    capsys.readouterr()
    assert main(["card", str(report), "--verify-key", str(keys["release"][1])]) == 0
    out = capsys.readouterr().out
    sha = hashlib.sha256((signed_run / a.ATTESTATION_NAME).read_bytes()).hexdigest()
    fingerprint = sig.key_fingerprint(sig.load_verify_key(keys["release"][1]))
    assert f"Signed attestation: `{a.ATTESTATION_NAME}` (sha256 `{sha}`)" in out
    assert f"signed with the EC P-256 key `{fingerprint}`" in out
    # Without a key it cites nothing; with the wrong key, or for an altered report, it refuses to cite.
    assert main(["card", str(report)]) == 0
    assert "Signed attestation" not in capsys.readouterr().out
    assert main(["card", str(report), "--verify-key", str(keys["attacker"][1])]) == 2
    assert "the card cannot cite it: signed by another key" in capsys.readouterr().err
    altered = tmp_path / "run"
    shutil.copytree(signed_run, altered)
    (altered / "report.json").write_text((signed_run / "report.json").read_text() + " ")
    assert main(["card", str(altered / "report.json"), "--verify-key", str(keys["release"][1])]) == 2
    assert "did not sign" in capsys.readouterr().err


# ---------------------------------------------------------------- a local folder's revision, by the hub's metadata

def test_a_local_folder_is_verified_against_the_hubs_metadata_at_the_commit(tmp_path, monkeypatch):
    from qualify.run.pipeline import verify_revision_by_hub
    from tests.hub_standin import StandinHub, StandinRepo, go_online

    go_online(monkeypatch)
    files = {p.name: p.read_bytes() for p in (FIXTURE / "mxfp8").iterdir()}
    commit, other = "1" * 40, "2" * 40
    changed = dict(files, **{"config.json": files["config.json"] + b" "})
    repo = StandinRepo("org/draft", {commit: files, other: changed}, branches={"main": commit})
    folder = tmp_path / "draft"
    shutil.copytree(FIXTURE / "mxfp8", folder)
    (folder / "README.md").write_text("card\n")  # even a file never loaded: the folder is not that commit
    with StandinHub([repo]).serving() as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        verified, why = verify_revision_by_hub("org/draft", commit, folder)
        assert verified is None and "README.md is not in the commit" in why
        (folder / "README.md").unlink()
        verified, why = verify_revision_by_hub("org/draft", commit, folder)
        assert verified == a.VERIFIED_BY_HUB_METADATA, why
        verified, why = verify_revision_by_hub("org/draft", other, folder)
        assert verified is None and "config.json differs from the commit's (git blob id)" in why
        (folder / "hf_quant_config.json").unlink()
        verified, why = verify_revision_by_hub("org/draft", commit, folder)
        assert verified is None and "hf_quant_config.json of the commit is missing from the folder" in why
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    verified, why = verify_revision_by_hub("org/draft", commit, folder)
    assert verified is None and why.startswith("only claimed: not compared with the hub")


# ---------------------------------------------------------------- make qualify, signed

@pytest.mark.slow
def test_make_qualify_signs_and_make_gate_verifies(keys, tmp_path):
    """`make qualify QUALIFY_ARGS="--sign-key k.pem"` on the DFlash 2 fixture's profile (the checkpoint levels it
    requires), then `make gate`, which pins the release to PROFILE."""
    venv = Path(sys.executable).parent.parent
    # STAMP= and LOCAL_RUNTIMES=: this venv is already installed, and the checkpoint levels need no runtime.
    common = [f"VENV={venv}", "STAMP=", "LOCAL_RUNTIMES="]
    proc = subprocess.run(["make", "-s", "qualify", *common, "PROFILE=fixture", f"LEVELS={CHECKPOINT_LEVELS}",
                           f"REPORTS={tmp_path / 'reports'}", f"QUALIFY_ARGS=--sign-key {keys['release'][0]}"],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (attestation,) = (tmp_path / "reports").glob(f"*/{a.ATTESTATION_NAME}")
    gate = subprocess.run(["make", "-s", "gate", *common, "PROFILE=fixture", f"ATTESTATION={attestation}",
                           f"VERIFY_KEY={keys['release'][1]}", f"REQUIRE={CHECKPOINT_LEVELS}"],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert gate.returncode == 0, gate.stdout + gate.stderr
    assert gate.stdout.startswith("qualified: structure, format, reproduction passed")
    assert f"under profile fixture (sha256 {load_profile('fixture').sha256})" in gate.stdout
    refused = subprocess.run(["make", "-s", "gate", *common, "PROFILE=fixture", f"ATTESTATION={attestation}",
                              f"VERIFY_KEY={keys['attacker'][1]}", f"REQUIRE={CHECKPOINT_LEVELS}"],
                             cwd=REPO, capture_output=True, text=True, timeout=300)
    assert refused.returncode != 0 and "signed by another key" in refused.stdout
    # Under another profile than the run's (make's default, fixture-dflash2-cpu), the release is refused.
    other = subprocess.run(["make", "-s", "gate", *common, f"ATTESTATION={attestation}",
                            f"VERIFY_KEY={keys['release'][1]}", f"CHECKPOINT={FIXTURE / 'mxfp8'}"],
                           cwd=REPO, capture_output=True, text=True, timeout=300)
    assert other.returncode != 0
    assert ("refused: the run was made under profile 'fixture', not under fixture-dflash2-cpu, the shipped profile "
            "this release is qualified under (--profile)") in other.stdout


@pytest.mark.slow
def test_a_report_without_its_attestation_or_with_a_replaced_model_signature_is_refused(signed_run, keys, release,
                                                                                       tmp_path, gate):
    bare = tmp_path / "bare"
    bare.mkdir()
    shutil.copy(signed_run / "report.json", bare / "report.json")
    code, out, _ = gate(str(bare / "report.json"), "--verify-key", str(keys["release"][1]), "--checkpoint",
                        str(release), *REQUIRE)
    assert code == 1
    assert out.splitlines() == [f"refused: {bare / 'report.json'} has no attestation beside it "
                                f"({a.ATTESTATION_NAME}): an unsigned report cannot license a release (the run was "
                                "not given --sign-key?)"]
    replaced = tmp_path / "replaced"
    shutil.copytree(signed_run, replaced)
    (replaced / a.MODEL_SIGNATURE_NAME).write_text("{}")
    code, out, _ = gate(*gate_args(replaced, keys["release"][1], release))
    assert code == 1
    (line,) = out.splitlines()
    assert line.startswith(f"refused: {replaced / a.MODEL_SIGNATURE_NAME} is not the model signature the attestation")


@pytest.mark.slow
def test_report_md_says_whether_the_revision_was_verified(signed_run):
    md = (signed_run / "report.md").read_text()
    assert f"- Revision verified ({a.VERIFIED_BY_CONTENT}): the local folder's content revision" in md


def test_a_run_that_cannot_be_signed_as_asked_says_why(tmp_path):
    priv, _ = write_key(tmp_path, "k")
    (tmp_path / "report.json").write_text(json.dumps(minimal_report()))
    with pytest.raises(HarnessError, match="no local checkpoint folder to sign"):
        a.write_attestation(tmp_path, sig.load_signing_key(priv), checkpoint=None, sign_checkpoint=True)
    assert not (tmp_path / a.ATTESTATION_NAME).exists()  # nothing half-written
    out = a.write_attestation(tmp_path, sig.load_signing_key(priv))
    assert out == tmp_path / a.ATTESTATION_NAME and len(out.read_text().splitlines()) == 1
    assert not list(tmp_path.glob(".*.tmp"))


@pytest.mark.slow
def test_the_signing_key_may_be_named_by_the_environment(keys, tmp_path):
    import os

    proc = subprocess.run([sys.executable, "-m", "qualify.cli", "check", str(FIXTURE / "mxfp8"), "--levels", "format",
                           "--report-dir", str(tmp_path)], cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={**os.environ, sig.SIGN_KEY_ENV: str(keys["release"][0])})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (attestation,) = tmp_path.glob(f"*/{a.ATTESTATION_NAME}")
    statement = a.verify_envelope(a.read_envelope(attestation), sig.load_verify_key(keys["release"][1]))
    assert statement["predicate"]["passedTests"] == list(level_checks()["format"])


@pytest.mark.slow
def test_the_forgery_of_a_failing_run_is_refused(keys, tmp_path, gate):
    """The hostile case: a run that fails, its report flipped to passed with findings cleared and made-up checks."""
    broken = tmp_path / "broken"
    shutil.copytree(FIXTURE / "mxfp8", broken)
    raw = bytearray((broken / "model.safetensors").read_bytes())
    raw[-1] ^= 0x40  # the last byte of a kept tensor: checksums and reproduction fail
    (broken / "model.safetensors").write_bytes(bytes(raw))
    proc = run_qualify("check", str(broken), "--source", str(FIXTURE / "source"), "--levels", CHECKPOINT_LEVELS,
                       "--report-dir", str(tmp_path / "reports"), "--sign-key", str(keys["release"][0]))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (run_dir,) = (tmp_path / "reports").glob("*/")
    code, out, _ = gate(*gate_args(run_dir, keys["release"][1], broken))
    assert code == 1
    lines = out.splitlines()
    assert "refused: the attested result is FAILED: the run's verdict was not qualified" in lines
    assert "refused: required level reproduction did not pass: reproduction.unquantized_tensors not passed" in lines
    assert "refused: required level structure did not pass: structure.output_checksums not passed" in lines
    # The report forged to say otherwise is not the one signed; on its own word it is still refused.
    report = json.loads((run_dir / "report.json").read_text())
    for lvl in report["levels"]:
        lvl["status"] = "passed"
        for check in lvl["checks"]:
            check["status"] = "passed"
            if check.get("evidence"):
                check["evidence"].update(findings=[], findings_total=0)
        lvl["checks"].append({**lvl["checks"][0], "id": f"{lvl['name']}.also_fine"})
    report["verdict"], report["qualified_levels"] = "qualified", [lv["name"] for lv in report["levels"]]
    (run_dir / "report.json").write_text(json.dumps(report))
    code, out, _ = gate(str(run_dir / "report.json"), "--verify-key", str(keys["release"][1]), "--checkpoint",
                        str(broken), *REQUIRE)
    assert code == 1 and out.splitlines()[0].startswith(f"refused: {run_dir / 'report.json'} is not the report")
    code, out, _ = gate(str(run_dir / "report.json"), "--checkpoint", str(broken), *REQUIRE, "--allow-unsigned")
    assert code == 1
    for level in ("structure", "format", "reproduction"):
        assert f"refused: check {level}.also_fine: not a check qualify {__version__} defines (made up)" in out


def _identity(status: str) -> dict:
    from qualify.checkpoint.identity import identity_record

    return identity_record(verified=status == "verified", trusted=status == "trusted", method="profile digests",
                           repo="org/source", revision="b" * 40)


def test_the_statement_names_only_a_verified_source():
    verified = minimal_report(source={"repo": "org/source", "revision": "b" * 40, "identity": _identity("verified")})
    config = {d["name"]: d for d in a.build_statement(verified, "r" * 64)["predicate"]["configuration"]}
    assert config["source"]["uri"] == "https://huggingface.co/org/source"
    assert config["source"]["digest"] == {"gitCommit": "b" * 40}
    assert config["source"]["annotations"] == {"identity": "verified", "method": "profile digests"}
    trusted = minimal_report(source={"repo": "org/source", "revision": "b" * 40, "identity": _identity("trusted")})
    config = {d["name"]: d for d in a.build_statement(trusted, "r" * 64)["predicate"]["configuration"]}
    assert "digest" not in config["source"]  # the profile's pin is what it was meant to be, not a fact about it
    assert config["source"]["annotations"] == {"identity": "trusted", "method": "trusted (--trust-local-source)",
                                               "claimedRevision": "b" * 40}


def test_an_unproven_source_is_refused_and_a_trusted_one_unless_allowed():
    trusted = minimal_report(source={"repo": "org/source", "revision": "b" * 40, "identity": _identity("trusted")})
    assert policy(trusted) == ["the source folder was trusted on --trust-local-source without proof that it is the "
                               "pinned revision; prove it (profile digests, a hub cache snapshot or the hub), or pass "
                               "--allow-untrusted-source to accept that"]
    assert policy(trusted, expected(allow_untrusted_source=True)) == []
    refuted = minimal_report(source={"repo": "org/source", "revision": "b" * 40, "identity": _identity("no")})
    assert policy(refuted, expected(allow_untrusted_source=True)) == [
        "the source identity was not verified: nothing shows the source folder was the pinned revision"]
    verified = minimal_report(source={"repo": "org/source", "revision": "b" * 40, "identity": _identity("verified")})
    assert policy(verified) == []


@pytest.mark.slow
def test_the_model_signature_is_verified_against_the_folder_with_the_release_key(signed_run, keys, release, gate,
                                                                                  tmp_path):
    bundle = signed_run / a.MODEL_SIGNATURE_NAME
    sig.verify_model_signature(release, bundle, keys["release"][1])
    # The model card is written after qualification: README.md is not signed, and editing it is no mismatch.
    (release / "README.md").write_text("## Validation status\n\nStatus: qualified ...\n")
    sig.verify_model_signature(release, bundle, keys["release"][1])
    with pytest.raises(AttestationError, match=r"does not verify against .* with this key"):
        sig.verify_model_signature(release, bundle, keys["attacker"][1])
    cfg = release / "config.json"
    cfg.write_bytes(cfg.read_bytes() + b" ")
    with pytest.raises(AttestationError) as exc:
        sig.verify_model_signature(release, bundle, keys["release"][1])
    assert str(exc.value).endswith("with this key (changed after signing: config.json)")
    (release / "hf_quant_config.json").unlink()
    with pytest.raises(AttestationError, match=r"does not verify .*hf_quant_config\.json"):
        sig.verify_model_signature(release, bundle, keys["release"][1])
    # The attestation names a model signature: shipping without it is refused.
    bare = tmp_path / "no-sig"
    shutil.copytree(signed_run, bare)
    (bare / a.MODEL_SIGNATURE_NAME).unlink()
    shutil.rmtree(release)
    shutil.copytree(FIXTURE / "mxfp8", release)
    code, out, _ = gate(*gate_args(bare, keys["release"][1], release))
    assert code == 1
    assert out.splitlines() == [f"refused: the attestation names a model signature, {bare / a.MODEL_SIGNATURE_NAME}, "
                                "that is not beside it: the release would ship without the signature its users verify"]


def test_the_harness_is_named_by_its_commit_and_every_uri_is_absolute() -> None:
    from urllib.parse import urlsplit

    from tests.run_builders import make_run

    run = make_run()
    run.environment["harness_source"] = {"commit": "c" * 40, "clean": False}
    report = run.to_dict()
    statement = a.build_statement(report, "0" * 64, {"file": "model.sig", "sha256": "1" * 64,
                                                     "root_digest": "2" * 64})
    config = {d["name"]: d for d in statement["predicate"]["configuration"]}
    harness = config[a.HARNESS]
    assert harness["uri"] == "pkg:generic/qualify@" + "c" * 40 and harness["digest"] == {"gitCommit": "c" * 40}
    assert harness["annotations"]["treeClean"] is False
    for descriptor in statement["predicate"]["configuration"]:
        if "uri" in descriptor:
            assert urlsplit(descriptor["uri"]).scheme, descriptor  # absolute: a scheme, never a bare file name
    assert a.read_statement(statement).harness_commit == "c" * 40
    # Outside a git checkout the version is all there is, and no commit is claimed.
    run.environment.pop("harness_source")
    bare = {d["name"]: d for d in a.build_statement(run.to_dict(), "0" * 64)["predicate"]["configuration"]}
    assert bare[a.HARNESS]["uri"] == f"pkg:generic/qualify@{run.harness_version}" and "digest" not in bare[a.HARNESS]
