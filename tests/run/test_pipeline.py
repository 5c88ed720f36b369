"""``qualify run`` (qualify.run.pipeline): inputs resolved and recorded, levels gated in order, measured levels
never qualifying, local servers failing loudly -- all without a server, in-process."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from qualify.checkpoint.checksums import folder_revision
from qualify.core import Status, Verdict
from qualify.errors import UsageError
from qualify.profile import load_profile
from qualify.report.model import read_json
from qualify.run.pipeline import RunOptions, resolve_checkpoint, run_qualification
from qualify.serving.local_servers import LocalServing
from tests.helpers import FIXTURE, REPO, TRACEBACK

FIXTURE_REVISION = "d6a9475b7a3a24c86170d357bc89542a74b65da7"  # fixtures/dflash2-tiny/mxfp8 (folder_revision)


def _opts(tmp_path: Path, **kw: object) -> RunOptions:
    profile = load_profile("fixture")
    base: dict[str, object] = {"profile": profile, "levels": ["structure"], "report_dir": tmp_path / "reports",
                               "checkpoint": FIXTURE / "mxfp8", "source": FIXTURE / "source"}
    base.update(kw)
    return RunOptions(**base)  # type: ignore[arg-type]


def test_a_local_folder_is_identified_by_its_content(tmp_path: Path) -> None:
    r = resolve_checkpoint(_opts(tmp_path))
    assert (r.revision, r.revision_source, r.obtained) == (FIXTURE_REVISION, "content of the local folder",
                                                           "local folder")
    assert folder_revision(FIXTURE / "mxfp8") == FIXTURE_REVISION
    # One changed byte is another revision.
    copy = tmp_path / "copy"
    shutil.copytree(FIXTURE / "mxfp8", copy)
    (copy / "config.json").write_text((copy / "config.json").read_text() + " ")
    assert resolve_checkpoint(_opts(tmp_path, checkpoint=copy)).revision != FIXTURE_REVISION


def test_a_given_draft_revision_wins_and_a_bad_one_is_a_usage_error(tmp_path: Path) -> None:
    rev = "0123456789abcdef0123456789abcdef01234567"
    r = resolve_checkpoint(_opts(tmp_path, draft_revision=rev))
    assert (r.revision, r.revision_source) == (rev, "--draft-revision")
    with pytest.raises(UsageError, match="not an immutable commit"):
        resolve_checkpoint(_opts(tmp_path, draft_revision="main"))


def test_no_checkpoint_and_no_revision_says_what_to_give(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"give --draft-revision COMMIT .* or --checkpoint DIR"):
        resolve_checkpoint(_opts(tmp_path, checkpoint=None))


def test_an_unreachable_hub_is_a_written_not_qualified_report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    rev = "0123456789abcdef0123456789abcdef01234567"
    run, run_dir, code = run_qualification(_opts(tmp_path, checkpoint=None, draft_revision=rev,
                                                 hf_cache=tmp_path / "empty-cache"))
    assert code == 1 and run.verdict is Verdict.NOT_QUALIFIED
    back = read_json(run_dir / "report.json")
    assert any("draft qualify-fixtures/dflash2-tiny-mxfp8@" + rev in e and "not (completely) in the local cache" in e
               for e in back.errors), back.errors
    assert back.level("structure").reason.startswith("not run: the inputs could not be obtained")


def _target_snapshot(root: Path, files: dict[str, bytes]) -> Path:
    """A hub-cache snapshot of the fixture profile's target at [target].revision holding ``files``."""
    target = load_profile("fixture").target
    assert target is not None and target.repo and target.revision
    repo_dir = root / ("models--" + target.repo.replace("/", "--"))
    snap = repo_dir / "snapshots" / target.revision
    (repo_dir / "blobs").mkdir(parents=True)
    snap.mkdir(parents=True)
    for rel, data in files.items():
        blob = repo_dir / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        (snap / rel).symlink_to(blob)
    return snap


@pytest.mark.slow
def test_a_target_snapshot_is_hashed_once_proven_or_only_claimed_and_the_report_says_how_long(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # no hub to ask, no digests pinned: its folder name is all it has
    made_up = {"config.json": b'{"architectures": ["LlamaForCausalLM"]}\n'}
    snap = _target_snapshot(tmp_path / "cache", made_up)
    run, _, _ = run_qualification(_opts(tmp_path, target_snapshot=snap))
    proof = run.environment["target_identity"]
    assert proof["verified"] is False and proof["method"] is None and proof["files"] == 1
    assert proof["reason"].startswith("only claimed: the profile pins no digests for the target ([target.sha256])")
    assert proof["hash_seconds"] >= 0 and proof["bytes"] == len(made_up["config.json"])
    out = capsys.readouterr().out
    assert "NOT proven, so its revision is only claimed; 1 files, 0.00 GB hashed in" in out
    # Pinned by the profile: proven by those digests, offline too.
    pinned = {"config.json": hashlib.sha256(made_up["config.json"]).hexdigest()}
    monkeypatch.setattr(type(load_profile("fixture")), "target_sha256", property(lambda self: pinned))
    run, _, _ = run_qualification(_opts(tmp_path, target_snapshot=snap))
    assert run.environment["target_identity"]["verified"] is True
    assert run.environment["target_identity"]["method"] == "profile digests"


def _broken_reproduction(tmp_path: Path) -> Path:
    """The fixture with one scale byte moved: structure still reads it, reproduction must fail."""
    ckpt = tmp_path / "broken"
    shutil.copytree(FIXTURE / "mxfp8", ckpt)
    tensors = load_file(ckpt / "model.safetensors")
    name = next(k for k in sorted(tensors) if k.endswith("weight_scale"))
    scale = tensors[name].clone()
    scale.view(-1)[0] = (scale.view(-1)[0].to(torch.int32) + 1).to(torch.uint8)
    tensors[name] = scale
    save_file(tensors, ckpt / "model.safetensors")
    return ckpt


def _run_cli(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> tuple[int, Path]:
    """``qualify run`` in its own process (a nested in-process pytest session would share this one's modules)."""
    reports = tmp_path / "reports"
    proc = subprocess.run([sys.executable, "-m", "qualify.cli", "run", "--profile", "fixture", "--report-dir",
                           str(reports), *args], cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {})})
    assert TRACEBACK not in proc.stderr, proc.stderr[-3000:]
    (path,) = reports.glob("*/report.json")
    return proc.returncode, path


@pytest.mark.slow
def test_levels_after_a_failed_one_are_not_run(tmp_path: Path) -> None:
    ckpt = _broken_reproduction(tmp_path)
    code, path = _run_cli(tmp_path, "--checkpoint", str(ckpt), "--source", str(FIXTURE / "source"),
                          "--levels", "reproduction,load,smoke")
    back = read_json(path)
    assert code == 1 and back.verdict is Verdict.NOT_QUALIFIED
    assert back.level("reproduction").status is Status.FAILED
    for name in ("load", "smoke"):
        lvl = back.level(name)
        assert lvl.status is Status.NOT_RUN and lvl.checks, name
        assert all(c.status is Status.NOT_RUN for c in lvl.checks)
        assert lvl.reason.startswith("not run: level reproduction failed")
        assert all("level reproduction failed" in c.message for c in lvl.checks)
    # Nothing of the runtimes was touched: no image built, no container, no local server started.
    assert "runtime_image_build" not in back.environment
    assert not (path.parent / "server.log").exists() and not list(path.parent.glob("vllm-*.log"))


@pytest.mark.slow
def test_a_missing_vllm_venv_is_a_harness_fault_of_every_serving_check_with_the_setup_hint(tmp_path: Path) -> None:
    from fixtures.serving import build

    build()  # the model folders exist, so what is missing is the venv alone (reused when already built)
    code, path = _run_cli(tmp_path, "--checkpoint", str(FIXTURE / "mxfp8"), "--source", str(FIXTURE / "source"),
                          "--levels", "smoke", env={"QUALIFY_VLLM_VENV": str(tmp_path / "no-vllm")})
    run = read_json(path)
    # The machine lacks what the harness needs: no verdict on the checkpoint, the harness's own exit code.
    assert code == 3 and run.verdict is Verdict.NOT_QUALIFIED
    checks = run.level("smoke").checks
    assert checks and all(c.status is Status.ERROR for c in checks)
    assert all("vLLM virtual environment" in c.message and "does not exist" in c.message for c in checks)


def test_a_local_target_that_is_not_the_pinned_one_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    profile = load_profile("fixture")
    spec = profile.local_server
    assert spec is not None
    fake_target = tmp_path / "target"
    fake_target.mkdir()
    (fake_target / "config.json").write_text("{}")
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("")
    (venv / ".qualify-setup-complete").write_text("")
    monkeypatch.setenv("QUALIFY_VLLM_VENV", str(venv))
    if not (spec.draft / "config.json").is_file():
        pytest.skip("the serving fixture is not built (python -m fixtures.serving)")
    local = LocalServing(profile, tmp_path / "logs", target=fake_target)
    with pytest.raises(Exception, match=r"content revision [0-9a-f]{40}, not the profile's \$\.target\.revision"):
        local.endpoint()
    local.stop()


def _hub_with_fixture(draft_commit: str, *, corrupt: str | None = None):
    """A stand-in hub serving the fixture's draft at ``draft_commit`` and its source at the profile's pin."""
    from tests.hub_standin import StandinHub, StandinRepo

    profile = load_profile("fixture")
    draft = {p.name: p.read_bytes() for p in sorted((FIXTURE / "mxfp8").iterdir()) if p.is_file()}
    source = {p.name: p.read_bytes() for p in sorted((FIXTURE / "source").iterdir()) if p.is_file()}
    if corrupt is not None:
        raw = bytearray(draft[corrupt])
        raw[-1] ^= 0x01
        draft[corrupt] = bytes(raw)
    return StandinHub([
        StandinRepo(profile.data["checkpoint"]["repo"], {draft_commit: draft}, branches={"main": draft_commit}),
        StandinRepo(profile.source_repo or "", {profile.source_revision or "": source}),
    ])


@pytest.mark.slow
@pytest.mark.parametrize("corrupt", [None, "model.safetensors"])
def test_qualify_run_fetches_draft_and_source_from_the_hub_at_their_commits(tmp_path: Path, corrupt) -> None:
    """The online path of ``qualify run`` end to end: the real huggingface_hub client against a local hub."""
    commit = "4444444444444444444444444444444444444444"
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_TOKEN")}
    with _hub_with_fixture(commit, corrupt=corrupt).serving() as hub:
        env["HF_ENDPOINT"] = hub.url
        reports = tmp_path / "reports"
        proc = subprocess.run([sys.executable, "-m", "qualify.cli", "run", "--profile", "fixture", "--draft-revision",
                               commit, "--hf-cache", str(tmp_path / "cache"), "--levels",
                               "structure,format,reproduction", "--report-dir", str(reports)],
                              cwd=REPO, capture_output=True, text=True, timeout=300, env=env)
        asked = hub.paths("GET")
    assert TRACEBACK not in proc.stdout + proc.stderr
    (path,) = reports.glob("*/report.json")
    run = read_json(path)
    profile = load_profile("fixture")
    assert run.checkpoint["obtained"] == "hub" and run.checkpoint["revision"] == commit
    assert run.source["obtained"] == "hub" and run.source["revision"] == profile.source_revision
    assert run.checkpoint["hub"]["mode"] == "online"
    assert any(f"/resolve/{commit}/model.safetensors" in p for p in asked)
    assert any(f"/resolve/{profile.source_revision}/model.safetensors" in p for p in asked)
    snapshot = tmp_path / "cache" / f"models--{profile.data['checkpoint']['repo'].replace('/', '--')}" / "snapshots"
    assert run.checkpoint["path"] == str(snapshot / commit)
    # The revision is verified from the pinned bytes against the hub's metadata of the commit, not by the download.
    assert run.checkpoint["revision_verified_by"] == "hub metadata at that commit"
    # By this local hub, and the report says so: the gate holds such a proof to the release policy's hubs.
    assert run.environment["hub_endpoint"] == hub.url
    if corrupt is None:
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert str(run.verdict) == "qualified"
    else:  # the hub served other bytes than the release's manifest names: the checksums catch it
        assert proc.returncode == 1, proc.stdout + proc.stderr
        failed = {c.id for lvl in run.levels for c in lvl.checks if c.status is Status.FAILED}
        assert "structure.output_checksums" in failed


@pytest.mark.slow
def test_a_release_whose_revisions_a_local_hub_verified_is_refused_by_the_gate_naming_it(tmp_path: Path) -> None:
    """A local server answering HF_ENDPOINT "verifies" the draft revision; signed, the run's statement names that
    endpoint, and the gate (the public hub only) refuses the revision as only claimed, naming the endpoint."""
    from tests.helpers import write_key

    commit = "4444444444444444444444444444444444444444"
    priv, pub = write_key(tmp_path, "release")
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_TOKEN")}
    with _hub_with_fixture(commit).serving() as hub:
        env["HF_ENDPOINT"] = hub.url
        reports = tmp_path / "reports"
        proc = subprocess.run([sys.executable, "-m", "qualify.cli", "run", "--profile", "fixture", "--draft-revision",
                               commit, "--hf-cache", str(tmp_path / "cache"), "--levels",
                               "structure,format,reproduction", "--report-dir", str(reports), "--sign-key", str(priv)],
                              cwd=REPO, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (run_dir,) = reports.glob("*/")
    run = read_json(run_dir / "report.json")
    gate = subprocess.run([sys.executable, "-m", "qualify.cli", "gate", "--attestation",
                           str(run_dir / "attestation.intoto.jsonl"), "--verify-key", str(pub), "--checkpoint",
                           str(run.checkpoint["path"]), "--revision", commit, "--profile", "fixture"],
                          cwd=REPO, capture_output=True, text=True, timeout=120,
                          env={k: v for k, v in env.items() if k != "HF_ENDPOINT"})
    assert gate.returncode == 1, gate.stdout + gate.stderr
    lines = gate.stdout.splitlines()
    assert (f"refused: draft revision {commit} was verified by the hub at {hub.url}, which the release policy does "
            "not name (https://huggingface.co): a mirror or a local server answers with whatever its operator wrote, "
            "so it is only claimed; run again with HF_ENDPOINT unset or set to a hub the policy names, or pin the "
            "digests in the profile") in lines, gate.stdout
    # The fixture's source is proven by the profile's pinned digests, which ask no hub: not held to one.
    assert run.source["identity"]["method"] == "profile digests"
    assert not any(line.startswith("refused: the source") for line in lines), gate.stdout


@pytest.mark.slow
@pytest.mark.parametrize("served_other", [False, True])
def test_a_hub_fetched_source_is_proven_by_its_snapshot_and_the_hub(tmp_path: Path, served_other: bool) -> None:
    """A profile that pins no source digests (the seed's): the downloaded snapshot and the hub's metadata prove it."""
    from fixtures.corpus import unpinned_profile

    commit = "5555555555555555555555555555555555555555"
    profile_file = tmp_path / "unpinned.toml"
    profile_file.write_text(unpinned_profile(tmp_path, tmp_path).replace('name = "fixture"', 'name = "unpinned"'))
    profile = load_profile(profile_file)
    hub = _hub_with_fixture(commit)
    if served_other:  # the hub's metadata names the real weights, the bytes served are another model's
        source_repo = hub.repos[profile.source_repo or ""]
        genuine = source_repo.commits[profile.source_revision or ""]["model.safetensors"]
        source_repo.serve_bytes[(profile.source_revision or "", "model.safetensors")] = genuine[:-1] + bytes(
            [genuine[-1] ^ 1])
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_TOKEN")}
    with hub.serving() as served:
        env["HF_ENDPOINT"] = served.url
        reports = tmp_path / "reports"
        proc = subprocess.run([sys.executable, "-m", "qualify.cli", "run", "--profile", str(profile_file),
                               "--draft-revision", commit, "--hf-cache", str(tmp_path / "cache"), "--levels",
                               "structure,format,reproduction", "--report-dir", str(reports)],
                              cwd=REPO, capture_output=True, text=True, timeout=300, env=env)
    assert TRACEBACK not in proc.stdout + proc.stderr
    (path,) = reports.glob("*/report.json")
    run = read_json(path)
    identity = run.source["identity"]
    if not served_other:
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert identity["status"] == "verified" and identity["method"] == "hub cache snapshot and hub"
        assert (identity["repo"], identity["revision"]) == (profile.source_repo, profile.source_revision)
    else:
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert identity["status"] == "not verified" and identity["repo"] is None
        check = next(c for lvl in run.levels for c in lvl.checks if c.id == "structure.source_identity")
        assert check.status is Status.FAILED
        assert any(f.file == "model.safetensors" and "not the file it names" in f.message
                   for f in check.evidence.findings), check.evidence.findings


@pytest.mark.slow
def test_a_profile_serving_from_its_runtime_starts_no_local_server_and_fails_with_the_runtimes_reason(
        tmp_path: Path) -> None:
    """fixture-dflash-cpu: the serving levels talk to the runtime container; one that cannot start fails them."""
    cpu = REPO / "fixtures" / "dflash-cpu"
    venv = tmp_path / "venv"
    venv.mkdir()
    (venv / "pyvenv.cfg").write_text(f"home = {Path(sys.executable).parent}\n")
    reports = tmp_path / "reports"
    # An image digest that is not the local image's: the container is refused before anything starts.
    proc = subprocess.run([sys.executable, "-m", "qualify.cli", "run", "--profile", "fixture-dflash-cpu",
                           "--report-dir", str(reports), "--checkpoint", str(cpu / "mxfp8"), "--source",
                           str(cpu / "source"), "--levels", "smoke,paired", "--image-digest", "sha256:" + "0" * 64],
                          cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "QUALIFY_VLLM_VENV": str(venv)})
    assert TRACEBACK not in proc.stderr, proc.stderr[-3000:]
    (path,) = reports.glob("*/report.json")
    run = read_json(path)
    assert proc.returncode == 1 and run.verdict is Verdict.NOT_QUALIFIED
    first, *rest = run.level("smoke").checks
    assert first.status is Status.FAILED and first.message == "the runtime did not start"
    assert first.evidence is not None and "not started: load.image_pinned failed" in first.evidence.failure_text()
    assert rest and all(c.status is Status.NOT_RUN and f"(see {first.id})" in c.message for c in rest)
    assert run.level("paired").status is Status.NOT_RUN
    assert run.level("paired").reason.startswith("not run: level smoke failed")
    # No local vLLM server was started in its stead; the runtime's record names the launch that was refused.
    assert "local_server" not in run.environment and not list(path.parent.glob("vllm-*.log"))
    # Launched as the release run is: no per-request metrics flag (the published launcher takes none).
    assert "PER_REQUEST_SPEC_DECODE_METRICS" not in run.environment["runtime"]["plan"]["env"]
    assert run.environment["runtime"]["plan"]["env"]["CUDAGRAPH_MODE"] == "NONE"
    assert run.environment["runtime"]["companions"] == {}


def test_a_target_folder_is_refused_for_a_profile_serving_from_its_runtime(tmp_path: Path) -> None:
    opts = _opts(tmp_path, profile=load_profile("fixture-dflash-cpu"), target=tmp_path / "target")
    with pytest.raises(UsageError, match=r"--target is for local vLLM servers; profile fixture-dflash-cpu serves "
                                         r"from its runtime containers"):
        run_qualification(opts)
    assert not (tmp_path / "reports").exists()


def test_a_hand_built_hub_cache_draft_offline_is_only_claimed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A snapshot folder named after the commit proves nothing offline: the revision stays a claim."""
    commit = "5555555555555555555555555555555555555555"
    profile = load_profile("fixture")
    repo = profile.data["checkpoint"]["repo"]
    snapshot = tmp_path / "cache" / f"models--{repo.replace('/', '--')}" / "snapshots" / commit
    shutil.copytree(FIXTURE / "mxfp8", snapshot)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    opts = _opts(tmp_path, checkpoint=None, draft_revision=commit, hf_cache=tmp_path / "cache",
                 levels=["structure"])
    run, _, _ = run_qualification(opts)
    assert run.checkpoint["obtained"] == "hub" and run.checkpoint["revision"] == commit
    assert run.checkpoint["revision_verified_by"] is None
    assert run.checkpoint["revision_verification"].startswith("only claimed: not compared with the hub")
